"""A tenant's in-flight caps: its shard slots (`max_concurrent_shards`) at a shard's start, and
its instances per minute (`max_instances_per_minute`) before an instance's first message.

A capped shard starts only holding one of the tenant's slots (`InstanceStore.take_tenant_slot`),
leased for as long as its attempt may run, given back when the attempt ends, free again when a
dead worker's lease ends; a shard that finds every slot held is deferred as a rate's is, never
counted toward the DLQ. A tenant's instances are counted on its own gate; one over the minute's
limit waits `planning` for the next minute. A wait raises one `quota_exceeded` alert per tenant,
quota and alert window. An instance without caps reads and writes nothing here.
"""

from __future__ import annotations

import logging
import threading
import uuid
import weakref
from dataclasses import dataclass
from datetime import datetime, timedelta

from iotsched.core.alert_message import Alert
from iotsched.core.instance_record import InstanceRecord
from iotsched.core.shard_message import ShardMessage
from iotsched.core.timeutil import floor_minute, iso, parse_iso
from iotsched.services.fleet.rollout import (
    StartAction,
    StartDecision,
    spread_s,
)
from iotsched.services.port_sets import (
    LifecyclePorts,
    SendPorts,
)
from iotsched.services.tenancy import pacing

log = logging.getLogger(__name__)

#: How long a shard that found its tenant's slots full stays away, before its own spread
#: (up to as long again, so that deferred shards do not all come back in the same second).
SLOT_RETRY_S = 15
#: The quotas' names, as the waits and their alerts name them.
QUOTA = "max_concurrent_shards"
RATE_QUOTA = "max_instances_per_minute"
#: One `quota_exceeded` alert per tenant and quota per window of this many seconds, aligned on
#: the epoch: its id names the window, so every worker that meets the quota in it raises the
#: same alert, recorded once.
ALERT_WINDOW_S = 3600


@dataclass
class HeldSlot:
    """A slot a shard holds while its attempt runs, until `until` (moved by heartbeats)."""

    tenant: str
    slot: int
    holder: str
    until: datetime


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
    return None if slot is None else HeldSlot(tenant, slot, holder, until)


def keep_slot(held: HeldSlot, message: ShardMessage, services: SendPorts, now: datetime) -> None:
    """A heartbeat restarted the attempt's countdown: keep its slot at least as long as the
    attempt may now run (`timeout_s` and the lease margin from `now`). Written only when the
    slot's lease would end sooner, and then moved twice that far, so that a handler beating
    often writes its slot once per attempt's span, not once per beat. A slot lost meanwhile
    (its lease ended and another shard took it) is left to its new holder: the attempt runs
    on, as it would have."""
    span = timedelta(seconds=message.timeout_s + services.tuning.lease_margin_s)
    if held.until >= now + span:
        return
    until = now + 2 * span
    try:
        if services.instances.extend_tenant_slot(held.tenant, held.slot, held.holder, until=until):
            held.until = until
    except Exception:
        log.warning("tenant slot not extended", extra={"tenant": held.tenant}, exc_info=True)


def wait_for_slot(instance: InstanceRecord, message: ShardMessage) -> StartDecision:
    """The deferral of a shard whose tenant holds its cap (an instance's last shards come back
    sooner: `pacing.tail_retry`)."""
    wait = pacing.TAIL_RETRY_S if pacing.tail_retry(instance) else SLOT_RETRY_S
    delay = wait + spread_s(message.instance_id, message.shard, wait)
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


def raise_quota_alert(
    instance: InstanceRecord, services: LifecyclePorts, *, quota: str, limit: int
) -> None:
    """Raise the tenant's `quota_exceeded` alert for `quota`, once per window (the alert sink
    records one per id; this process skips a window it already raised). A failure to raise it
    is logged: the wait stands, and the next one tries again."""
    alert = quota_alert(instance, quota=quota, limit=limit, at=services.clock.now())
    key = (instance.tenant or "-", quota)
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


#: How a waiting instance's record names the seat it holds (`admit_instance`).
SEAT_NOTE = "; its seat is at "


def seat_of(waiting: str | None) -> datetime | None:
    """The minute of the seat a waiting instance holds, from its wait record; None if it holds
    none (it never waited, or it waited before seats were sold in order)."""
    if waiting is None or SEAT_NOTE not in waiting:
        return None
    try:
        return parse_iso(waiting.rsplit(SEAT_NOTE, 1)[1])
    except ValueError:
        return None


def admit_instance(instance: InstanceRecord, services: LifecyclePorts) -> InstanceRecord | None:
    """Admit an instance of a tenant with `max_instances_per_minute` before its first message
    is sent: the instance to send (its wait record cleared), or None if it waits `planning`
    for a later minute (its dispatch lease moved there, `waiting` naming the quota and its
    seat), whose resumption by the sweeper sends it then.

    Each instance takes one seat on the tenant's gate (`GATE#quota#<tenant>#instances`, one
    item per tenant, written only by its claims), sold in order, `rate` a minute: a seat in
    the current minute sends it now; a later one is the minute it is sent, whoever comes
    after it. Waiters go first, in the order they came: a newer instance never takes an
    older one's place."""
    rate = instance.tenant_rate
    assert rate is not None
    tenant = instance.tenant or "-"
    now = services.clock.now()
    minute = floor_minute(now)
    held = instance.dispatch_lease_until
    seat = seat_of(instance.waiting)
    if seat is not None and seat < minute:
        seat = None  # its minute passed unused (a resumption late past it): a seat again
    if seat is None:
        seat = services.instances.take_seat(
            f"quota#{tenant}#instances", minute=minute, limit=rate, latest=instance.deadline
        )
    if seat is None:
        # No seat before its deadline: none is sold (it would be a hole every later instance
        # waits behind); it waits for its deadline, where the sweeper ends it timed out.
        why = f"{RATE_QUOTA}: tenant {tenant}'s minutes up to this instance's deadline are full"
        waits_until = instance.deadline
    elif seat > minute:
        # Back at its seat's minute, at its start: the sweeper's pass in that minute sends it.
        why = (
            f"{RATE_QUOTA}: tenant {tenant} started its {rate} instances of this minute"
            f"{SEAT_NOTE}{iso(seat)}"
        )
        waits_until = seat
    else:
        waits_until = None
    if waits_until is not None:
        if not services.instances.advance_dispatch(
            instance.instance_id, sent=instance.sent, held=held, until=waits_until, waiting=why
        ):
            log.warning(  # taken over meanwhile: its seat, if it took one, goes unused
                "instance wait not recorded", extra={"instance_id": instance.instance_id}
            )
            return None
        log.info("instance waits for its seat", extra={"instance_id": instance.instance_id})
        raise_quota_alert(instance, services, quota=RATE_QUOTA, limit=rate)
        return None
    if instance.waiting is None:
        return instance
    # It waited: clear the record in the write that renews the dispatch lease it holds.
    until = now + timedelta(seconds=services.tuning.dispatch_lease_s)
    if not services.instances.advance_dispatch(
        instance.instance_id, sent=instance.sent, held=held, until=until
    ):
        return None  # taken over meanwhile: the taker sends it
    return instance.model_copy(update={"waiting": None, "dispatch_lease_until": until})
