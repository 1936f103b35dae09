"""Alerts for instances that did not succeed (JSON on SNS, with filter attributes)."""

from __future__ import annotations

from iotsched.core.records import Alert, InstanceRecord, ShardRecord, ShardStatus


def alert_for(
    instance: InstanceRecord, shards: list[ShardRecord], *, alert_type: str | None = None
) -> Alert:
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
        type=alert_type or f"instance_{instance.status.value}",
        severity=instance.severity,
        task_id=instance.task_id,
        tenant=instance.tenant,
        instance_id=instance.instance_id,
        business_date=instance.business_date,
        status=instance.status.value,
        reason=instance.reason,
        failed_shards=failed,
        alert_id=f"{instance.instance_id}#{alert_type or instance.status.value}",
    )
