"""Operator actions on a task: pause it (with a note), resume it, delete it.

Each action's audit record is written with its change, in one conditional write (a forced
delete records it pending before its cancels and settles it with the delete). A delete is
refused while other tasks depend on the task, or while instances are open (unless forced: it
cancels them first).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from iotsched.core.audit import AuditState, Verb, new_audit
from iotsched.core.decisions import first_fire_after
from iotsched.core.instance_record import (
    InstanceRecord,
    InstanceStatus,
)
from iotsched.core.task_record import TaskRecord
from iotsched.core.task_triggers import AfterTrigger
from iotsched.ports.clock import Clock
from iotsched.ports.store_errors import UnreadableRecordError
from iotsched.services.fleet.pausing import checked_note
from iotsched.services.notices.audit import UNNAMED, settle
from iotsched.services.port_sets import (
    InstancePorts,
    LifecyclePorts,
    TaskPorts,
)
from iotsched.services.scheduling.lifecycle import end_early


class TaskNotFoundError(LookupError):
    """No task has that id."""


@runtime_checkable
class ResumePorts(TaskPorts, Protocol):
    """Resuming a task: its record, the time its next fire is counted from, and the time its
    change record is stamped with."""

    @property
    def clock(self) -> Clock: ...

    @property
    def record_clock(self) -> Clock: ...


def pause_task(
    task_id: str, services: ResumePorts, *, note: str | None = None, actor: str = UNNAMED
) -> TaskRecord:
    """Pause a task: it fires nothing until resumed (pausing twice is harmless), with an
    operator's `note` saying why (replacing any note it had; none clears it). The audit record
    (by `actor`, with the note) is written with the pause.

    Raises:
        TaskNotFoundError: no such task.
        PauseNoteError: the note is too long (nothing written).
    """
    note = checked_note(note)
    task = services.tasks.get_task(task_id)
    if task is None:
        raise TaskNotFoundError(task_id)
    record = new_audit(
        Verb.PAUSE,
        task_id,
        actor=actor,
        at=services.record_clock.now(),
        tenant=task.definition.tenant,
        version=task.version,
        note=note,
        diff=_pause_diff(task, paused=True, note=note),
    )
    if not services.tasks.set_paused(task_id, paused=True, note=note, audit=record):
        raise TaskNotFoundError(task_id)
    return _reread(task_id, services)


def _pause_diff(task: TaskRecord, *, paused: bool, note: str | None) -> dict[str, list[object]]:
    diff: dict[str, list[object]] = {}
    if task.paused != paused:
        diff["paused"] = [task.paused, paused]
    if task.pause_note != note:
        diff["pause_note"] = [task.pause_note, note]
    return diff


def resume_task(task_id: str, services: ResumePorts, *, actor: str = UNNAMED) -> TaskRecord:
    """Resume a paused task (resuming a running task is harmless); its pause note is cleared.

    With `misfire.on_resume: apply` (the default) the clock is left where the pause stopped
    it, so the next tick applies the task's misfire policy to the slots missed meanwhile; with
    `skip` the clock restarts at the first slot after now.
    """
    task = services.tasks.get_task(task_id)
    if task is None:
        raise TaskNotFoundError(task_id)
    if not task.paused:
        return task  # nothing changes, so nothing is recorded
    next_fire, last_slot = task.next_fire, task.last_slot
    if task.definition.misfire.on_resume == "skip":
        next_fire = first_fire_after(task.definition, services.clock.now())
        last_slot = None
    record = new_audit(
        Verb.RESUME,
        task_id,
        actor=actor,
        at=services.record_clock.now(),
        tenant=task.definition.tenant,
        version=task.version,
        diff=_pause_diff(task, paused=False, note=None),
    )
    if not services.tasks.set_paused(
        task_id, paused=False, audit=record, restart=(next_fire, last_slot)
    ):
        raise TaskNotFoundError(task_id)
    return _reread(task_id, services)


class TaskInUseError(Exception):
    """The task cannot be deleted now: open instances (without force), or dependent tasks."""


@dataclass(frozen=True)
class DeletedTask:
    """What deleting a task did: the definition is gone; `cancelled` lists the open instances
    that `force` cancelled first (oldest status first: scheduled, queued, then running)."""

    task_id: str
    version: int
    cancelled: list[str]


#: Open instances one delete looks at per status (a task with more is not deletable at once).
MAX_OPEN_CHECKED = 1000
_OPEN_ORDER = (
    InstanceStatus.SCHEDULED,
    InstanceStatus.QUEUED,
    InstanceStatus.PLANNING,
    InstanceStatus.RUNNING,
    InstanceStatus.REDUCING,
)


def open_instances_of(
    task_id: str, services: InstancePorts, incarnation: int | None = None
) -> list[InstanceRecord]:
    """The task's instances (of its incarnation `incarnation`, else of any) that have not
    ended, scheduled and queued ones first."""
    found: list[InstanceRecord] = []
    for status in _OPEN_ORDER:
        found += services.instances.list_instances(
            task_id=task_id, status=status, limit=MAX_OPEN_CHECKED, incarnation=incarnation
        )
    return found


def delete_task(
    task_id: str, services: LifecyclePorts, *, force: bool = False, actor: str = UNNAMED
) -> DeletedTask:
    """Delete a task's definition; its instances and shard records stay as history.

    Operator-safe by default: a task with open instances (scheduled, queued, planning,
    running, reducing) is refused, naming them, because deleting under them would strand the
    queued ones (the task item holds the blocking queue) and hide running work from `tasks`.
    `force` cancels every open instance first (running handlers see `ctx.cancelled()`), then
    deletes. A task other tasks depend on (`trigger: {after: [...]}`) is always refused: they
    would wait for a parent that no longer exists; change or delete them first.

    The delete itself is conditional on no instance holding the task, so an instance that the
    tick claims in that instant (a serial task) makes it a conflict rather than a lost queue; an
    instance of a concurrent task claimed in that instant simply runs to its end without the
    definition (workers need only the instance record).

    A task whose stored record cannot be read (written by another version, or by hand) is
    deleted only with `force`, as version 0 (its tenant's `max_tasks` count, unread, is left).

    Raises:
        TaskNotFoundError: no such task (or it was deleted meanwhile).
        TaskInUseError: dependents, open instances without `force`, or a claim meanwhile.
        UnreadableRecordError: the task's record cannot be read, and no `force`.
    """
    try:
        task = services.tasks.get_task(task_id)
    except UnreadableRecordError:
        if not force:
            raise
        task = None
        unreadable = True
    else:
        unreadable = False
        if task is None:
            raise TaskNotFoundError(task_id)
    version = task.version if task is not None else 0
    dependents = []
    for child_id in services.tasks.children_of(task_id):
        child = services.tasks.get_task(child_id)
        trigger = child.definition.trigger if child else None
        if isinstance(trigger, AfterTrigger) and task_id in trigger.after:
            dependents.append(child_id)
    if dependents:
        raise TaskInUseError(
            f"{task_id} is a parent of {', '.join(dependents)} (trigger.after): change or "
            "delete them first"
        )
    # (the task that held the id before is not this one's to wait for or cancel)
    still_open = open_instances_of(task_id, services, task.incarnation if task else None)
    if still_open and not force:
        shown = ", ".join(i.instance_id for i in still_open[:5])
        more = f" and {len(still_open) - 5} more" if len(still_open) > 5 else ""
        raise TaskInUseError(
            f"{task_id} has {len(still_open)} open instance(s) ({shown}{more}): wait for them "
            "to end, cancel them, or delete with force (which cancels them)"
        )
    # One record for the delete and the cancels it makes: `pending` before the first cancel,
    # then settled in the delete's own transaction (or `failed` if the delete is refused).
    record = new_audit(
        Verb.DELETE,
        task_id,
        actor=actor,
        at=services.record_clock.now(),
        # an unreadable record's tenant is unknown: the record is the operators'
        tenant=task.definition.tenant if task is not None else None,
        state=AuditState.PENDING if still_open else AuditState.DONE,
        version=version,
        instance_ids=[i.instance_id for i in still_open],
        diff={"version": [version, None]},
        **({"detail": "its stored record could not be read"} if unreadable else {}),
    )
    if still_open:
        services.tasks.record_audit(record)
    cancelled: list[str] = []
    for instance in still_open:
        # Ended as `cancel` ends it, without a record of its own: the delete's names it.
        current = services.instances.get_instance(instance.instance_id)
        reason = f"task {task_id} deleted"
        if current is None or (
            end_early(
                current, services, status=InstanceStatus.CANCELLED, reason=reason, alert=False
            )
            is None
        ):
            continue  # it ended meanwhile
        cancelled.append(instance.instance_id)
    record = record.model_copy(update={"state": AuditState.DONE, "instance_ids": cancelled})
    # A task of a tenant with `max_tasks` gives its place back in the same transaction.
    quotas = task.quotas if task is not None else None
    counted = (
        task.definition.tenant
        if task is not None and quotas and quotas.max_tasks is not None
        else None
    )
    incarnation = task.incarnation if task is not None else 1
    if not services.tasks.delete_task(
        task_id, audit=record, counted=counted, incarnation=incarnation
    ):
        if still_open:
            failed = {"state": AuditState.FAILED, "detail": "the delete was refused"}
            settle(services, record.model_copy(update=failed))
        if not unreadable and services.tasks.get_task(task_id) is None:
            raise TaskNotFoundError(task_id)
        raise TaskInUseError(f"an instance of {task_id} was claimed meanwhile; try again")
    return DeletedTask(task_id=task_id, version=version, cancelled=cancelled)


def _reread(task_id: str, services: TaskPorts) -> TaskRecord:
    task = services.tasks.get_task(task_id)
    if task is None:  # deleted meanwhile
        raise TaskNotFoundError(task_id)
    return task
