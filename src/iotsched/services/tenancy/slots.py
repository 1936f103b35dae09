"""A tenant's in-flight caps: its shard slots (`max_concurrent_shards`) at a shard's start, and
its instances per minute (`max_instances_per_minute`) before an instance's first message.

A capped shard starts only holding one of the tenant's slots (`InstanceStore.take_tenant_slot`),
leased for as long as its attempt may run, given back when the attempt ends, free again when a
dead worker's lease ends. A shard that finds every slot held, or others waiting, takes a ticket
in the tenant's line and waits its turn, first come first served, as a rate's wait (never
counted toward the DLQ); how long it stays away grows with the line ahead of it
(`core.waiting_line`). A tenant's instances are counted on its own gate; one over the minute's
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
from iotsched.core.waiting_line import (
    STALL_S,
    WaitTicket,
    in_window,
    pace_per_s,
    stalled,
    wait_s,
)
from iotsched.services.fleet.rollout import (
    StartAction,
    StartDecision,
)
from iotsched.services.port_sets import (
    LifecyclePorts,
    SendPorts,
)

log = logging.getLogger(__name__)

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


@dataclass(frozen=True)
class SlotWait:
    """A shard that may not take a slot now: how it waits (its copy holds `ticket`).
    `admitted`: its ticket is within the window, so another copy of the shard may run."""

    decision: StartDecision
    ticket: WaitTicket
    admitted: bool = True


def ticketed(
    instance: InstanceRecord, step: list[ShardMessage], services: SendPorts
) -> list[ShardMessage]:
    """A capped instance's step of shard messages, each holding its ticket in the tenant's
    line, taken for the whole step with one write before it is sent: the line's order is the
    order instances were sent in, and a backlog of any size costs its tenant's line one write
    per step, not one per shard. A step whose tickets cannot be taken (throttled) goes without:
    its shards take tickets as they meet a full cap."""
    shards = [m for m in step if not m.reduce]
    if instance.tenant_cap is None or not shards:
        return step
    now = services.clock.now()
    try:
        line = services.instances.join_tenant_line(
            instance.tenant or "-", now=now, count=len(shards)
        )
    except Exception:
        log.warning("tickets not taken: the step's shards take theirs", exc_info=True)
        return step
    first = line.issued - len(shards) + 1
    numbers = iter(range(first, line.issued + 1))
    return [
        m
        if m.reduce
        else m.model_copy(
            update={
                "ticket": WaitTicket(number=next(numbers), seen_served=line.served, seen_at=now)
            }
        )
        for m in step
    ]


def take_slot(
    instance: InstanceRecord, message: ShardMessage, services: SendPorts
) -> HeldSlot | SlotWait:
    """One of the tenant's slots for this shard's attempt, or how it waits for one.

    First come, first served (`core.waiting_line`): a shard's message holds its ticket in the
    tenant's line from its send (`ticketed`), and a ticket takes a free slot once it is within
    `cap` of the tickets served, the k-th free one at its k-th place. A ticket further back
    stays away for most of the time the line needs to reach it, so that waiting costs a few
    requests per shard, not a query every few seconds. The slot's lease lasts as long as the attempt may run
    before its shard lease lapses (`timeout_s` and the lease margin): a dead worker's slot is
    free again by then."""
    cap = instance.tenant_cap
    assert cap is not None
    tenant = instance.tenant or "-"
    stores = services.instances
    now = services.clock.now()
    ticket = message.ticket
    if ticket is None:
        # Sent without a ticket: a retry's or a takeover's copy (the shard held a slot once),
        # or a step whose tickets could not be taken. A free slot is its; else it joins.
        held = _take(instance, message, services, now)
        if held is not None:
            return held
        line = stores.join_tenant_line(tenant, now=now)
        number = line.issued
    else:
        number = ticket.number
        line = stores.tenant_line(tenant)
    if in_window(number, line, cap):
        # The first free slots go to the tickets ahead: this one takes the k-th free slot
        # where k is its place in the window (a ticket passed while away comes first).
        held = _take(instance, message, services, now, free=max(1, number - line.served))
        if held is not None:
            serve_ticket(tenant, services, now)
            return held
    elif stalled(line, now) and (held := _take(instance, message, services, now, idle=True)):
        # Tickets ahead were lost (a death between a start and its count), and a slot stayed
        # free meanwhile: the line moves on to this ticket.
        serve_ticket(tenant, services, now, up_to=number)
        return held
    kept = ticket or WaitTicket(number=number, seen_served=line.served, seen_at=now)
    # No spread: the tickets' numbers spread their wakes.
    delay = wait_s(number, line, cap, pace_per_s(ticket, line, now, cap))
    admitted = in_window(number, line, cap)
    return SlotWait(StartDecision(StartAction.WAIT, delay, QUOTA), kept, admitted)


def _take(
    instance: InstanceRecord,
    message: ShardMessage,
    services: SendPorts,
    now: datetime,
    *,
    idle: bool = False,
    free: int = 1,
) -> HeldSlot | None:
    """A free slot of the tenant's, taken if `free` or more are free; with `idle`, only one
    free for `STALL_S` or more."""
    assert instance.tenant_cap is not None
    tenant = instance.tenant or "-"
    holder = f"{message.instance_id}#{message.shard}#{uuid.uuid4().hex[:12]}"
    until = now + timedelta(seconds=message.timeout_s + services.tuning.lease_margin_s)
    free_at = now - timedelta(seconds=STALL_S) if idle else now
    slot = services.instances.take_tenant_slot(
        tenant, holder, cap=instance.tenant_cap, now=free_at, until=until, free=free
    )
    return None if slot is None else HeldSlot(tenant, slot, holder, until)


def serve_ticket(
    tenant: str, services: SendPorts, now: datetime, *, up_to: int | None = None
) -> None:
    """Count a ticket of the tenant's line served (its holder started, or gave up for good).
    A count that fails is left to the line's stall rule: the start goes on."""
    try:
        services.instances.serve_tenant_line(tenant, now=now, up_to=up_to)
    except Exception:
        log.warning("tenant line not moved on", extra={"tenant": tenant}, exc_info=True)


def postponed_deadline(
    instance: InstanceRecord, services: SendPorts, now: datetime
) -> datetime | None:
    """The deadline an instance past its own gets instead of ending `timed_out`, if it is held
    by its tenant's cap: it has shards not ended, its tenant's line has tickets waiting, and
    the line served one within an attempt's longest life (it moves; a line stopped behind
    attempts that never end does not keep anyone alive). Moved one attempt's life at a time,
    so the wait for slots is not counted against `instance_timeout_s`. None otherwise."""
    if instance.tenant_cap is None or instance.remaining <= 0:
        return None
    line = services.instances.tenant_line(instance.tenant or "-")
    attempt = timedelta(seconds=instance.timeout_s + services.tuning.lease_margin_s + STALL_S)
    if line.waiting == 0 or line.served_at is None or now - line.served_at > attempt:
        return None
    return now + attempt


def give_up_ticket(message: ShardMessage, services: SendPorts) -> None:
    """A waiting copy that will never start (its instance ended, its starts closed): its ticket
    is served, so that the line does not wait for it."""
    if message.ticket is not None and message.tenant is not None:
        serve_ticket(message.tenant, services, services.clock.now())


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


def release_slot(held: HeldSlot, services: SendPorts) -> None:
    """Free the slot at the attempt's end (marked free since now: see `_take`'s `idle`). A
    release that fails is left to the slot's lease (it ends by itself): the attempt's own
    outcome is not changed by it."""
    try:
        services.instances.release_tenant_slot(
            held.tenant, held.slot, held.holder, now=services.clock.now()
        )
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
