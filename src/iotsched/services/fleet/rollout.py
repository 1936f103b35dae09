"""When a shard of an instance may start: its rollout rate (and ramp), its maintenance window,
and the fence of its abort, all from the policies the instance stored at its claim.

Two callers: the worker, at a shard's start (`window_decision`, `count_start`, and after the
lease `starts_closed`), and the dispatcher, which sends a paced instance's shards no faster than
they may start (`send_allowance`). An instance with none of `rollout`, `window`, `abort` is
never looked at twice: nothing here reads or writes anything for it.

The rate is counted cluster-wide in seats on the rollout's gate (`InstanceStore.take_seat`, one
conditional write per start, in the minutes of the scheduler's clock, sold in order); a window
is decided from the window and the clock alone (`iotsched.core.windows`), so it costs no
request.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from iotsched.core import windows
from iotsched.core.group_windows import shard_window
from iotsched.core.instance_record import InstanceRecord
from iotsched.core.shard_message import ShardMessage
from iotsched.core.task_fleet_safety import (
    Rollout,
    Window,
)
from iotsched.core.timeutil import floor_minute
from iotsched.services.port_sets import ClockedInstancePorts, InstancePorts, SendPorts

#: The longest a message may be delayed on the queue (SQS's DelaySeconds): a wait longer than
#: this is made of hops.
MAX_DELAY_S = 900
_MINUTE = timedelta(minutes=1)


class StartAction(StrEnum):
    """What the worker does with a shard message before its lease."""

    START = "start"  # take the lease and run it
    WAIT = "wait"  # not now: a fresh copy comes back after `delay_s`; the original is acked
    CANCEL = "cancel"  # never: the window closed (`on_close: cancel`): end the instance


@dataclass(frozen=True)
class StartDecision:
    """`action`, and for WAIT how long the message stays away (`delay_s`), why, and the rollout
    seat its copy holds (`seat`: it starts then without counting again)."""

    action: StartAction
    delay_s: int = 0
    why: str = ""
    seat: datetime | None = None


START = StartDecision(StartAction.START)


def device_count(bounds: Mapping[str, Any]) -> int:
    """The devices a shard covers, from its bounds: an id range's `end - start`, else a
    `devices` list's length or a `device_count`, else 1."""
    start, end = bounds.get("start"), bounds.get("end")
    if isinstance(start, int) and isinstance(end, int) and end >= start:
        return end - start
    devices = bounds.get("devices")
    if isinstance(devices, list):
        return len(devices)
    count = bounds.get("device_count")
    if isinstance(count, int) and not isinstance(count, bool) and count >= 0:
        return count
    return 1


def start_weight(rollout: Rollout, bounds: Mapping[str, Any]) -> int:
    """What one start of a shard counts against the rate: 1 per shard, or its devices."""
    if rollout.max_devices_per_minute is not None:
        return max(1, device_count(bounds))
    return 1


def rate_limit(rollout: Rollout, succeeded: int) -> int:
    """The starts (by weight) a minute allows once `succeeded` shards succeeded: the cap, or
    under a ramp `min(cap, floor(base * factor ** (succeeded // every_succeeded)))`."""
    cap = rollout.max_shards_per_minute or rollout.max_devices_per_minute or 1
    ramp = rollout.ramp
    if ramp is None:
        return cap
    steps = succeeded // ramp.every_succeeded
    # The ramp reaches the cap within log(cap)/log(factor) steps: stop there (no overflow).
    if steps >= math.log(cap / ramp.base, ramp.factor) + 1:
        return cap
    return min(cap, math.floor(ramp.base * ramp.factor**steps))


#: Minutes `least_rollout_minutes` counts at most (a rollout longer than this is this long).
MAX_ROLLOUT_MINUTES = 366 * 24 * 60


def least_rollout_minutes(rollout: Rollout, weights: Sequence[int]) -> int:
    """The fewest whole minutes in which shards of these start weights can all start under
    `rollout`, a ramp counted as if every start succeeded by the end of its minute."""
    minutes = started = 0
    while started < len(weights) and minutes < MAX_ROLLOUT_MINUTES:
        limit, used = rate_limit(rollout, started), 0
        while started < len(weights) and (used == 0 or used + weights[started] <= limit):
            used += weights[started]
            started += 1
        minutes += 1
    return minutes


def succeeded_shards(instance: InstanceRecord) -> int:
    """Shards of the instance that succeeded, from its counter (sent ones not ended are in
    `remaining`; ended ones that did not succeed in `failed_shards`)."""
    return max(0, _sends(instance) - instance.remaining - instance.failed_shards)


def _sends(instance: InstanceRecord) -> int:
    """How many shard messages the instance sends (its send order's length), uncounted."""
    if instance.only is None:
        return instance.plan.count
    return sum(1 for i in instance.only if 0 <= i < instance.plan.count)


def gate_of(instance: InstanceRecord) -> str | None:
    """The shared gate of `rollout.scope: tenant` (`<tenant>#<task>`), else None (its own)."""
    if instance.rollout is not None and instance.rollout.scope == "tenant":
        return f"{instance.tenant or '-'}#{instance.task_id}"
    return None


def spread_s(instance_id: str, shard: int, span_s: int) -> int:
    """A deterministic delay in [0, span_s] for one shard: every sender computes the same."""
    if span_s <= 0:
        return 0
    return zlib.crc32(f"{instance_id}#{shard}".encode()) % (span_s + 1)


def window_decision(
    instance: InstanceRecord, message: ShardMessage, now: datetime
) -> StartDecision | None:
    """The shard's window, decided from the window and the clock alone (no request): None if
    the shard may go on to its start; outside the window, `defer` waits for the next opening
    in hops of at most `MAX_DELAY_S`, `cancel` ends the instance. A reduce touches no device:
    no window holds it."""
    if instance.window is None or message.reduce:
        return None
    window = shard_window(instance.window, message.bounds)
    if window is None or windows.is_open(window, now):
        return None
    if window.on_close == "cancel" and _missed(instance, window, now):
        return StartDecision(StartAction.CANCEL, why=_closed_reason(instance, message))
    opens = windows.next_open(window, now)
    # Come back at the opening, spread over its first minute so that a whole instance's
    # shards do not meet the gate in the same second.
    wait = (opens - now).total_seconds() + spread_s(instance.instance_id, message.shard, 59)
    return StartDecision(StartAction.WAIT, min(MAX_DELAY_S, math.ceil(wait)), "window")


def counted(instance: InstanceRecord, message: ShardMessage) -> bool:
    """True if the shard's start is counted against a rollout rate (a reduce is not)."""
    return instance.rollout is not None and not message.reduce


def count_start(
    instance: InstanceRecord, message: ShardMessage, services: ClockedInstancePorts
) -> StartDecision:
    """Count the shard's start (for a `counted` shard): a seat on its gate (`seat_gate`),
    against the rate ramped by the succeeded shards of the instance's counter. START in a
    seat of the current minute (or the seat its message holds, once its minute came); else
    WAIT until the seat's minute, which its copy holds. Seats are sold in the order shards
    ask, so a shard that waits keeps its place: none loses every minute to newer ones. Taken
    once the shard holds everything else it needs (its tenant's slot), so that only a start
    that goes on to its lease is counted."""
    rollout = instance.rollout
    assert rollout is not None
    now = services.clock.now()
    minute = floor_minute(now)
    held = held_seat(message, minute)
    if held is not None:
        return seat_decision(instance, message, now, held)
    seat = services.instances.take_seat(
        seat_gate(instance),
        minute=minute,
        limit=rate_limit(rollout, succeeded_shards(instance)),
        weight=start_weight(rollout, message.bounds),
        latest=instance.deadline,
    )
    if seat is None:
        # No seat before the instance's deadline (none sold: it would be a hole the later
        # shards wait behind): the shard comes back in a while; its instance times out first.
        return StartDecision(StartAction.WAIT, MAX_DELAY_S, "rate: no seat before the deadline")
    return seat_decision(instance, message, now, seat)


def seats_at_send(instance: InstanceRecord) -> bool:
    """True if a rollout's seats are sold when its shards are sent, the minute's sends in one
    write (`sell_seats`), not one per start: its messages reach a worker within their minute.
    Not so for a capped tenant's (a start may wait for a slot past the minute), a per-group
    window's (a start may wait for its group's), a spread send's (each at its own second), nor
    on a gate the tenant's instances share (`scope: tenant`: their starts fill each minute in
    the order they come, where one instance's whole minute might not fit): their starts take
    their seats themselves."""
    return (
        instance.rollout is not None
        and gate_of(instance) is None
        and instance.tenant_cap is None
        and (instance.window is None or not instance.window.per_group)
        and instance.shard_spread_s == 0
    )


def sell_seats(
    instance: InstanceRecord, shards: Sequence[int], services: ClockedInstancePorts
) -> datetime | None:
    """One seat for the starts of `shards` (their weights summed, a reduce's not counted), on
    the instance's seat gate: the minute their messages carry (`ShardMessage.seat`), in which
    each starts without another write. None, and nothing sold, if no minute before the
    instance's deadline has room (each start then takes its own)."""
    rollout = instance.rollout
    assert rollout is not None
    weight = sum(
        start_weight(rollout, instance.plan.bounds(i)) for i in shards if i < instance.plan.count
    )
    if weight == 0:
        return None
    return services.instances.take_seat(
        seat_gate(instance),
        minute=floor_minute(services.clock.now()),
        limit=rate_limit(rollout, succeeded_shards(instance)),
        weight=weight,
        latest=instance.deadline,
    )


def seat_delay_s(instance_id: str, shard: int, seat: datetime, now: datetime) -> int:
    """How long a message holding `seat` stays off the queue: none in its minute; before it,
    until the minute plus the shard's own second within its first 45 (hops of at most
    `MAX_DELAY_S`), as a rate's wait comes back."""
    if seat <= floor_minute(now):
        return 0
    wait = (seat - now).total_seconds() + spread_s(instance_id, shard, 45)
    return min(MAX_DELAY_S, math.ceil(wait))


def held_seat(message: ShardMessage, minute: datetime) -> datetime | None:
    """The seat a deferred copy holds, if it is still good: its minute now or to come. A seat
    whose minute passed (the copy came back late, or is a retry's body, or met a full cap or a
    closed window meanwhile) is not used: the start takes a new one, so no minute is ever
    spent twice."""
    return message.seat if message.seat is not None and message.seat >= minute else None


def seat_decision(
    instance: InstanceRecord, message: ShardMessage, now: datetime, seat: datetime
) -> StartDecision:
    """START in the seat's minute (the seat carried on, for a copy a later step sends); else
    WAIT for it, at the shard's own second within its first 45 (hops of at most MAX_DELAY_S),
    so that it arrives while its minute lasts."""
    delay = seat_delay_s(instance.instance_id, message.shard, seat, now)
    if delay == 0:
        return StartDecision(StartAction.START, seat=seat)
    return StartDecision(StartAction.WAIT, delay, "rate", seat)


def seat_gate(instance: InstanceRecord) -> str:
    """The gate a rollout's starts take their seats on: `<tenant>#<task>` under `scope:
    tenant` (`gate_of`), else the instance's own (`instance#<id>`)."""
    return gate_of(instance) or f"instance#{instance.instance_id}"


def fenced(instance: InstanceRecord) -> bool:
    """True if the instance's starts have a fence: it has a rollout or an abort criterion.

    Every end of such an instance closes the fence before its end is written (`close_fence`),
    and every shard start checks it after taking its lease (`starts_closed`): no ordering of
    an end and a start runs a handler after the end. Other instances pay no request for it:
    their starts see an end through the worker's instance read (at most a second old)."""
    return instance.rollout is not None or instance.abort is not None


def starts_closed(instance: InstanceRecord, shard: int, services: InstancePorts) -> bool:
    """The fence, read strongly consistent after the lease of the instance's shard `shard` was
    taken: True if the instance's starts were closed (the shard must not run)."""
    return services.instances.starts_closed(
        instance.instance_id, shard=shard, shards=instance.plan.count
    )


def close_fence(instance: InstanceRecord, services: SendPorts, reason: str) -> None:
    """Close a `fenced` instance's starts before its end is written (an abort, a cancel, a
    timeout, a window's close): once this returns, no shard of it starts. Idempotent; nothing
    for an instance with no fence. Closed even with no shard left to end: the read may be
    stale, and a drained counter may still start the reduce."""
    if fenced(instance):
        services.instances.close_starts(instance.instance_id, reason, shards=instance.plan.count)
        services.faults.at("starts_closed", instance.instance_id)


def _closed_reason(instance: InstanceRecord, message: ShardMessage) -> str:
    """`window_closed`, naming the group for a window of its own."""
    if instance.window is None or not instance.window.per_group:
        return "window_closed"
    group = f"{message.bounds.get('tenant')}/{message.bounds.get('group')}"
    return f"window_closed: group {group}'s window closed before shard {message.shard} started"


def _missed(instance: InstanceRecord, window: Window, now: datetime) -> bool:
    """True if the shard missed its window, closed at `now`: for the instance's own window
    always (its sends are paced: its shards reach a worker only once it opened); for a
    shard's own window (per device group, its message sent at the claim) only once the first
    opening at or after the claim has closed, since before it the window never opened for the
    shard."""
    if window is instance.window:
        return True
    first = windows.next_open(window, instance.created_at)
    closes = windows.closes_at(window, first)
    return closes is not None and now >= closes


@dataclass(frozen=True)
class Allowance:
    """What a paced instance's dispatcher sends now: `count` more messages of its send order
    (from its cursor), and when to send again (`until`: its dispatch lease's end), or
    `cancel` (its window closed after it began: `on_close: cancel`)."""

    count: int
    until: datetime | None = None
    cancel: bool = False


def paced(instance: InstanceRecord) -> bool:
    """True if the instance's shards are sent as they may start, not all at once."""
    return instance.rollout is not None or (
        instance.window is not None and not instance.window.per_group
    )


def send_allowance(instance: InstanceRecord, now: datetime) -> Allowance:
    """How many of a paced instance's remaining messages to send at `now`.

    Closed window: none, until the next opening (for `on_close: cancel` once some were sent:
    the instance ends). Rollout: what the current minute allows (the rate, ramped from the
    succeeded shards; for a device rate, shards until their devices reach it, at least one),
    then again at the next minute. Window alone: everything (the worker holds starts to it).
    """
    from iotsched.core.messages import send_order  # the dispatcher's: not a worker's cold start

    order: Sequence[int] = send_order(instance)
    left = len(order) - min(instance.sent, len(order))
    # A per-group window holds back each shard at its start, not the instance's sends.
    window = None if instance.window is None or instance.window.per_group else instance.window
    if window is not None and not windows.is_open(window, now):
        if window.on_close == "cancel" and instance.sent > 0:
            return Allowance(0, cancel=True)
        return Allowance(0, until=windows.next_open(window, now))
    rollout = instance.rollout
    if rollout is None or left == 0:
        return Allowance(left)
    limit = rate_limit(rollout, succeeded_shards(instance))
    count, used = 0, 0
    for index in order[instance.sent :]:
        weight = start_weight(rollout, instance.plan.bounds(index))
        if count and used + weight > limit:
            break
        count, used = count + 1, used + weight
    return Allowance(count, until=floor_minute(now) + _MINUTE)
