"""`iotsched times`: when a cron expression fires (local time and UTC, DST moves marked), or
when a task's next slots fire: jitter, window waits, excluded dates and where it stops.

A task comes from the deployment's stores or from a task file (as if applied now).
"""

from __future__ import annotations

from datetime import datetime
from itertools import islice
from pathlib import Path
from typing import Any

import click
from rich.table import Table
from rich.text import Text

from iotsched.cli.output import (
    BadInputError,
    emit,
    fail_cleanly,
    json_option,
    no_such,
    out,
    stores,
    styled,
)
from iotsched.cli.task_files import file_problems, load_task_file
from iotsched.clock import SystemClock
from iotsched.core.task_record import TaskRecord
from iotsched.core.trigger_text import describe_trigger
from iotsched.services.definitions.task_file import TaskFileError
from iotsched.tasklib import registry

#: The most slots `times --task` shows.
MAX_TIMES = 1000


@click.command()
@click.argument("cron", required=False)
@click.option("--timezone", "zone", default="UTC", show_default=True, help="IANA timezone.")
@click.option("--task", "task_id", help="Show this task's fires (from --file, or the deployment).")
@click.option("--file", "task_file", type=click.Path(path_type=Path), help="Task file for --task.")
@click.option(
    "--from", "start", help="ISO instant (with offset), exclusive; a task: default its clock."
)
@click.option("--to", "end", help="ISO instant (with offset), inclusive.")
@click.option(
    "--count",
    type=click.IntRange(min=1, max=MAX_TIMES),
    default=10,
    show_default=True,
    help="A task: how many slots to show.",
)
@json_option
@click.pass_context
@fail_cleanly
def times(
    ctx: click.Context,
    cron: str | None,
    zone: str,
    task_id: str | None,
    task_file: Path | None,
    start: str | None,
    end: str | None,
    count: int,
    as_json: bool,
) -> None:
    """Fire instants of CRON in local time and UTC, with DST moves marked; or, with --task,
    a task's next slots with their fire instants: jitter offsets, window waits, excluded
    dates (and what excluded them), and where max_runs or end_at stop it."""
    from iotsched.core.timeline import explain_cron
    from iotsched.core.timeutil import parse_iso
    from iotsched.core.triggers import TriggerError

    try:
        since = parse_iso(start) if start else None
        until = parse_iso(end) if end else None
    except ValueError as exc:
        raise BadInputError(str(exc)) from None
    if task_id:
        record = _task_for_times(ctx, task_id, task_file)
        _task_times(record, since, until, count, as_json, fresh=task_file is not None)
        return
    if not cron:
        raise BadInputError("give a CRON expression or --task")
    if since is None or until is None:
        raise BadInputError("give --from and --to for a CRON expression")
    try:
        lines = explain_cron(cron, zone, since, until)
    except (TriggerError, ValueError) as exc:
        raise BadInputError(str(exc)) from None

    def table(_: object) -> None:
        # from the lines: the local column names the zone's abbreviation (CET, CEST)
        shown = Table(f"local ({zone})", "UTC", "note", title=f"{cron}")
        for line in lines:
            shown.add_row(
                line.local.strftime("%Y-%m-%d %H:%M %Z"),
                line.utc.strftime("%Y-%m-%d %H:%M")
                if line.utc
                else styled("- (does not fire)", "dim"),
                line.note,
            )
        out.print(shown)

    emit(
        [
            {
                "utc": line.utc.isoformat() if line.utc else None,
                "local": line.local.isoformat(),
                "note": line.note,
            }
            for line in lines
        ],
        as_json,
        table,
    )


def _task_for_times(ctx: click.Context, task_id: str, task_file: Path | None) -> TaskRecord:
    """The task `times` shows: stored, or from a task file (as if applied now, its named
    calendars from the file, else from the deployment); unknown ones exit 2."""
    from iotsched.services.definitions.calendars import check_calendars, resolve_calendars
    from iotsched.services.definitions.task_file import parse_file

    if task_file is None:
        record = stores(ctx).tasks.get_task(task_id)
        if record is None:
            raise no_such("task", task_id)
        return record
    data = load_task_file(task_file)
    try:
        parsed = parse_file(data, handlers=registry())
    except TaskFileError as exc:
        raise file_problems(task_file, exc) from None
    found = [d for d in parsed.tasks if d.id == task_id]
    if not found:
        raise no_such("task", task_id, f" in {task_file}")
    definition = found[0]
    calendars = {c.name: c for c in parsed.calendars}
    for name in definition.exclude.calendars:
        if name not in calendars:
            stored = stores(ctx).tasks.get_calendar(name)
            if stored is not None:
                calendars[name] = stored
    try:
        check_calendars([definition], calendars, lambda: [])
    except TaskFileError as exc:
        raise file_problems(task_file, exc) from None
    now = SystemClock().now()
    return TaskRecord(
        definition=definition,
        version=1,
        next_fire=None,
        updated_at=now,
        calendars=resolve_calendars(definition, calendars),
    )


def _task_times(
    record: TaskRecord,
    since: datetime | None,
    until: datetime | None,
    count: int,
    as_json: bool,
    *,
    fresh: bool,
) -> None:
    """The task's next `count` slots, up to `until`: from its stored clock, or (`fresh`, or
    `since` given) from a clock started at `since` (default now)."""
    from iotsched.core.fires import Fire, runs_of, start_clock, stop_reason, upcoming
    from iotsched.core.triggers import load_zone

    definition = record.definition
    zone = load_zone(definition.timezone)
    runs = record.runs
    next_fire, last_slot = record.next_fire, record.last_slot
    if since is not None or fresh:
        # A fresh clock from `since` (default now), as applying the task then would start it.
        since = since or SystemClock().now()
        next_fire, last_slot = start_clock(definition, since, calendars=record.calendars, runs=runs)
    fires = upcoming(
        definition, next_fire=next_fire, last_slot=last_slot, runs=runs, calendars=record.calendars
    )
    rows: list[dict[str, Any]] = []
    listed: list[Fire] = []
    ended = True  # the listing ran out of slots: the grid ended, or max_runs / end_at
    for fire in islice(fires, MAX_TIMES * 100):
        if until is not None and fire.slot > until:
            ended = False
            break
        listed.append(fire)
        rows.append(
            {
                "slot": fire.slot.isoformat(),
                "slot_local": fire.slot.astimezone(zone).isoformat(),
                "jitter_s": fire.offset_s,
                "fire_at": None if fire.excluded_by else fire.fire_at.isoformat(),
                "window_wait_s": int(fire.window_wait.total_seconds()),
                "excluded_by": fire.excluded_by,
            }
        )
        if len(rows) == count:
            ended = False
            break
    stop = None
    if ended:
        made = runs + runs_of(definition, listed)
        stop = stop_reason(definition, made, None) or "the trigger has no further slot"
    view = {
        "task": definition.id,
        "timezone": definition.timezone,
        "jitter_s": definition.jitter_s,
        "window": definition.window.model_dump(mode="json") if definition.window else None,
        "runs": runs,
        "max_runs": definition.max_runs,
        "end_at": definition.end_at.isoformat() if definition.end_at else None,
        "fires": rows,
        "stop": stop,
    }

    def table(_: object) -> None:
        shown = Table(
            f"slot ({definition.timezone})",
            "slot UTC",
            "jitter",
            "fires at (UTC)",
            "note",
            title=f"{definition.id}: {describe_trigger(definition.trigger)}",
        )
        for row in rows:
            slot = datetime.fromisoformat(row["slot"])
            fires_at: str | Text
            if row["excluded_by"]:
                fires_at, note = styled("- (not fired)", "dim"), f"excluded: {row['excluded_by']}"
            else:
                fires_at = datetime.fromisoformat(row["fire_at"]).strftime("%Y-%m-%d %H:%M")
                wait = row["window_wait_s"]
                note = f"waits {_span(wait)} for the window" if wait else ""
            shown.add_row(
                slot.astimezone(zone).strftime("%Y-%m-%d %H:%M %Z"),
                slot.strftime("%Y-%m-%d %H:%M"),
                f"+{row['jitter_s']}s" if row["jitter_s"] else "-",
                fires_at,
                note,
            )
        out.print(shown)
        if stop:
            out.print(f"then no further fire: {stop}")

    emit(view, as_json, table)


def _span(seconds: int) -> str:
    """`13h00m`, `45m`."""
    hours, minutes = divmod(seconds // 60, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m"
