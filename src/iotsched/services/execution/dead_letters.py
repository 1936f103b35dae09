"""Shard messages that exceeded maxReceiveCount: end their shard failed, alert at least once
(subscribers see it once: the alert id deduplicates).

Its functions take `LifecyclePorts`: a given-up shard may end its instance (`finalize`).
"""

from __future__ import annotations

import hashlib
import logging
from datetime import timedelta

from pydantic import ValidationError

from iotsched.core.alert_message import Alert
from iotsched.core.shard_message import ShardMessage
from iotsched.core.shard_record import ShardStatus
from iotsched.core.task_policies import DEFAULT_RETENTION_DAYS
from iotsched.services.execution.completion import (
    after_shards_ended,
    finalize,
)
from iotsched.services.notices.alert_policy import publish_under
from iotsched.services.port_sets import LifecyclePorts

log = logging.getLogger(__name__)
REASON = "dead_lettered"


def handle_dead_letter(body: str, services: LifecyclePorts) -> str:
    """Handle one message from the shard DLQ; returns what was done.

    A valid message ends its shard `failed` (reason `dead_lettered`; an attempt still running
    closed `lost`) in the same transaction as the instance's counter, publishes one
    `shard_dead_lettered` alert and finalizes the instance if it was the last shard. A
    delivery that finds its shard already ended by the DLQ handler publishes the alert and
    finalizes again (`already_final`): the handler that ended it may have died before either,
    the alert is deduplicated by its id and `finalize` is idempotent, so a duplicate changes
    nothing. A malformed body cannot name a shard: it is alerted and dropped.
    """
    try:
        message = ShardMessage.model_validate_json(body)
    except ValidationError as exc:
        services.alerts.publish(
            Alert(
                type="malformed_dead_letter",
                severity="high",
                task_id="-",
                tenant=None,
                instance_id="-",
                status="dropped",
                reason=f"{exc.error_count()} validation error(s): {body[:200]}",
                alert_id=f"malformed#{hashlib.sha256(body.encode()).hexdigest()[:16]}",
            )
        )
        return "malformed"
    now = services.clock.now()
    instance = services.instances.get_instance(message.instance_id)  # its retention
    retention_days = instance.retention_days if instance else DEFAULT_RETENTION_DAYS
    result = services.instances.dead_letter_shard(
        message.instance_id,
        message.shard,
        bounds=message.bounds,
        max_attempts=message.max_attempts,
        error=REASON,
        now=now,
        expires_at=now + timedelta(days=retention_days),
    )
    if result is None:
        shard = services.instances.get_shard(message.instance_id, message.shard)
        if shard is not None and shard.status is ShardStatus.FAILED and shard.error == REASON:
            _alert(message, services)
        finalize(message.instance_id, services)  # does nothing unless its ender died first
        return "already_final"
    services.faults.at("dead_lettered", message.instance_id)
    _alert(message, services)
    services.faults.at("dead_letter_alerted", message.instance_id)
    after_shards_ended(message.instance_id, services, instance=instance, counts=result)
    return REASON


def _alert(message: ShardMessage, services: LifecyclePorts) -> None:
    """The shard's `shard_dead_lettered` alert (one id per shard: a re-publish is dropped)."""
    instance = services.instances.get_instance(message.instance_id)
    publish_under(
        instance.alert_policy if instance else None,
        Alert(
            type="shard_dead_lettered",
            severity=instance.severity if instance else "high",
            retention_days=instance.retention_days if instance else None,
            task_id=message.task_id,
            tenant=message.tenant,
            instance_id=message.instance_id,
            business_date=message.business_date,
            status="failed",
            reason=REASON,
            failed_shards=[{"shard": message.shard, "bounds": message.bounds, "error": REASON}],
            alert_id=f"{message.instance_id}#{message.shard}#{REASON}",
        ),
        services.clock.now(),
        services.alerts,
    )
