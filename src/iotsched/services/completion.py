"""How an instance ends: exactly one finalizer, and one alert for a failed instance."""

from __future__ import annotations

from iotsched.core.decisions import decide_instance_outcome
from iotsched.core.records import Alert, InstanceRecord, InstanceStatus, ShardRecord, ShardStatus
from iotsched.services import Services


def finalize(instance_id: str, services: Services) -> InstanceStatus | None:
    """End the instance if its remaining counter is zero; returns the status if this call did.

    Only the caller whose conditional write moves the instance out of planning/running sends
    the alert, so a failed instance alerts exactly once however many workers race here.
    """
    instance = services.instances.get_instance(instance_id)
    if instance is None or instance.status.final or instance.remaining != 0:
        return None
    status = decide_instance_outcome(instance.failed_shards)
    if not services.instances.finalize_instance(
        instance_id, status=status, finished_at=services.clock.now()
    ):
        return None
    if status is not InstanceStatus.SUCCEEDED:
        ended = instance.model_copy(update={"status": status})
        services.alerts.publish(alert_for(ended, services.instances.list_shards(instance_id)))
    return status


def alert_for(instance: InstanceRecord, shards: list[ShardRecord]) -> Alert:
    """The alert for an instance that did not succeed, naming its failed shards and errors."""
    failed = [
        {
            "shard": s.index,
            "status": s.status.value,
            "bounds": s.bounds,
            "attempts": s.attempt,
            "error": s.error,
        }
        for s in shards
        if s.status.final and s.status is not ShardStatus.SUCCEEDED
    ]
    return Alert(
        type=f"instance_{instance.status.value}",
        severity=instance.severity,
        task_id=instance.task_id,
        tenant=instance.tenant,
        instance_id=instance.instance_id,
        business_date=instance.business_date,
        status=instance.status.value,
        reason=instance.reason,
        failed_shards=failed,
        alert_id=f"{instance.instance_id}#{instance.status.value}",
    )
