"""Operator actions on instances."""

from __future__ import annotations

from iotsched.core.decisions import first_fire_after
from iotsched.core.records import InstanceRecord, InstanceStatus, TaskRecord
from iotsched.services import Services
from iotsched.services.completion import after_end


class TaskNotFoundError(LookupError):
    """No task has that id."""


def pause_task(task_id: str, services: Services) -> TaskRecord:
    """Pause a task: it fires nothing until resumed (pausing twice is harmless)."""
    task = services.tasks.get_task(task_id)
    if task is None:
        raise TaskNotFoundError(task_id)
    services.tasks.set_paused(
        task_id, paused=True, next_fire=task.next_fire, last_slot=task.last_slot
    )
    return _reread(task_id, services)


def resume_task(task_id: str, services: Services) -> TaskRecord:
    """Resume a paused task (resuming a running task is harmless).

    With `misfire.on_resume: apply` (the default) the clock is left where the pause stopped
    it, so the next tick applies the task's misfire policy to the slots missed meanwhile; with
    `skip` the clock restarts at the first slot after now.
    """
    task = services.tasks.get_task(task_id)
    if task is None:
        raise TaskNotFoundError(task_id)
    if not task.paused:
        return task
    next_fire, last_slot = task.next_fire, task.last_slot
    if task.definition.misfire.on_resume == "skip":
        next_fire = first_fire_after(task.definition, services.clock.now())
        last_slot = None
    services.tasks.set_paused(task_id, paused=False, next_fire=next_fire, last_slot=last_slot)
    return _reread(task_id, services)


def _reread(task_id: str, services: Services) -> TaskRecord:
    task = services.tasks.get_task(task_id)
    if task is None:  # deleted meanwhile
        raise TaskNotFoundError(task_id)
    return task


class InstanceNotFoundError(LookupError):
    """No instance has that id."""


class InstanceConflictError(Exception):
    """The instance's state does not allow the action (e.g. cancel a finished instance)."""


def cancel_instance(
    instance_id: str, services: Services, *, reason: str = "cancelled by operator"
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
    if not services.instances.end_instance(
        instance_id,
        status=InstanceStatus.CANCELLED,
        reason=reason,
        finished_at=services.clock.now(),
    ):
        current = services.instances.get_instance(instance_id)
        status = current.status.value if current else "gone"
        raise InstanceConflictError(f"{instance_id} has already ended ({status})")
    ended = services.instances.get_instance(instance_id)
    assert ended is not None
    after_end(ended, services)
    return ended
