"""A capped tenant's sends: an instance under `max_concurrent_shards` keeps only a window of its
shards on the queue, and sends the next ones as its shards end.

A shard over its tenant's cap cannot start; on the queue it would only come back, again and
again, each time reading the tenant's slots and sending itself on. So an instance of a capped
tenant sends at most its window, its cap and a spare per `SPARE_PER` of it, of shards that
have not ended (`in_flight`); the rest wait unsent, in the instance's record (its send cursor), where waiting costs nothing. The
send is refilled from two places:

- the worker whose commit finds the instance at or under its cap in flight (`refill_due`: it
  read the instance after its commit anyway), which takes the instance's dispatch lease and
  sends the window full again (`scheduling.lifecycle.refill`); one refill at a time, by the
  lease;
- the sweeper, each minute, for an instance whose refill never came (its worker died, its
  shards were all deferred): a paced instance's dispatch lease ends at once.

The slot a shard takes at its start is still what holds the cap: the window bounds only how
many shards wait on the queue, never how many run.

**The tenant's line.** A tenant's capped instances send in order: each joins its tenant's line at
its first send, at a place ordered by priority, then by creation (`line_place`), and only the
first place sends its window (`my_turn`); the others send nothing and wait, unsent, until it
ends and leaves the line (`leave_line`: whoever ended it wakes the next, a cover too), or its
tail outlives one attempt's time (`holds_its_place`: a retry's backoff, a reduce). Its last
shards run alone: none of the next instance's fresh sends takes a slot one of them waits for
(its copies come back in seconds once it sent everything: `tail_retry`). So a newer instance's
shards start after an older one's, and a `high` instance of the tenant passes its `normal` ones
at their next refill. A place whose instance ended without leaving is taken out by the next
reader that finds it. An instance with its own pace (`rollout`, `window`) keeps it, outside the
line: it would hold the line for hours. An instance behind in line takes no seat of its
tenant's `max_instances_per_minute` before its turn.

A shard waiting out its retry's backoff keeps its place in the window (a known cost: a task
whose shards often fail with long backoffs runs under its cap while they wait).

While its sends are paced, a capped instance's deadline moves to its `instance_timeout_s` from
now with each refill that sends shards, and with each resumption that finds it behind another
in its line (`moved_deadline`; then at least `LINE_WAIT_MIN_S`, as only the sweeper's minutes
move it): the time its shards wait for the tenant's slots is not counted; the time since its
last send is. An instance whose shards stop ending is not refilled any more
and times out as before; one behind it in line waits as long as it lives.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from iotsched.core.instance_record import InstanceRecord, InstanceStatus
from iotsched.core.task_definition import Priority
from iotsched.core.timeutil import iso
from iotsched.services.port_sets import SendPorts

log = logging.getLogger(__name__)

#: Shards sent beyond the cap, per this many of the cap (at least one): they take the slots the
#: running ones give back while the refill that follows those ends is on its way.
SPARE_PER = 10
#: A line waiter's deadline is moved at each of the sweeper's minutes: at least this far.
LINE_WAIT_MIN_S = 180
#: How long a deferred shard of an instance that sent everything stays away, at least (then up
#: to as long again): its slots come free only as its own shards end.
TAIL_RETRY_S = 2
#: How long past one attempt's `timeout_s` after its last send an instance keeps its place.
TAIL_HOLD_S = 60


def window_of(cap: int) -> int:
    """How many shards of an instance under `cap` may be sent and not ended: the cap, and a
    spare per `SPARE_PER` of it."""
    return cap + max(1, cap // SPARE_PER)


def window(instance: InstanceRecord) -> int:
    """How many of a capped instance's shards may be sent and not ended."""
    assert instance.tenant_cap is not None
    return window_of(instance.tenant_cap)


def cap_paced(instance: InstanceRecord) -> bool:
    """True if the instance's sends follow its tenant's cap: capped, and more shards than one
    window (a smaller instance sends everything at once)."""
    return instance.tenant_cap is not None and len(instance.send_order()) > window(instance)


def in_flight(instance: InstanceRecord) -> int:
    """The instance's shards sent and not ended (on the queue, deferred, or running)."""
    ended = len(instance.send_order()) - instance.remaining
    return max(0, instance.sent - ended)


def allowance(instance: InstanceRecord) -> int:
    """How many more of the instance's shards its window takes now."""
    return max(0, window(instance) - in_flight(instance))


def tail_retry(instance: InstanceRecord) -> bool:
    """True if a deferred shard of `instance` comes back after `TAIL_RETRY_S`, not a slot
    wait's usual time: its sends follow the cap and it sent them all, so nothing but its own
    ending shards frees a slot for it, and none of the next instance's competes."""
    return instance.status is InstanceStatus.RUNNING and in_line(instance)


def refill_due(instance: InstanceRecord, now: datetime) -> bool:
    """True if `instance`, as read right after a commit of its shards, should send more now: its
    sends follow the cap, it has shards unsent, no more than one cap of them in flight, and no
    dispatch holds it."""
    if instance.status is not InstanceStatus.PLANNING or not cap_paced(instance):
        return False
    if instance.sent >= len(instance.send_order()):
        return False
    assert instance.tenant_cap is not None
    if in_flight(instance) > instance.tenant_cap:
        return False
    held = instance.dispatch_lease_until
    return held is None or held <= now


def moved_deadline(
    instance: InstanceRecord, now: datetime, *, behind: bool = False
) -> datetime | None:
    """The deadline a capped instance's paced send moves to (its `instance_timeout_s` from
    `now`; behind another in its line, at least `LINE_WAIT_MIN_S`: only the sweeper's minutes
    move it then), or None to leave it (not paced by the cap, or already later)."""
    if instance.instance_timeout_s is None or not cap_paced(instance):
        return None
    timeout_s = max(instance.instance_timeout_s, LINE_WAIT_MIN_S if behind else 0)
    moved = now + timedelta(seconds=timeout_s)
    return moved if moved > instance.deadline else None


#: What a capped instance's record says while it waits in its tenant's line.
LINE_WAIT = "max_concurrent_shards: tenant {tenant}'s earlier instances send first"
#: Where each priority's instances stand in a tenant's line.
_RANK = {Priority.HIGH: 0, Priority.NORMAL: 1, Priority.LOW: 2}
#: Places of ended instances a reader takes out of the line before it gives up for now.
_STALE_PLACES = 5
#: How long a place nobody took out is kept (the store's TTL).
LINE_RETENTION = timedelta(days=30)


def in_line(instance: InstanceRecord) -> bool:
    """True if the instance sends in its tenant's line: paced by its cap alone."""
    return cap_paced(instance) and instance.rollout is None and instance.window is None


def line_place(instance: InstanceRecord) -> str:
    """The instance's place in its tenant's line: by priority, then creation, then id."""
    return f"{_RANK[instance.priority]}#{iso(instance.created_at)}#{instance.instance_id}"


def _instance_at(place: str) -> str:
    return place.split("#", 2)[2]


def my_turn(instance: InstanceRecord, services: SendPorts) -> bool:
    """Whether the instance may send now: True unless it is in line behind another instance
    that still has shards to send. It joins the line at its first send."""
    if not in_line(instance):
        return True
    tenant, place = instance.tenant or "-", line_place(instance)
    if instance.sent == 0:
        services.instances.join_tenant_line(
            tenant, place, expires=instance.created_at + LINE_RETENTION
        )
    try:
        for _ in range(_STALE_PLACES):
            head = services.instances.tenant_line_head(tenant)
            if head is None or head >= place:
                return True
            other = services.instances.get_instance(_instance_at(head))
            if holds_its_place(other, services.clock.now()):
                return False
            # Its instance ended (or its tail outlived its hold) and its place was not given
            # up: it is nobody's now.
            services.instances.leave_tenant_line(tenant, head)
    except Exception:
        log.warning(
            "tenant line not read: waits for the next resumption",
            extra={"instance_id": instance.instance_id},
            exc_info=True,
        )
    return False


def holds_its_place(instance: InstanceRecord | None, now: datetime) -> bool:
    """True if an instance first in its tenant's line still holds its place: it has shards to
    send, or it sent its last ones no longer ago than one attempt may take and a tail retry
    (`TAIL_HOLD_S` more): its last shards run alone, nothing of the next instance competing
    for their slots. Past that, a shard still not ended waits out a retry's backoff (or a
    reduce runs): the line moves on."""
    if instance is None or instance.status.final:
        return False
    if instance.status is InstanceStatus.PLANNING or instance.instance_timeout_s is None:
        return True
    # Each refill that sent moved its deadline to its timeout from then: its last send's time.
    last_send = max(
        instance.created_at, instance.deadline - timedelta(seconds=instance.instance_timeout_s)
    )
    return now < last_send + timedelta(seconds=instance.timeout_s + TAIL_HOLD_S)


def leave_line(instance: InstanceRecord, services: SendPorts) -> str | None:
    """The instance ended: out of its tenant's line. The instance now first in line, for the
    caller to resume at once (not at the next sweep); None if none. A failure is logged: the
    next reader takes the place out, and the sweeper resumes the next instance."""
    if not in_line(instance):
        return None
    tenant = instance.tenant or "-"
    try:
        services.instances.leave_tenant_line(tenant, line_place(instance))
        head = services.instances.tenant_line_head(tenant)
    except Exception:
        log.warning(
            "tenant line not left: the next reader clears it",
            extra={"instance_id": instance.instance_id},
            exc_info=True,
        )
        return None
    return None if head is None else _instance_at(head)
