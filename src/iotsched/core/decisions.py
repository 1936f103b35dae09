"""Pure deciders: which slots fire, what a shard message may do, how an instance ends.

Each function takes every instant it needs as an argument and returns an immutable value; the
stores enforce the same rules atomically with conditional writes, and the contract tests check
that the in-memory fake and DynamoDB agree with these functions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, date, datetime, time, timedelta
from enum import StrEnum
from itertools import islice
from typing import Any

from pydantic import Field

from iotsched.core.abort import owes_pause
from iotsched.core.fires import Fire, exclusions, fires_after, next_fire_after
from iotsched.core.instance_record import FollowUp, InstanceRecord, InstanceStatus, TriggerKind
from iotsched.core.shard_record import ShardRecord, ShardStatus
from iotsched.core.task_definition import BusinessDateRule, Priority, TaskDefinition
from iotsched.core.task_policies import MisfirePolicy
from iotsched.core.timeutil import floor_minute, require_aware
from iotsched.core.triggers import load_zone
from iotsched.core.value_types import Frozen

#: Firings (claims) one tick makes for one task at most: max_catch_up (<= 500) fired, at most
#: MAX_SKIPPED_RECORDS skipped records, and the slots inside the grace period.
MAX_SLOTS_PER_TICK = 1000
#: Skipped slots recorded one by one; beyond this, one record covers the rest of the outage.
MAX_SKIPPED_RECORDS = 100
#: Slots one plan looks at: a minutely task down for 69 days. A longer outage is worked off
#: over successive ticks (the task stays due until its clock passes `now`).
MAX_SLOTS_PER_OUTAGE = 100_000


class Firing(Frozen):
    """One slot the tick acts on: fire it (status planning) or record it skipped."""

    slot: datetime
    kind: TriggerKind
    status: InstanceStatus
    reason: str | None = None
    covers: list[datetime] = Field(default_factory=list)
    # Manual runs, submissions and backfills: a key suffix (request id), an explicit business
    # date, params merged over the task's, and for a submission the instant it is due.
    suffix: str = ""
    business_date: date | None = None
    params: dict[str, Any] | None = None
    fire_at: datetime | None = None
    priority: Priority | None = None  # the request's own, over the task's


class FiringPlan(Frozen):
    """What one tick does for one task, and where the task's clock moves to.

    `runs`: the firings of this plan that count towards `max_runs` (every firing it claims:
    scheduled and catch-up), added to the task's count by the write that moves its clock."""

    firings: list[Firing]
    last_slot: datetime | None
    next_fire: datetime | None
    runs: int = 0


def first_fire_after(
    task: TaskDefinition,
    after: datetime,
    *,
    calendars: Mapping[str, Sequence[date]] | None = None,
    runs: int = 0,
) -> datetime | None:
    """The fire instant of the task's first slot strictly after `after` that may fire (see
    `core.fires`), or None if it never fires again."""
    return next_fire_after(task, floor_minute(after), calendars=calendars, runs=runs)


def plan_firing(
    task: TaskDefinition,
    *,
    next_fire: datetime | None,
    last_slot: datetime | None,
    now: datetime,
    calendars: Mapping[str, Sequence[date]] | None = None,
    runs: int = 0,
) -> FiringPlan:
    """Decide what the tick at `now` does for `task`.

    Due slots are the trigger's grid points `s > last_slot` whose fire instant (`core.fires`:
    the slot moved by its jitter and its maintenance window) is at or before `now`, never derived
    from a node's clock. When nothing was claimed yet (`last_slot` None) the grid starts at the
    clock's first fire instant `next_fire` (less the jitter): slots whose fire instant is before
    it are not owed. Slots on an excluded date (`calendars`: the named calendars' dates) are
    passed: neither fired nor recorded. A slot whose fire instant is more than
    `misfire.grace_s` older than `now` was missed; the task's misfire policy decides:

    * skip: missed slots are recorded skipped (reason `misfire`); on-time slots fire;
    * fire_once: one instance for the latest due slot, covering all due slots;
    * catch_up: missed slots fire oldest first, at most `max_catch_up`; the rest are skipped
      (reason `catch_up_limit`); on-time slots fire.

    Every due slot is accounted for exactly once: fired, covered, or recorded skipped (past
    MAX_SKIPPED_RECORDS skipped slots, the last skipped record covers the rest). `runs` firings
    were made before; once `max_runs` are made, or the next slot lies after `end_at`, the plan's
    `next_fire` is None: the task never fires again.

    Invariants (property-tested): firings have strictly increasing slots inside
    `(last_slot, now]`; at most `max_catch_up` catch-up firings; `next_fire > now` or None;
    no excluded slot fires.
    """
    now = floor_minute(now)
    if next_fire is None or (task.max_runs is not None and runs >= task.max_runs):
        return FiringPlan(firings=[], last_slot=last_slot, next_fire=None)
    if last_slot is not None:
        start = last_slot
    else:
        start = require_aware(next_fire) - timedelta(seconds=task.jitter_s, minutes=1)
    due: list[Fire] = []
    passed = last_slot  # the last slot the clock moves past: due, excluded or not owed
    following: datetime | None = None
    searched = False
    excluded = exclusions(task, calendars)
    for fire in islice(fires_after(task, start, excluded), MAX_SLOTS_PER_OUTAGE):
        if task.end_at is not None and fire.slot > task.end_at:
            searched = True
            break
        owed = last_slot is not None or fire.fire_at >= next_fire
        if fire.excluded_by is not None or not owed:
            if fire.slot <= now:
                passed = fire.slot
            continue
        if fire.fire_at > now:
            following, searched = fire.fire_at, True
            break
        due.append(fire)
        passed = fire.slot
    if not searched:  # the grid ended, or the outage is longer than one plan looks at
        following = first_fire_after(task, now, calendars=calendars, runs=runs)
    if not due:
        return FiringPlan(firings=[], last_slot=passed, next_fire=following)
    firings = _apply_misfire(task, due, now)
    if task.max_runs is not None:
        left = task.max_runs - runs
        fired = [n for n, f in enumerate(firings) if f.status is InstanceStatus.PLANNING]
        if len(fired) >= left:  # the last run: nothing after it is fired or recorded
            firings = firings[: fired[left - 1] + 1]
            return FiringPlan(
                firings=firings, last_slot=firings[-1].slot, next_fire=None, runs=left
            )
    fired_count = sum(1 for f in firings if f.status is InstanceStatus.PLANNING)
    return FiringPlan(firings=firings, last_slot=passed, next_fire=following, runs=fired_count)


def _apply_misfire(task: TaskDefinition, due: list[Fire], now: datetime) -> list[Firing]:
    """The firings of the due slots under the task's misfire policy, by slot."""
    grace = timedelta(seconds=task.misfire.grace_s)
    late = [f.slot for f in due if now - f.fire_at > grace]
    fresh = [f.slot for f in due if now - f.fire_at <= grace]
    slots = [f.slot for f in due]
    policy = task.misfire.policy
    firings: list[Firing] = []
    if policy is MisfirePolicy.FIRE_ONCE:
        kind = TriggerKind.SCHEDULED if fresh else TriggerKind.CATCH_UP
        covers = slots[:-1] if len(slots) > 1 else []
        firings.append(
            Firing(slot=slots[-1], kind=kind, status=InstanceStatus.PLANNING, covers=covers)
        )
    elif policy is MisfirePolicy.SKIP:
        firings.extend(_skipped(late, TriggerKind.SCHEDULED, "misfire"))
        firings.extend(_fire(s, TriggerKind.SCHEDULED) for s in fresh)
    else:  # CATCH_UP
        limit = task.misfire.max_catch_up
        firings.extend(_fire(s, TriggerKind.CATCH_UP) for s in late[:limit])
        firings.extend(_skipped(late[limit:], TriggerKind.CATCH_UP, "catch_up_limit"))
        firings.extend(_fire(s, TriggerKind.SCHEDULED) for s in fresh)
    firings.sort(key=lambda f: f.slot)
    return firings


def _skipped(slots: list[datetime], kind: TriggerKind, reason: str) -> list[Firing]:
    """One skipped record per slot; past MAX_SKIPPED_RECORDS the last record covers the rest."""
    head = slots[: MAX_SKIPPED_RECORDS - 1]
    records = [
        Firing(slot=s, kind=kind, status=InstanceStatus.SKIPPED, reason=reason) for s in head
    ]
    rest = slots[len(head) :]
    if rest:
        records.append(
            Firing(
                slot=rest[0],
                kind=kind,
                status=InstanceStatus.SKIPPED,
                reason=reason,
                covers=rest[1:],
            )
        )
    return records


def _fire(slot: datetime, kind: TriggerKind) -> Firing:
    return Firing(slot=slot, kind=kind, status=InstanceStatus.PLANNING)


def data_interval_for_date(day: date, zone: str) -> tuple[datetime, datetime]:
    """The whole local calendar day `day` in `zone`, as a half-open UTC interval."""
    tz = load_zone(zone)
    start = datetime.combine(day, time(0), tzinfo=tz)
    end = datetime.combine(day + timedelta(days=1), time(0), tzinfo=tz)
    return require_aware(start), require_aware(end)


def business_date_for(rule: BusinessDateRule, slot: datetime, zone: str) -> date:
    """The business date an instance for `slot` works on, in the task's timezone."""
    local = require_aware(slot).astimezone(load_zone(zone))
    if rule is BusinessDateRule.PREVIOUS_DAY:
        return local.date() - timedelta(days=1)
    return local.date()


def data_interval_for(
    rule: BusinessDateRule, slot: datetime, zone: str
) -> tuple[datetime, datetime]:
    """The half-open data interval `[start, end)` in UTC that an instance for `slot` covers.

    previous_day: the whole local calendar day of the business date. same_day: from local
    midnight of the slot's day up to the slot. Handlers read this, never "now".
    """
    tz = load_zone(zone)
    day = business_date_for(rule, slot, zone)
    start = datetime.combine(day, time(0), tzinfo=tz)
    if rule is BusinessDateRule.PREVIOUS_DAY:
        end = datetime.combine(day + timedelta(days=1), time(0), tzinfo=tz)
        return require_aware(start), require_aware(end)
    return require_aware(start), require_aware(slot)


class SlotDates(Frozen):
    """A slot with the business date and data interval an instance for it works on."""

    slot: datetime
    business_date: date
    data_interval_start: datetime
    data_interval_end: datetime


def slot_dates(task: TaskDefinition, slot: datetime) -> SlotDates:
    """The business date and data interval of `task`'s instance for `slot`."""
    zone = task.timezone
    start, end = data_interval_for(task.business_date, slot, zone)
    return SlotDates(
        slot=slot,
        business_date=business_date_for(task.business_date, slot, zone),
        data_interval_start=start.astimezone(UTC),
        data_interval_end=end.astimezone(UTC),
    )


def slots_for_business_dates(task: TaskDefinition, first: date, last: date) -> list[SlotDates]:
    """Every slot of `task`'s trigger whose business date lies in `[first, last]`, oldest first.

    A business date is a function of the slot's local date (`previous_day`: the day before), so
    the slots lie within a few local days of the range; the search window has a day of margin
    on each side (daylight-saving days, midnights that do not exist) and every slot in it is
    then kept or dropped by its own business date, never by its local date.
    """
    tz = load_zone(task.timezone)
    shift = timedelta(days=1 if task.business_date is BusinessDateRule.PREVIOUS_DAY else 0)
    window_start = datetime.combine(first + shift - timedelta(days=1), time(0), tzinfo=tz)
    window_end = datetime.combine(last + shift + timedelta(days=2), time(0), tzinfo=tz)
    selected = []
    for slot in task.trigger.slots_after(window_start - timedelta(minutes=1)):
        if slot >= window_end:
            break
        dates = slot_dates(task, slot)
        if first <= dates.business_date <= last:
            selected.append(dates)
    return selected


class LeaseVerdict(StrEnum):
    """What a shard message may do with the shard it names."""

    TAKE = "take"  # no live lease and attempts left: take it (attempt + 1)
    BUSY = "busy"  # another attempt holds a live lease: acknowledge, do nothing
    FINISHED = "finished"  # the shard already ended: acknowledge, do nothing
    EXHAUSTED = "exhausted"  # lease expired with no attempts left: end it timed_out


def decide_lease(shard: ShardRecord | None, *, now: datetime, max_attempts: int) -> LeaseVerdict:
    """The lease rule, which the stores enforce with one conditional write.

    ```
    status      lease_until   attempt          verdict
    (none)      -             -                TAKE
    pending     -             < max            TAKE
    running     > now         any              BUSY
    running     <= now        < max            TAKE      (the owner died: failover)
    running     <= now        >= max           EXHAUSTED
    final       -             -                FINISHED
    ```
    """
    if shard is None:
        return LeaseVerdict.TAKE
    if shard.status.final:
        return LeaseVerdict.FINISHED
    live = (
        shard.status is ShardStatus.RUNNING
        and shard.lease_until is not None
        and shard.lease_until > now
    )
    if live:
        return LeaseVerdict.BUSY
    if shard.attempt >= max_attempts:
        return LeaseVerdict.EXHAUSTED
    return LeaseVerdict.TAKE


def decide_instance_outcome(failed_shards: int, timed_out_shards: int = 0) -> InstanceStatus:
    """How an instance ends once its remaining counter reaches zero."""
    if failed_shards == 0 and timed_out_shards == 0:
        return InstanceStatus.SUCCEEDED
    return InstanceStatus.FAILED


def backoff_delay_s(attempt: int, base_s: int, cap_s: int = 43_200) -> int:
    """Seconds before attempt `attempt + 1` after attempt `attempt` failed: base * 2^(n-1), capped."""
    if attempt < 1 or base_s <= 0:
        return 0
    return int(min(cap_s, base_s * 2 ** (attempt - 1)))


def decide_follow_ups(
    instance: InstanceRecord,
    *,
    alert: bool,
    holds: bool = True,
    ending: InstanceStatus | None = None,
) -> list[FollowUp]:
    """What `instance` owes once it ends, recorded by the write that ends it: its alert (if
    `alert`), the task's pause (if it ends `ending` and that pauses its task:
    `core.abort.owes_pause`), the task's hold (if it was claimed exclusive and may hold it),
    its dependents."""
    # A task with a recovery notice owes its alert step on a success too: the notice.
    recovery = instance.alert_policy is not None and instance.alert_policy.recovery
    owed = [FollowUp.ALERT] if alert or (recovery and ending is InstanceStatus.SUCCEEDED) else []
    if ending is not None and owes_pause(instance, ending):
        owed.append(FollowUp.PAUSE)
    if instance.exclusive and holds:
        owed.append(FollowUp.RELEASE)
    owed.append(FollowUp.DEPENDENTS)
    return owed
