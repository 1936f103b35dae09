"""The verbs that go through the management API when `--api-url` (or `IOTSCHED_API_URL`) is
given: `tasks list`, `tasks show`, `instances`, `shards`, `logs`, `audit`, `run`, `cancel`.

Each returns the dict its verb prints with `--json` through the direct path (the same keys, the
API's views adding a few of their own), so one human form prints both. Every other verb reads
and writes the deployment directly, as without the option.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from datetime import date, datetime
from itertools import islice
from typing import Any
from urllib.parse import urlsplit

import click

from iotsched.api.models import ShardView
from iotsched.cli.output import BadInputError, out
from iotsched.cli.target import Target
from iotsched.client import Client
from iotsched.core.instance_record import InstanceStatus
from iotsched.core.shard_record import ShardStatus
from iotsched.core.triggers import load_zone


def api_client(ctx: click.Context) -> Client | None:
    """The client of the API `--api-url` names (None without it): SigV4-signed with the
    target's AWS credentials for an https URL, plain HTTP for an http one (the local
    runtime's port, `http://127.0.0.1:8000/api`). Built once per command."""
    target: Target = ctx.obj["target"]
    if not target.api_url:
        return None
    built: Client | None = ctx.obj.get("client")
    if built is None:
        try:
            if urlsplit(target.api_url).scheme == "https":
                built = Client.aws(target.api_url, session=target.session(), region=target.region)
            else:
                built = Client(target.api_url)
        except ValueError as exc:  # not an http(s) URL; no region to sign for
            raise BadInputError(f"--api-url: {exc}") from None
        ctx.obj["client"] = built
    return built


def tasks_list(
    client: Client, after: str | None, limit: int | None, tenant: str | None
) -> list[dict[str, Any]]:
    """`tasks list`: the API filters by tenant (`-`: the tasks without one) as the stores do."""
    found: Iterator[Any] = client.tasks(after=after, tenant=tenant)
    return [t.model_dump(mode="json") for t in islice(found, limit)]


def tasks_show(client: Client, task_id: str) -> dict[str, Any]:
    """`tasks show`: the definition as the task file writes it, the next fires in the task's
    zone and in UTC (none while paused: the API lists the fires the tick will make)."""
    detail = client.task(task_id)
    zone = load_zone(detail.timezone)
    fires = [datetime.fromisoformat(f) for f in detail.next_fires]
    return {
        **detail.model_dump(mode="json", exclude={"definition", "next_fires"}),
        "definition": detail.definition.model_dump(mode="json", exclude_defaults=True),
        "next_fires": [
            {"local": f.astimezone(zone).isoformat(), "utc": f.isoformat()} for f in fires
        ],
    }


def instances(
    client: Client,
    task: str | None,
    status: str | None,
    limit: int,
    before: str | None,
    tenant: str | None,
) -> list[dict[str, Any]]:
    """`instances`: newest first, `limit` of them after `before`."""
    found: Iterator[Any] = client.instances(
        task,
        status=InstanceStatus(status) if status else None,
        tenant=tenant,
        before=before,
        page_size=min(limit, 500),
    )
    return [i.model_dump(mode="json") for i in islice(found, limit)]


def shards(client: Client, instance_id: str) -> dict[str, Any]:
    """`shards`: the instance and every shard (page after page)."""
    first = client.shard_page(instance_id)
    listed = list(first.shards)
    if first.next_start is not None:
        listed += list(client.shards(instance_id, start=first.next_start))
    return {
        "instance": first.instance.model_dump(mode="json"),
        "shards": [s.model_dump(mode="json") for s in listed],
    }


def logs_of_all(client: Client, instance_id: str) -> list[dict[str, Any]]:
    """`logs INSTANCE`: each started shard's latest attempt."""
    return [
        client.logs(instance_id, s.index).model_dump(mode="json")
        for s in client.shards(instance_id)
        if s.attempts
    ]


def log_of(client: Client, instance_id: str, shard: int, attempt: int | None) -> dict[str, Any]:
    """`logs INSTANCE --shard N [--attempt K]`."""
    return client.logs(instance_id, shard, attempt=attempt).model_dump(mode="json")


def _shard(client: Client, instance_id: str, shard: int) -> tuple[ShardView | None, int]:
    page = client.shard_page(instance_id, start=shard, limit=1)
    return (page.shards[0] if page.shards else None), page.total


def _final(shard: ShardView) -> bool:
    status = shard.status
    return status == "not_rerun" or (isinstance(status, ShardStatus) and status.final)


def follow(
    client: Client,
    instance_id: str,
    shard: int | None,
    attempt: int | None,
    *,
    interval: float,
    as_json: bool,
    print_one: Callable[[dict[str, Any]], None],
) -> None:
    """`logs --follow`: each ended attempt of the shard once, until the shard is final."""
    found, total = _shard(client, instance_id, shard or 0)
    if shard is None:
        if total != 1:
            raise BadInputError(f"--follow needs --shard ({instance_id} has {total})")
        shard = 0
    if found is None:
        raise BadInputError(f"{instance_id} has no shard {shard} (it has {total})")
    printed: set[int] = set()
    first = attempt or 1
    while True:
        for entry in found.attempts:
            number = entry.number
            if number < first or number in printed or entry.outcome is None:
                continue
            if attempt is not None and number != attempt:
                continue
            printed.add(number)
            view = log_of(client, instance_id, shard, number)
            if as_json:
                click.echo(json.dumps(view, default=str))
            else:
                print_one(view)
        if _final(found) or (attempt is not None and attempt in printed):
            if not found.attempts:
                out.print(f"{instance_id} shard {shard} never started")
            return
        time.sleep(interval)
        found = _shard(client, instance_id, shard)[0] or found  # shards are never removed


def audit(
    client: Client, task_id: str | None, since: str | None, until: str | None, limit: int
) -> list[dict[str, Any]]:
    """`audit`: the records of [since, until), oldest first."""
    found = client.audit(task=task_id, since=since, until=until, limit=limit)
    return [r.model_dump(mode="json") for r in found]


def run(
    client: Client,
    task_id: str,
    *,
    business_date: date | None,
    params: dict[str, Any] | None,
    request_id: str | None,
    priority: str | None,
) -> dict[str, Any]:
    """`run`: the instance the run claimed (or the one it met: `exists`)."""
    result = client.run(
        task_id,
        business_date=business_date,
        params=params,
        request_id=request_id,
        priority=priority,
    )
    return result.instance.model_dump(mode="json")


def cancel(client: Client, instance_id: str, reason: str) -> dict[str, Any]:
    """`cancel`: the instance, ended."""
    return client.cancel(instance_id, reason=reason).model_dump(mode="json")
