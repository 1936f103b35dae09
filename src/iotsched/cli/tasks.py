"""`iotsched tasks apply|list|show|pause|resume|delete` and `iotsched times`: task definitions
(YAML files, validated whole before anything is written) and their fire instants."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from itertools import islice
from pathlib import Path
from typing import Any

import click
import yaml
from rich.table import Table
from rich.text import Text

from iotsched.cli import api as via_api
from iotsched.cli.api import api_client
from iotsched.cli.output import (
    BadInputError,
    actor,
    emit,
    err,
    fail_cleanly,
    json_option,
    no_such,
    out,
    services,
    styled,
)
from iotsched.clock import SystemClock
from iotsched.core.model import TaskDefinition
from iotsched.core.paging import filled_page
from iotsched.core.records import MAX_NOTE_CHARS, TaskRecord
from iotsched.core.trigger_text import describe_trigger
from iotsched.ports.audit import (
    TaskConflictError,
    TaskQuotaError,
)
from iotsched.services.definitions.apply import (
    TaskFileError,
    apply_task_file,
    parse_task_file,
)
from iotsched.services.fleet.pausing import (
    PauseNoteError,
    checked_note,
)
from iotsched.services.operations.actions import (
    TaskNotFoundError,
    pause_task,
    resume_task,
)
from iotsched.services.operations.views import (
    task_view,
    upcoming_fires,
)
from iotsched.services.wiring import Wiring
from iotsched.tasklib import registry


@click.group()
def tasks() -> None:
    """Task definitions (YAML files, validated before anything is written)."""


def yaml_problem(path: Path, text: str, exc: yaml.YAMLError) -> str:
    """PyYAML's error as one line: `tasks.yaml:3:5: not valid YAML: problem (context at 2:3)`."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}"
        problem = exc.problem or "unexpected content"
        if exc.context and exc.context_mark is not None:
            context = exc.context_mark
            problem += f" ({exc.context} at {context.line + 1}:{context.column + 1})"
        return f"{where}: not valid YAML: {problem}"
    if isinstance(exc, yaml.reader.ReaderError):  # a control character: no mark, an offset
        line = text.count("\n", 0, exc.position) + 1
        column = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
        character = exc.character if isinstance(exc.character, int) else ord(exc.character)
        return f"{path}:{line}:{column}: not valid YAML: {exc.reason} (#x{character:04x})"
    return f"{path}: not valid YAML: {' '.join(str(exc).split())}"


def load_task_file(path: Path) -> Any:
    """A task file's YAML, parsed (not yet validated); a file that cannot be read exits 2."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise BadInputError(f"{path}: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise BadInputError(
            f"{path}: not UTF-8: byte 0x{raw[exc.start]:02x} at byte offset {exc.start} "
            f"(line {line}); save the file as UTF-8"
        ) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise BadInputError(yaml_problem(path, text, exc)) from None


def file_problems(path: Path, exc: TaskFileError) -> BadInputError:
    """Print each problem of a task file on its own line; the error to exit 2 with."""
    for problem in exc.problems:
        err.print(styled("error", "red") + f": {path}: {problem}")
    return BadInputError(f"{path}: {len(exc.problems)} problem(s); nothing was written")


def read_task_file(path: Path) -> list[TaskDefinition]:
    """Parse and validate a task file; every problem exits 2."""
    data = load_task_file(path)
    try:
        return parse_task_file(data, handlers=registry())
    except TaskFileError as exc:
        raise file_problems(path, exc) from None


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
            store=lambda: services(ctx).tasks,
            # the deployment's clock, read only when something is written
            now=lambda: services(ctx).clock.now(),
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
@click.option("--tenant", help="Only this tenant's tasks ('-': those without a tenant).")
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
    store = services(ctx).tasks
    if tenant is None:
        found = store.list_tasks(after=after, limit=limit)
    elif limit is None:
        found = [t for t in store.list_tasks(after=after) if of_tenant(t.definition.tenant, tenant)]
    else:
        found = filled_page(
            lambda cursor, n: store.list_tasks(after=cursor, limit=n),
            lambda t: of_tenant(t.definition.tenant, tenant),
            lambda t: t.task_id,
            limit,
            start=after,
        )
    emit([task_view(t) for t in found], as_json, _task_table)


def of_tenant(tenant: str | None, wanted: str) -> bool:
    """`--tenant`'s test: the tenant named, or `-` for none."""
    return (tenant or "-") == wanted


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
    task = services(ctx).tasks.get_task(task_id)
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


@tasks.command("pause")
@click.argument("task_id")
@click.option(
    "--note",
    metavar="TEXT",
    help=f"Why it is paused (at most {MAX_NOTE_CHARS} characters), shown by `tasks show`, "
    "`tasks list`, the API and the console until it is resumed.",
)
@json_option
@click.pass_context
@fail_cleanly
def tasks_pause(ctx: click.Context, task_id: str, note: str | None, as_json: bool) -> None:
    """Pause TASK_ID: it fires nothing until resumed."""
    try:
        checked_note(note)  # before anything is read or written
    except PauseNoteError as exc:
        raise BadInputError(str(exc)) from None
    who = actor(ctx)
    _pause_or_resume(
        ctx, task_id, lambda t, s: pause_task(t, s, note=note, actor=who), "paused", as_json
    )


@tasks.command("resume")
@click.argument("task_id")
@json_option
@click.pass_context
@fail_cleanly
def tasks_resume(ctx: click.Context, task_id: str, as_json: bool) -> None:
    """Resume TASK_ID (its pause note is cleared); missed slots follow its misfire policy
    (misfire.on_resume)."""
    who = actor(ctx)
    _pause_or_resume(ctx, task_id, lambda t, s: resume_task(t, s, actor=who), "resumed", as_json)


def _pause_or_resume(
    ctx: click.Context,
    task_id: str,
    action: Callable[[str, Wiring], TaskRecord],
    verb: str,
    as_json: bool,
) -> None:
    try:
        task = action(task_id, services(ctx))
    except TaskNotFoundError:
        raise no_such("task", task_id) from None
    emit(
        task_view(task),
        as_json,
        lambda view: out.print(
            f"{task_id}: {verb}"
            + (f" ({view['pause_note']})" if view["pause_note"] else "")
            + f"; next fire {view['next_fire'] or '-'}"
        ),
    )


@tasks.command("delete")
@click.argument("task_id")
@click.option(
    "--force", is_flag=True, help="Cancel the task's open instances first, then delete it."
)
@json_option
@click.pass_context
@fail_cleanly
def tasks_delete(ctx: click.Context, task_id: str, force: bool, as_json: bool) -> None:
    """Delete TASK_ID (its instances stay as history); refused while instances are open."""
    from iotsched.services.operations.actions import (
        TaskInUseError,
        delete_task,
    )

    try:
        deleted = delete_task(task_id, services(ctx), force=force, actor=actor(ctx))
    except TaskNotFoundError:
        raise no_such("task", task_id) from None
    except TaskInUseError as exc:
        raise click.ClickException(str(exc)) from None

    def line(result: dict[str, Any]) -> None:
        cancelled = f"; cancelled {', '.join(result['cancelled'])}" if result["cancelled"] else ""
        out.print(f"{task_id}: deleted (version {result['version']}){cancelled}")

    emit(
        {"task_id": task_id, "version": deleted.version, "cancelled": deleted.cancelled},
        as_json,
        line,
    )


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
    from iotsched.services.definitions.apply import (
        check_calendars,
        parse_file,
        resolve_calendars,
    )

    if task_file is None:
        record = services(ctx).tasks.get_task(task_id)
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
            stored = services(ctx).tasks.get_calendar(name)
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
