"""Operator actions on instances."""

from __future__ import annotations

from iotsched.core.records import InstanceRecord, InstanceStatus
from iotsched.services import Services


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
    return ended
