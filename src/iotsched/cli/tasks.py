"""`iotsched tasks apply|list|show`: task definitions from YAML files (validated whole before
anything is written), listed and shown with their next fire instants.

The `tasks` group also holds the verbs of `cli.task_control` (pause, resume, delete) and of
`cli.audit` (history, rollback), added by `cli.main`. These verbs use the target's stores alone.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import click
import yaml
from rich.table import Table

from iotsched.cli import api as via_api
from iotsched.cli.api import api_client
from iotsched.cli.output import (
    actor,
    emit,
    fail_cleanly,
    json_option,
    no_such,
    out,
    stores,
    styled,
    tenant_option,
)
from iotsched.cli.task_files import file_problems, load_task_file
from iotsched.core.paging import filled_page
from iotsched.core.value_types import passes_tenant_filter
from iotsched.ports.audit import (
    TaskConflictError,
    TaskQuotaError,
)
from iotsched.services.definitions.apply import apply_task_file
from iotsched.services.definitions.task_file import TaskFileError
from iotsched.services.operations.views import (
    task_view,
    upcoming_fires,
)
from iotsched.tasklib import registry


@click.group()
def tasks() -> None:
    """Task definitions (YAML files, validated before anything is written)."""


def _applied_lines(result: dict[str, list[str]]) -> None:
    for key, ids in result.items():
        if ids:
            out.print(f"{key}: {', '.join(ids)}")


@tasks.command("apply")
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--dry-run", is_flag=True, help="Validate only.")
@json_option
@click.pass_context
@fail_cleanly
def tasks_apply(ctx: click.Context, file: Path, dry_run: bool, as_json: bool) -> None:
    """Validate FILE, then create or update all of its tasks (or none)."""
    data = load_task_file(file)
    try:
        applied = apply_task_file(
            data,
            handlers=registry(),
            store=lambda: stores(ctx).tasks,
            # the deployment's clock, read only when something is written
            now=lambda: stores(ctx).clock.now(),
            dry_run=dry_run,
            actor=actor(ctx) if not dry_run else "",
        )
    except TaskFileError as exc:
        raise file_problems(file, exc) from None
    except (TaskQuotaError, TaskConflictError) as exc:
        raise click.ClickException(f"{file}: {exc}") from None
    result = (
        {"valid": applied.valid}
        if applied.dry_run
        else {
            "calendars": applied.calendars,
            "created": applied.created,
            "updated": applied.updated,
            "unchanged": applied.unchanged,
        }
    )
    emit(result, as_json, _applied_lines)


def _task_table(views: list[dict[str, Any]]) -> None:
    table = Table("task", "tenant", "handler", "trigger", "tz", "sharding", "next fire (UTC)", "on")
    for v in views:
        trigger = ", ".join(f"{k}={val}" for k, val in v["trigger"].items())
        table.add_row(
            v["id"],
            v["tenant"] or "-",
            v["handler"],
            trigger,
            v["timezone"],
            v["sharding"],
            v["next_fire"] or "-",
            ("paused*" if v["pause_note"] else "paused")
            if v["paused"] or not v["enabled"]
            else "yes",
        )
    out.print(table)
    noted = [v for v in views if v["paused"] and v["pause_note"]]
    for v in noted:  # `paused*`: why, one line each
        out.print(f"* {v['id']}: {v['pause_note']}")


@tasks.command("list")
@click.option("--after", metavar="TASK", help="Only the tasks whose id sorts after TASK.")
@click.option("--limit", type=click.IntRange(min=1), help="At most this many (default: all).")
@tenant_option("tasks")
@json_option
@click.pass_context
@fail_cleanly
def tasks_list(
    ctx: click.Context, after: str | None, limit: int | None, tenant: str | None, as_json: bool
) -> None:
    """Tasks with their trigger, next fire time and state, in id order."""
    client = api_client(ctx)
    if client is not None:
        emit(via_api.tasks_list(client, after, limit, tenant), as_json, _task_table)
        return
    store = stores(ctx).tasks
    if tenant is None:
        found = store.list_tasks(after=after, limit=limit)
    elif limit is None:
        found = [
            t
            for t in store.list_tasks(after=after)
            if passes_tenant_filter(t.definition.tenant, tenant)
        ]
    else:
        found = filled_page(
            lambda cursor, n: store.list_tasks(after=cursor, limit=n),
            lambda t: passes_tenant_filter(t.definition.tenant, tenant),
            lambda t: t.task_id,
            limit,
            start=after,
        )
    emit([task_view(t) for t in found], as_json, _task_table)


@tasks.command("show")
@click.argument("task_id")
@json_option
@click.pass_context
@fail_cleanly
def tasks_show(ctx: click.Context, task_id: str, as_json: bool) -> None:
    """TASK_ID's definition, state and next 5 fire times in its timezone and in UTC."""
    from iotsched.core.triggers import load_zone

    client = api_client(ctx)
    if client is not None:
        emit(via_api.tasks_show(client, task_id), as_json, _task_detail)
        return
    task = stores(ctx).tasks.get_task(task_id)
    if task is None:
        raise no_such("task", task_id)
    zone = load_zone(task.definition.timezone)
    # fire instants: each slot moved by its jitter and window, excluded dates left out
    upcoming = upcoming_fires(task.model_copy(update={"paused": False}))
    view = {
        **task_view(task),
        "definition": task.definition.model_dump(mode="json", exclude_defaults=True),
        "next_fires": [
            {"local": slot.astimezone(zone).isoformat(), "utc": slot.isoformat()}
            for slot in upcoming
        ],
    }
    emit(view, as_json, _task_detail)


def _task_detail(view: dict[str, Any]) -> None:
    """`tasks show` as text, from its JSON (the zone's abbreviations, CET or CEST, from the
    task's timezone: the ISO instants do not hold them)."""
    from iotsched.core.triggers import load_zone

    zone = load_zone(view["timezone"])
    definition = view["definition"]
    state = "paused" if view["paused"] else "active"
    out.print(
        styled(view["id"], "bold")
        + f" (version {view['version']}, {state}): {definition.get('description', '')}"
    )
    if view["paused"] and view["pause_note"]:
        out.print(f"paused: {view['pause_note']}")
    out.print(yaml.safe_dump(definition, sort_keys=False).rstrip())
    table = Table(f"next fires ({view['timezone']})", "UTC")
    upcoming = [datetime.fromisoformat(f["utc"]) for f in view["next_fires"]]
    for slot in upcoming:
        table.add_row(
            slot.astimezone(zone).strftime("%Y-%m-%d %H:%M %Z"),
            slot.strftime("%Y-%m-%d %H:%M"),
        )
    out.print(
        table if upcoming else "no further fire time (paused, one-time done, or after-trigger)"
    )
    if view["stop_reason"]:
        out.print(f"stopped: {view['stop_reason']}")
    if view["excluded_dates"]:
        excluded = ", ".join(f"{d} ({by})" for d, by in view["excluded_dates"].items())
        out.print(f"excluded dates: {excluded}")
