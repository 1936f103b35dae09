"""A tenant's in-flight cap (`max_concurrent_shards`) at a shard's start.

An instance claimed for a tenant with the cap carries it (`InstanceRecord.tenant_cap`); its
shards start only holding one of the tenant's slots (`InstanceStore.take_tenant_slot`),
leased for as long as an attempt may run before its lease lapses, and freed when the attempt
ends. A worker that dies holding one frees it when the lease ends. A shard that finds every
slot held is deferred as a rate's is: a fresh copy of its message comes back a little later,
never counted toward the DLQ. An instance without the cap (every tenant without quotas)
reads and writes nothing here.
"""

from __future__ import annotations

import logging
import threading
import uuid
import weakref
from dataclasses import dataclass
from datetime import datetime, timedelta

from iotsched.core.records import Alert, InstanceRecord, ShardMessage
from iotsched.services.needs import LifecyclePorts, SendPorts
from iotsched.services.rollout import StartAction, StartDecision, spread_s

log = logging.getLogger(__name__)

#: How long a shard that found its tenant's slots full stays away, before its own spread
#: (up to as long again, so that deferred shards do not all come back in the same second).
SLOT_RETRY_S = 15
#: The quota's name, as the deferral and its alert name it.
QUOTA = "max_concurrent_shards"
#: One `quota_exceeded` alert per tenant and quota per window of this many seconds, aligned on
#: the epoch: its id names the window, so every worker that meets the quota in it raises the
#: same alert, recorded once.
ALERT_WINDOW_S = 3600


@dataclass(frozen=True)
class HeldSlot:
    """A slot a shard holds while its attempt runs."""

    tenant: str
    slot: int
    holder: str


def capped(instance: InstanceRecord, message: ShardMessage) -> bool:
    """True if the shard must hold one of its tenant's slots to start (a reduce touches no
    device and never waits for one)."""
    return instance.tenant_cap is not None and not message.reduce


def take_slot(
    instance: InstanceRecord, message: ShardMessage, services: SendPorts
) -> HeldSlot | None:
    """One of the tenant's slots for this shard's attempt, or None if the tenant holds its cap.

    The slot's lease lasts as long as the attempt may run before its shard lease lapses
    (`timeout_s` and the lease margin): a dead worker's slot is free again by then."""
    assert instance.tenant_cap is not None
    tenant = instance.tenant or "-"
    holder = f"{message.instance_id}#{message.shard}#{uuid.uuid4().hex[:12]}"
    now = services.clock.now()
    until = now + timedelta(seconds=message.timeout_s + services.tuning.lease_margin_s)
    slot = services.instances.take_tenant_slot(
        tenant, holder, cap=instance.tenant_cap, now=now, until=until
    )
    return None if slot is None else HeldSlot(tenant, slot, holder)


def wait_for_slot(instance: InstanceRecord, message: ShardMessage) -> StartDecision:
    """The deferral of a shard whose tenant holds its cap."""
    delay = SLOT_RETRY_S + spread_s(message.instance_id, message.shard, SLOT_RETRY_S)
    return StartDecision(StartAction.WAIT, delay, QUOTA)


def release_slot(held: HeldSlot, services: SendPorts) -> None:
    """Free the slot at the attempt's end. A release that fails is left to the slot's lease
    (it ends by itself): the attempt's own outcome is not changed by it."""
    try:
        services.instances.release_tenant_slot(held.tenant, held.slot, held.holder)
    except Exception:
        log.warning(
            "tenant slot not released: freed when its lease ends",
            extra={"tenant": held.tenant, "slot": held.slot},
            exc_info=True,
        )


# The windows this process has raised an alert for, per alert sink by (tenant, quota): a worker
# that met the quota once in a window does not write the alert's record again for each deferred
# shard.
_raised: weakref.WeakKeyDictionary[object, dict[tuple[str, str], int]] = weakref.WeakKeyDictionary()
_raised_lock = threading.Lock()


def quota_alert(instance: InstanceRecord, *, quota: str, limit: int, at: datetime) -> Alert:
    """The `quota_exceeded` alert of a tenant meeting `quota` at `at`: one id per tenant,
    quota and window."""
    tenant = instance.tenant or "-"
    window = int(at.timestamp()) // ALERT_WINDOW_S * ALERT_WINDOW_S
    window_start = datetime.fromtimestamp(window, tz=at.tzinfo)
    return Alert(
        type="quota_exceeded",
        severity=instance.severity,
        retention_days=instance.retention_days,
        task_id=instance.task_id,
        tenant=instance.tenant,
        instance_id=instance.instance_id,
        business_date=instance.business_date,
        status="waiting",
        reason=f"tenant {tenant} holds its {quota} ({limit}): shards of {instance.instance_id} "
        "wait for a slot",
        alert_id=f"TENANT#{tenant}#quota_exceeded#{quota}#{window}",
        quota=quota,
        limit=limit,
        window_start=window_start,
        window_s=ALERT_WINDOW_S,
    )


def raise_quota_alert(instance: InstanceRecord, services: LifecyclePorts) -> None:
    """Raise the tenant's `quota_exceeded` alert for its in-flight cap, once per window (the
    alert sink records one per id; this process skips a window it already raised). A failure
    to raise it is logged: the deferral stands, and the next deferral tries again."""
    assert instance.tenant_cap is not None
    alert = quota_alert(instance, quota=QUOTA, limit=instance.tenant_cap, at=services.clock.now())
    key = (instance.tenant or "-", QUOTA)
    window = int(alert.window_start.timestamp()) if alert.window_start else 0
    with _raised_lock:
        raised = _raised.setdefault(services.alerts, {})
        if raised.get(key) == window:
            return
    try:
        services.alerts.publish(alert)
    except Exception:
        log.warning("quota alert not raised", extra={"alert_id": alert.alert_id}, exc_info=True)
        return
    with _raised_lock:
        raised[key] = window
