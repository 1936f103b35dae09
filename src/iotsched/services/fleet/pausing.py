"""Pausing a task with a note: an operator's (`iotsched tasks pause --note`), or the scheduler's
when an instance's end pauses its task (the `pause` follow-up: `abort.action: pause`,
`pause_on_failure`).

It takes `AuditPorts`: a pause writes the task item, and its audit record with it.
"""

from __future__ import annotations

from iotsched.core.abort import pause_note
from iotsched.core.audit import SCHEDULER, Verb, new_audit
from iotsched.core.instance_record import InstanceRecord, incarnation_of
from iotsched.core.task_record import MAX_NOTE_CHARS
from iotsched.services.notices.audit import AuditPorts

__all__ = ["MAX_NOTE_CHARS", "PauseNoteError", "checked_note", "pause_after_end"]


class PauseNoteError(ValueError):
    """A pause note the task cannot keep (too long)."""


def checked_note(note: str | None) -> str | None:
    """An operator's note as stored: stripped, None when empty; refused when too long."""
    if note is None or not note.strip():
        return None
    note = note.strip()
    if len(note) > MAX_NOTE_CHARS:
        raise PauseNoteError(
            f"a pause note has at most {MAX_NOTE_CHARS} characters, this one {len(note)}"
        )
    return note


def pause_after_end(instance: InstanceRecord, services: AuditPorts) -> bool:
    """The `pause` follow-up of an ended instance: pause its task, with a note naming the
    instance and why it ended; True if this call paused it.

    Idempotent: a task already paused (by an operator, by another instance, or by this
    follow-up done before its strike-off was lost) is left as it is, note and all, so the
    operator's own note is never overwritten. A task deleted since has nothing to pause.
    """
    task = services.tasks.get_task(instance.task_id)
    if task is None or task.paused or incarnation_of(instance.instance_id) != task.incarnation:
        return False  # (a task created again under the id is not the one that failed)
    note = pause_note(instance)[:MAX_NOTE_CHARS]
    record = new_audit(
        Verb.PAUSE,
        task.task_id,
        actor=SCHEDULER,
        at=services.record_clock.now(),
        tenant=task.definition.tenant,
        version=task.version,
        instance_ids=[instance.instance_id],
        note=note,
        diff={"paused": [False, True], "pause_note": [task.pause_note, note]},
    )
    return services.tasks.set_paused(task.task_id, paused=True, note=note, audit=record)
