"""Alerts for instances that did not succeed (JSON on SNS, with filter attributes).

An alert is bounded whatever the instance's size: it lists the first `MAX_LISTED_FAILED`
failed shards, counts them all, and says how to list the rest (an SNS message carries at most
256 KiB, the alert's record at most 400 KB: every shard of a large instance would fit neither).
"""

from __future__ import annotations

import json
from typing import Any

from iotsched.core.alert_message import Alert
from iotsched.core.instance_record import (
    InstanceRecord,
    InstanceStatus,
)
from iotsched.core.shard_record import (
    ShardRecord,
    ShardStatus,
)

#: The reason (prefix) and alert type of an instance refused at claim: its plan cannot be stored.
PLAN_TOO_LARGE = "instance_plan_too_large"
#: Failed shards an alert lists; `failed_shard_count` counts them all.
MAX_LISTED_FAILED = 20
#: The error text kept per listed shard (the shard record holds it whole).
MAX_ERROR_CHARS = 500
#: Bounds larger than this (as JSON) are left out of the alert: the shard record holds them.
MAX_BOUNDS_CHARS = 1000


def _small(bounds: dict[str, Any]) -> dict[str, Any]:
    size = len(json.dumps(bounds, default=str))
    if size <= MAX_BOUNDS_CHARS:
        return bounds
    return {"omitted": f"{size} characters; see the shard record"}


def how_to_list_failed(instance_id: str) -> str:
    """Where an operator lists every shard of an instance (CLI and API)."""
    return f"iotsched shards '{instance_id}' --json; GET /api/instances/{instance_id}/shards"


def alert_for(
    instance: InstanceRecord, shards: list[ShardRecord], *, alert_type: str | None = None
) -> Alert:
    """The alert for an instance that did not succeed, naming its first failed shards."""
    failed = sorted(
        (s for s in shards if s.status.final and s.status is not ShardStatus.SUCCEEDED),
        key=lambda s: s.index,
    )
    listed = [
        {
            "shard": s.index,
            "status": s.status.value,
            "bounds": _small(s.bounds),
            "attempts": s.attempt,
            "error": s.error[:MAX_ERROR_CHARS] if s.error else s.error,
        }
        for s in failed[:MAX_LISTED_FAILED]
    ]
    return Alert(
        type=alert_type or f"instance_{instance.status.value}",
        severity=instance.severity,
        retention_days=instance.retention_days,
        task_id=instance.task_id,
        tenant=instance.tenant,
        instance_id=instance.instance_id,
        business_date=instance.business_date,
        status=instance.status.value,
        reason=instance.reason,
        failed_shards=listed,
        failed_shard_count=len(failed),
        more_failed_shards=(
            how_to_list_failed(instance.instance_id) if len(failed) > len(listed) else None
        ),
        alert_id=f"{instance.instance_id}#{alert_type or instance.status.value}",
    )


def instance_alert(instance: InstanceRecord, shards: list[ShardRecord]) -> Alert:
    """The alert an ended instance owes (its `alert` follow-up), told by how it ended."""
    reason = instance.reason or ""
    if instance.status is InstanceStatus.SKIPPED and reason.startswith("queue_full"):
        return alert_for(instance, [], alert_type="queue_overflow")
    if reason.startswith(PLAN_TOO_LARGE):
        return alert_for(instance, [], alert_type=PLAN_TOO_LARGE)
    if instance.status is InstanceStatus.ABORTED:
        # the shards its abort cancelled did not fail: the alert lists those its figures count
        shards = [s for s in shards if s.status is not ShardStatus.CANCELLED]
    return alert_for(instance, shards)
