"""Operator actions on instances.

Editing a task takes its store (`TaskPorts`, `ResumePorts`); ending or rerunning an instance
goes through the lifecycle (`LifecyclePorts`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Protocol, runtime_checkable

from iotsched.core.audit import AuditState, Verb, new_audit
from iotsched.core.decisions import first_fire_after
from iotsched.core.model import AfterTrigger
from iotsched.core.records import (
    InstanceRecord,
    InstanceStatus,
    ShardStatus,
    TaskRecord,
    TriggerKind,
)
from iotsched.ports.stores import Clock
from iotsched.services.fleet.pausing import checked_note
from iotsched.services.operations.audit import (
    UNNAMED,
    audited,
)
from iotsched.services.port_sets import (
    InstancePorts,
    LifecyclePorts,
    TaskPorts,
)
from iotsched.services.scheduling.lifecycle import end_early, send_shards
from iotsched.services.scheduling.report import TickReport


class TaskNotFoundError(LookupError):
    """No task has that id."""


@runtime_checkable
class ResumePorts(TaskPorts, Protocol):
    """Resuming a task: its record and the time its next fire is counted from."""

    @property
    def clock(self) -> Clock: ...


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
        at=services.clock.now(),
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
        at=services.clock.now(),
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


def open_instances_of(task_id: str, services: InstancePorts) -> list[InstanceRecord]:
    """The task's instances that have not ended, scheduled and queued ones first."""
    found: list[InstanceRecord] = []
    for status in _OPEN_ORDER:
        found += services.instances.list_instances(
            task_id=task_id, status=status, limit=MAX_OPEN_CHECKED
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

    Raises:
        TaskNotFoundError: no such task (or it was deleted meanwhile).
        TaskInUseError: dependents, open instances without `force`, or a claim meanwhile.
    """
    task = services.tasks.get_task(task_id)
    if task is None:
        raise TaskNotFoundError(task_id)
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
    still_open = open_instances_of(task_id, services)
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
        at=services.clock.now(),
        state=AuditState.PENDING if still_open else AuditState.DONE,
        version=task.version,
        instance_ids=[i.instance_id for i in still_open],
        diff={"version": [task.version, None]},
    )
    if still_open:
        services.tasks.record_audit(record)
    cancelled: list[str] = []
    for instance in still_open:
        try:
            _cancel(instance.instance_id, services, reason=f"task {task_id} deleted")
        except InstanceConflictError:
            continue  # it ended meanwhile
        cancelled.append(instance.instance_id)
    record = record.model_copy(update={"state": AuditState.DONE, "instance_ids": cancelled})
    # A task of a tenant with `max_tasks` gives its place back in the same transaction.
    quotas = task.quotas
    counted = task.definition.tenant if quotas and quotas.max_tasks is not None else None
    if not services.tasks.delete_task(task_id, audit=record, counted=counted):
        if still_open:
            failed = {"state": AuditState.FAILED, "detail": "the delete was refused"}
            services.tasks.record_audit(record.model_copy(update=failed))
        if services.tasks.get_task(task_id) is None:
            raise TaskNotFoundError(task_id)
        raise TaskInUseError(f"an instance of {task_id} was claimed meanwhile; try again")
    return DeletedTask(task_id=task_id, version=task.version, cancelled=cancelled)


def _reread(task_id: str, services: TaskPorts) -> TaskRecord:
    task = services.tasks.get_task(task_id)
    if task is None:  # deleted meanwhile
        raise TaskNotFoundError(task_id)
    return task


class InstanceNotFoundError(LookupError):
    """No instance has that id."""


class InstanceConflictError(Exception):
    """The instance's state does not allow the action (e.g. cancel a finished instance)."""


def cancel_instance(
    instance_id: str,
    services: LifecyclePorts,
    *,
    reason: str = "cancelled by operator",
    actor: str = UNNAMED,
) -> InstanceRecord:
    """End an open instance as cancelled.

    Shards not yet started never run (workers find the instance final); running handlers see
    `ctx.cancelled()` turn true within a second and their shards end cancelled.

    Raises:
        InstanceNotFoundError: no such instance.
        InstanceConflictError: the instance had already ended.
    """
    instance = services.instances.get_instance(instance_id)
    if instance is None:
        raise InstanceNotFoundError(instance_id)
    if instance.status.final:  # refused before anything is written, record included
        raise InstanceConflictError(f"{instance_id} has already ended ({instance.status.value})")
    with audited(
        Verb.CANCEL,
        instance.task_id,
        services,
        actor=actor,
        instance_ids=[instance_id],
        version=instance.task_version,
        note=reason,
    ) as change:
        change.diff = {"status": [instance.status.value, InstanceStatus.CANCELLED.value]}
        ended = _end_cancelled(instance, services, reason=reason)
    return ended


def _cancel(instance_id: str, services: LifecyclePorts, *, reason: str) -> InstanceRecord:
    """End the instance as cancelled and do what follows its end, with no audit record of its
    own (a forced delete's record names it)."""
    instance = services.instances.get_instance(instance_id)
    if instance is None:
        raise InstanceNotFoundError(instance_id)
    return _end_cancelled(instance, services, reason=reason)


def _end_cancelled(
    instance: InstanceRecord, services: LifecyclePorts, *, reason: str
) -> InstanceRecord:
    ended = end_early(
        instance, services, status=InstanceStatus.CANCELLED, reason=reason, alert=False
    )
    if ended is None:
        current = services.instances.get_instance(instance.instance_id)
        status = current.status.value if current else "gone"
        raise InstanceConflictError(f"{instance.instance_id} has already ended ({status})")
    # read back for the caller: what the store holds now (its counts), not the copy
    return services.instances.get_instance(instance.instance_id) or ended


class NothingToRerunError(ValueError):
    """The rerun asked for selects no shard (e.g. --failed when none failed)."""


def rerun_instance(
    instance_id: str,
    services: LifecyclePorts,
    *,
    shard: int | None = None,
    failed_only: bool = False,
    actor: str = UNNAMED,
) -> InstanceRecord:
    """Run an ended instance again: all of it, one shard, or its failed shards.

    The new run (`<first run>~run<n>`, trigger kind `rerun`) reuses the stored plan, bounds,
    params and business date, never re-cut from today's devices. Earlier runs stay in the
    history untouched. A task with a reduce reduces again over the latest successful result
    of every shard across runs.

    Raises:
        InstanceNotFoundError: no such instance.
        InstanceConflictError: the latest run has not ended.
        NothingToRerunError: the selection is empty or the shard is outside the plan.
    """
    named = services.instances.get_instance(instance_id)
    if named is None:
        raise InstanceNotFoundError(instance_id)
    base_id = named.rerun_of or named.instance_id
    base = services.instances.get_instance(base_id)
    if base is None:
        raise InstanceNotFoundError(base_id)
    runs = [base]
    while (
        following := services.instances.get_instance(f"{base_id}~run{len(runs) + 1}")
    ) is not None:
        runs.append(following)
    latest_run = runs[-1]
    if not latest_run.status.final:
        raise InstanceConflictError(
            f"{latest_run.instance_id} is still {latest_run.status.value}; rerun once it ends"
        )
    count = base.plan.count
    if shard is not None:
        if not 0 <= shard < count:
            raise NothingToRerunError(f"shard {shard} is outside the plan (0..{count - 1})")
        only: list[int] | None = [shard]
    elif failed_only:
        succeeded: set[int] = set()
        for run in runs:
            succeeded |= {
                s.index
                for s in services.instances.list_shards(run.instance_id)
                if s.status is ShardStatus.SUCCEEDED and s.index < count
            }
        only = [i for i in range(count) if i not in succeeded]
        if not only:
            raise NothingToRerunError(f"{base_id}: no shard failed")
    else:
        only = None
    now = services.clock.now()
    number = len(runs) + 1
    rerun = base.model_copy(
        update={
            "instance_id": f"{base_id}~run{number}",
            "trigger_kind": TriggerKind.RERUN,
            "status": InstanceStatus.PLANNING,
            "reason": None,
            "remaining": len(only) if only is not None else count,
            "failed_shards": 0,
            "created_at": now,
            "finished_at": None,
            "deadline": now + (base.deadline - base.created_at),
            "dispatch_lease_until": now + timedelta(seconds=services.tuning.dispatch_lease_s),
            "run": number,
            "rerun_of": base_id,
            "only": only,
            "sent": 0,  # the first run's send cursor counts its own messages
            "covers": [],
            "covers_count": 0,
        }
    )
    with audited(
        Verb.RERUN,
        base.task_id,
        services,
        actor=actor,
        instance_ids=[rerun.instance_id],
        version=base.task_version,
    ) as change:
        change.detail = f"run {number} of {base_id}" + (
            f", shards {only}" if only is not None else ""
        )
        if services.instances.claim_instance(rerun) is not None:
            raise InstanceConflictError(f"run {number} of {base_id} was started meanwhile")
        send_shards(rerun, services, TickReport(now=now))
    started = services.instances.get_instance(rerun.instance_id)
    assert started is not None
    return started
