"""How an instance ends: exactly one finalizer, and one alert for a failed instance."""

from __future__ import annotations

from datetime import timedelta

from iotsched.core.decisions import decide_instance_outcome
from iotsched.core.records import InstanceRecord, InstanceStatus
from iotsched.services import Services
from iotsched.services.alerts import alert_for
from iotsched.services.dispatch import TickReport, reduce_message, send_shards


def finalize(instance_id: str, services: Services) -> InstanceStatus | None:
    """End the instance if its remaining counter is zero; returns the status if this call did.

    Only the caller whose conditional write moves the instance out of planning/running sends
    the alert, so a failed instance alerts exactly once however many workers race here.
    """
    instance = services.instances.get_instance(instance_id)
    if instance is None or instance.status.final or instance.remaining != 0:
        return None
    if (
        instance.reduce is not None
        and instance.failed_shards == 0
        and instance.status is not InstanceStatus.REDUCING
    ):
        # Every shard succeeded: exactly one caller moves the instance to `reducing` and sends
        # the reduce message (a crash after the move is resumed by the sweeper).
        now = services.clock.now()
        if not services.instances.start_reduce(
            instance_id, now=now, until=now + timedelta(seconds=services.tuning.dispatch_lease_s)
        ):
            return None
        services.queue.send([reduce_message(instance)])
        return InstanceStatus.REDUCING
    status = decide_instance_outcome(instance.failed_shards)
    if not services.instances.finalize_instance(
        instance_id, status=status, finished_at=services.clock.now()
    ):
        return None
    if status is not InstanceStatus.SUCCEEDED:
        ended = instance.model_copy(update={"status": status})
        services.alerts.publish(alert_for(ended, services.instances.list_shards(instance_id)))
    after_end(instance.model_copy(update={"status": status}), services)
    return status


def after_end(instance: InstanceRecord, services: Services) -> None:
    """What follows any instance's end: the task's hold passes on, dependents may fire."""
    if instance.exclusive:
        release_hold(instance.task_id, instance.instance_id, services)
    from iotsched.services.dependencies import trigger_dependents  # (a cycle otherwise)

    trigger_dependents(instance, services)


def release_hold(task_id: str, instance_id: str, services: Services) -> str | None:
    """After `instance_id` ended: pass the task's hold to the oldest queued instance and start it.

    A queued instance that ended while waiting (cancelled, timed out) passes the hold on in
    turn. Returns the instance started, if any. Idempotent: only the holder can release.
    """
    following = services.blocking.release_task(task_id, instance_id)
    while following is not None:
        if services.instances.set_instance_status(
            following, expected=InstanceStatus.QUEUED, status=InstanceStatus.PLANNING
        ):
            started = services.instances.get_instance(following)
            assert started is not None
            send_shards(started, services, TickReport(now=services.clock.now()))
            return following
        following = services.blocking.release_task(task_id, following)
    return None
