"""`iotsched tasks pause|resume|delete`: an operator stopping, restarting or removing a task.

Pause and resume use the target's stores alone; delete takes the whole wiring, because a forced
delete cancels open instances, and what follows an instance's end may send shard messages.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from iotsched.cli.output import (
    BadInputError,
    actor,
    emit,
    fail_cleanly,
    json_option,
    no_such,
    out,
    services,
    stores,
)
from iotsched.core.task_record import (
    MAX_NOTE_CHARS,
    TaskRecord,
)
from iotsched.services.definitions.control import (
    ResumePorts,
    TaskInUseError,
    TaskNotFoundError,
    delete_task,
    pause_task,
    resume_task,
)
from iotsched.services.fleet.pausing import (
    PauseNoteError,
    checked_note,
)
from iotsched.services.operations.views import task_view


@click.command("pause")
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


@click.command("resume")
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
    action: Callable[[str, ResumePorts], TaskRecord],
    verb: str,
    as_json: bool,
) -> None:
    try:
        task = action(task_id, stores(ctx))
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


@click.command("delete")
@click.argument("task_id")
@click.option(
    "--force", is_flag=True, help="Cancel the task's open instances first, then delete it."
)
@json_option
@click.pass_context
@fail_cleanly
def tasks_delete(ctx: click.Context, task_id: str, force: bool, as_json: bool) -> None:
    """Delete TASK_ID (its instances stay as history); refused while instances are open."""
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
