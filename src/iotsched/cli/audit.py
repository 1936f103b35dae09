"""`iotsched audit`, `iotsched tasks history` and `iotsched tasks rollback`: who changed what,
a task's versions, and making an earlier version the current one. They use the target's stores
alone."""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table

from iotsched.cli import api as via_api
from iotsched.cli.api import api_client
from iotsched.cli.output import (
    BadInputError,
    actor,
    emit,
    fail_cleanly,
    json_option,
    no_such,
    out,
    stores,
)
from iotsched.ports.audit import TaskConflictError
from iotsched.services.definitions.control import TaskNotFoundError
from iotsched.services.definitions.history import (
    VersionNotFoundError,
    audit_window,
    rollback_task,
    task_history,
)
from iotsched.services.definitions.task_file import TaskFileError
from iotsched.tasklib import registry


def _diff_text(diff: dict[str, list[Any]]) -> str:
    return "; ".join(f"{field}: {before!r} -> {after!r}" for field, (before, after) in diff.items())


@click.command("history")
@click.argument("task_id")
@json_option
@click.pass_context
@fail_cleanly
def tasks_history(ctx: click.Context, task_id: str, as_json: bool) -> None:
    """The versions of TASK_ID: who wrote each, when, and what it changed."""
    try:
        views = task_history(task_id, stores(ctx).tasks)
    except TaskNotFoundError:
        raise no_such("task", task_id) from None

    def table(rows: list[dict[str, Any]]) -> None:
        grid = Table("version", "at (UTC)", "by", "verb", "changed")
        for v in rows:
            mark = " (current)" if v["current"] else ""
            grid.add_row(
                f"{v['version']}{mark}", v["at"], v["actor"], v["verb"], _diff_text(v["diff"])
            )
        out.print(grid)

    emit([v.as_json() for v in views], as_json, table)


@click.command("rollback")
@click.argument("task_id")
@click.option("--to", "version", type=click.IntRange(min=1), required=True, help="The version.")
@json_option
@click.pass_context
@fail_cleanly
def tasks_rollback(ctx: click.Context, task_id: str, version: int, as_json: bool) -> None:
    """Make version --to of TASK_ID the current definition, as a new version."""
    try:
        applied = rollback_task(
            task_id,
            stores(ctx).tasks,
            to=version,
            handlers=registry(),
            now=stores(ctx).clock.now,
            actor=actor(ctx),
        )
    except TaskNotFoundError:
        raise no_such("task", task_id) from None
    except (VersionNotFoundError, TaskFileError) as exc:
        raise BadInputError(str(exc)) from None
    except TaskConflictError as exc:
        raise click.ClickException(str(exc)) from None
    task = stores(ctx).tasks.get_task(task_id)
    result = {
        "task_id": task_id,
        "rolled_back_to": version,
        "changed": bool(applied.updated),
        "version": task.version if task else None,
    }

    def line(r: dict[str, Any]) -> None:
        if r["changed"]:
            out.print(f"{task_id}: version {r['version']} is version {version}'s definition")
        else:
            out.print(f"{task_id}: version {version}'s definition is already the current one")

    emit(result, as_json, line)


@click.command()
@click.option("--task", "task_id", help="Only this task's records (or calendar:NAME).")
@click.option(
    "--since", help="ISO date or instant (UTC unless it has an offset); default a day ago."
)
@click.option("--until", help="ISO date or instant, exclusive; default now.")
@click.option("--limit", type=click.IntRange(min=1), default=200, show_default=True)
@json_option
@click.pass_context
@fail_cleanly
def audit(
    ctx: click.Context,
    task_id: str | None,
    since: str | None,
    until: str | None,
    limit: int,
    as_json: bool,
) -> None:
    """Who changed what and when, oldest first: applies, pauses, runs, cancels, rollbacks..."""
    client = api_client(ctx)
    if client is not None:
        rows = via_api.audit(client, task_id, since, until, limit)
        window = f"from {since or 'a day before --until'} to {until or 'now'}"
    else:
        try:
            start, end = audit_window(since, until, now=stores(ctx).clock.now())
        except ValueError as exc:
            raise BadInputError(str(exc)) from None
        found = stores(ctx).tasks.list_audit(since=start, until=end, subject=task_id, limit=limit)
        rows = [r.model_dump(mode="json") for r in found]
        window = f"from {start.isoformat()} to {end.isoformat()}"

    def table(rows: list[dict[str, Any]]) -> None:
        grid = Table("at (UTC)", "by", "verb", "subject", "state", "instances", "changed")
        for r in rows:
            what = _diff_text(r["diff"])
            if r.get("note"):
                what = f"{what}; note {r['note']!r}" if what else f"note {r['note']!r}"
            if r.get("detail"):
                what = f"{what}; {r['detail']}" if what else r["detail"]
            grid.add_row(
                r["at"],
                r["actor"],
                r["verb"],
                r["subject"],
                r["state"],
                ", ".join(r["instance_ids"]) or "-",
                what or "-",
            )
        out.print(grid)
        out.print(f"{len(rows)} record(s) {window}")

    emit(rows, as_json, table)
