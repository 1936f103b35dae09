"""`iotsched logs`: what a shard's handler logged, attempt by attempt."""

from __future__ import annotations

import json
import time
from typing import Any

import click
from rich.text import Text

from iotsched.cli import api as via_api
from iotsched.cli.api import api_client
from iotsched.cli.output import (
    STATUS_STYLE,
    BadInputError,
    emit,
    fail_cleanly,
    json_option,
    no_such,
    out,
    services,
    styled,
)
from iotsched.core.logs import LogLine, line_text
from iotsched.services.operations.logs import (
    AttemptNotFoundError,
    LogRead,
    read_log,
)
from iotsched.services.wiring import Wiring

#: How often `--follow` reads the shard's record again.
FOLLOW_INTERVAL_S = 2.0


@click.command()
@click.argument("instance_id")
@click.option("--shard", type=click.IntRange(min=0), help="Only this shard (its index).")
@click.option(
    "--attempt",
    type=click.IntRange(min=1),
    help="This attempt of --shard (default: its latest).",
)
@click.option(
    "--follow",
    is_flag=True,
    help="Wait for the shard's attempts to end, printing each one's lines as it does, until "
    "the shard is final.",
)
@click.option(
    "--interval",
    type=click.FloatRange(min=0.1),
    default=FOLLOW_INTERVAL_S,
    show_default=True,
    hidden=True,
    help="Seconds between --follow's reads.",
)
@json_option
@click.pass_context
@fail_cleanly
def logs(
    ctx: click.Context,
    instance_id: str,
    shard: int | None,
    attempt: int | None,
    follow: bool,
    interval: float,
    as_json: bool,
) -> None:
    """What INSTANCE_ID's handlers logged: each shard's latest attempt, or one shard's
    (--shard) latest attempt or --attempt K.

    Lines come from the attempt's log object when the record's tail lacks some, else from the
    record. A log is written when its attempt ends: --follow prints each attempt of the shard
    as it ends, until the shard is final.
    """
    if attempt is not None and shard is None:
        raise BadInputError("--attempt needs --shard (attempts are numbered per shard)")
    client = api_client(ctx)
    if client is not None:
        if follow:
            via_api.follow(
                client,
                instance_id,
                shard,
                attempt,
                interval=interval,
                as_json=as_json,
                print_one=_print_one,
            )
        elif shard is not None:
            emit(via_api.log_of(client, instance_id, shard, attempt), as_json, _print_one)
        else:
            emit(via_api.logs_of_all(client, instance_id), as_json, _print_all)
        return
    svc = services(ctx)
    inst = svc.instances.get_instance(instance_id)
    if inst is None:
        raise no_such("instance", instance_id, " (ids look like task@2026-11-29T12:00Z)")
    if follow and shard is None:
        if inst.plan.count != 1:
            raise BadInputError(f"--follow needs --shard ({instance_id} has {inst.plan.count})")
        shard = 0
    if follow:
        assert shard is not None
        _follow(svc, instance_id, shard, attempt, interval=interval, as_json=as_json)
        return
    if shard is not None:
        emit(_read(svc, instance_id, shard, attempt).view(), as_json, _print_one)
        return
    reads = [
        read_log(instance_id, record.index, None, svc)
        for record in sorted(svc.instances.list_shards(instance_id), key=lambda r: r.index)
        if record.attempts
    ]
    emit([r.view() for r in reads], as_json, _print_all)


def _read(svc: Wiring, instance_id: str, shard: int, attempt: int | None) -> LogRead:
    try:
        return read_log(instance_id, shard, attempt, svc)
    except AttemptNotFoundError as exc:
        raise BadInputError(str(exc)) from None


def _follow(
    svc: Wiring,
    instance_id: str,
    shard: int,
    attempt: int | None,
    *,
    interval: float,
    as_json: bool,
) -> None:
    """Print each ended attempt of the shard (from `attempt` on) once, until the shard is
    final; then the last one, if it never ended (a lost attempt is ended by its takeover)."""
    printed: set[int] = set()
    first = attempt or 1
    while True:
        record = svc.instances.get_shard(instance_id, shard)
        if record is not None:
            for found in record.attempts:
                if found.number < first or found.number in printed or found.outcome is None:
                    continue
                if attempt is not None and found.number != attempt:
                    continue
                printed.add(found.number)
                read = read_log(instance_id, shard, found.number, svc)
                if as_json:
                    click.echo(json.dumps(read.view(), default=str))
                else:
                    _print_one(read.view())
            done = record.status.final or (attempt is not None and attempt in printed)
            if done:
                return
        else:
            inst = svc.instances.get_instance(instance_id)
            if inst is None or inst.status.final:  # ended before the shard ever started
                out.print(f"{instance_id} shard {shard} never started")
                return
        time.sleep(interval)


def _print_all(views: list[dict[str, Any]]) -> None:
    if not views:
        out.print("no shard has started")
    for view in views:
        _print_one(view)


def _print_one(view: dict[str, Any]) -> None:
    outcome = view["outcome"] or "running"
    header = Text.assemble(
        f"{view['instance_id']} shard {view['shard']} attempt {view['attempt']}: ",
        styled(outcome, STATUS_STYLE.get(outcome, "")),
        f" ({view['line_count']} lines, {view['byte_count']} bytes)",
    )
    out.print(header)
    if view["source"] == "none":
        out.print("  (logged nothing)" if view["outcome"] else "  (still running)")
    for line in view["lines"]:
        click.echo(f"  {line_text(LogLine.model_validate(line))}")
    if not view["complete"]:
        left = view["line_count"] - len(view["lines"])
        why = view["object_error"] or view["note"] or "the log object is missing"
        out.print(f"  ... the last {len(view['lines'])} lines; {left} earlier: {why}")
    elif view["note"]:
        out.print(f"  ({view['note']})")
    if view["insights_query"]:
        out.print(f"  CloudWatch: {view['log_group']} {view['log_stream']}")
        out.print(f"  Logs Insights: {view['insights_query']}")
