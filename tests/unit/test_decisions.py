"""Pure deciders (iotsched.core.decisions): firings and misfire, business dates, leases, backoff."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from itertools import islice, takewhile
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iotsched.core.attempt_record import Attempt
from iotsched.core.decisions import (
    MAX_SLOTS_PER_TICK,
    Firing,
    FiringPlan,
    LeaseVerdict,
    backoff_delay_s,
    business_date_for,
    data_interval_for,
    decide_instance_outcome,
    decide_lease,
    first_fire_after,
    plan_firing,
)
from iotsched.core.instance_record import (
    InstanceStatus,
    TriggerKind,
)
from iotsched.core.shard_record import (
    ShardRecord,
    ShardStatus,
)
from iotsched.core.task_definition import (
    BusinessDateRule,
    TaskDefinition,
)
from iotsched.core.task_policies import MisfirePolicy
from tests.support import T0, task

M = timedelta(minutes=1)


def rate_task(
    period: str = "15m",
    policy: MisfirePolicy = MisfirePolicy.FIRE_ONCE,
    *,
    grace_s: int = 300,
    max_catch_up: int = 3,
) -> TaskDefinition:
    return task(
        "t",
        trigger={"rate": period},
        misfire={"policy": policy, "grace_s": grace_s, "max_catch_up": max_catch_up},
    )


def summary(plan: FiringPlan) -> list[tuple[int, str, str, str | None, list[int]]]:
    """Firings as (minutes after T0, kind, status, reason, covered minutes after T0)."""
    return [
        (
            (f.slot - T0) // M,
            f.kind.value,
            f.status.value,
            f.reason,
            [(c - T0) // M for c in f.covers],
        )
        for f in plan.firings
    ]


# -- plan_firing: table --------------------------------------------------------------------------

FIRE = InstanceStatus.PLANNING.value
SKIP = InstanceStatus.SKIPPED.value
SCHED = TriggerKind.SCHEDULED.value
CATCH = TriggerKind.CATCH_UP.value


@pytest.mark.parametrize(
    ("policy", "last", "now", "expected", "next_fire"),
    [
        pytest.param(
            MisfirePolicy.SKIP, None, 0, [(0, SCHED, FIRE, None, [])], 15, id="first-slot-on-time"
        ),
        pytest.param(
            MisfirePolicy.SKIP, 0, 15, [(15, SCHED, FIRE, None, [])], 30, id="next-slot-on-time"
        ),
        pytest.param(MisfirePolicy.SKIP, 0, 14, [], 15, id="not-due-yet"),
        # Down from T0 to T0+60: slots 15, 30, 45 are more than grace (300 s) old; 60 is fresh.
        pytest.param(
            MisfirePolicy.SKIP,
            0,
            60,
            [
                (15, SCHED, SKIP, "misfire", []),
                (30, SCHED, SKIP, "misfire", []),
                (45, SCHED, SKIP, "misfire", []),
                (60, SCHED, FIRE, None, []),
            ],
            75,
            id="skip-records-missed-slots",
        ),
        pytest.param(
            MisfirePolicy.FIRE_ONCE,
            0,
            60,
            [(60, SCHED, FIRE, None, [15, 30, 45])],
            75,
            id="fire-once-covers-missed-slots",
        ),
        pytest.param(
            MisfirePolicy.FIRE_ONCE,
            0,
            67,
            [(60, CATCH, FIRE, None, [15, 30, 45])],
            75,
            id="fire-once-all-late-is-a-catch-up",
        ),
        pytest.param(
            MisfirePolicy.CATCH_UP,
            0,
            60,
            [
                (15, CATCH, FIRE, None, []),
                (30, CATCH, FIRE, None, []),
                (45, CATCH, SKIP, "catch_up_limit", []),
                (60, SCHED, FIRE, None, []),
            ],
            75,
            id="catch-up-oldest-first-bounded",
        ),
        pytest.param(
            MisfirePolicy.CATCH_UP,
            0,
            21,
            [(15, CATCH, FIRE, None, [])],
            30,
            id="catch-up-one-late-slot",
        ),
        pytest.param(
            MisfirePolicy.SKIP,
            0,
            21,
            [(15, SCHED, SKIP, "misfire", [])],
            30,
            id="skip-one-late-slot",
        ),
        pytest.param(
            MisfirePolicy.SKIP,
            0,
            20,
            [(15, SCHED, FIRE, None, [])],
            30,
            id="grace-is-inclusive",
        ),
    ],
)
def test_plan_firing_table(
    policy: MisfirePolicy, last: int | None, now: int, expected: list[Any], next_fire: int
) -> None:
    definition = rate_task("15m", policy, max_catch_up=2)
    last_slot = None if last is None else T0 + last * M
    plan = plan_firing(
        definition,
        next_fire=T0 if last is None else T0 + (last + 15) * M,
        last_slot=last_slot,
        now=T0 + now * M + timedelta(seconds=42),  # the tick's seconds are floored away
    )
    assert summary(plan) == expected
    assert plan.next_fire == T0 + next_fire * M
    assert plan.last_slot == (T0 + expected[-1][0] * M if expected else last_slot)


def test_a_task_that_never_fires_again_is_not_planned() -> None:
    plan = plan_firing(rate_task(), next_fire=None, last_slot=T0, now=T0 + 60 * M)
    assert plan == FiringPlan(firings=[], last_slot=T0, next_fire=None)


def test_one_time_trigger_fires_once() -> None:
    definition = task("once", trigger={"at": "2026-11-29T12:30:45Z"})
    first = first_fire_after(definition, T0)
    assert first == T0 + 30 * M
    plan = plan_firing(definition, next_fire=first, last_slot=None, now=T0 + 31 * M)
    assert summary(plan) == [(30, SCHED, FIRE, None, [])]
    assert plan.next_fire is None
    assert first_fire_after(definition, T0 + 30 * M) is None


def test_dependency_trigger_is_never_due_by_the_clock() -> None:
    definition = task("child", trigger={"after": ["parent"]})
    assert first_fire_after(definition, T0) is None


def test_daily_cron_in_a_zone() -> None:
    definition = task(
        "close",
        trigger={"cron": "5 0 * * *", "timezone": "Europe/Berlin"},
        misfire={"policy": "catch_up", "max_catch_up": 3},
    )
    # 00:05 Berlin = 23:05Z the day before (CET). Down for five days, back at 2026-11-29T10:00Z.
    last = datetime(2026, 11, 23, 23, 5, tzinfo=UTC)
    plan = plan_firing(
        definition,
        next_fire=datetime(2026, 11, 24, 23, 5, tzinfo=UTC),
        last_slot=last,
        now=datetime(2026, 11, 29, 10, 0, tzinfo=UTC),
    )
    assert [(f.slot.day, f.status, f.kind) for f in plan.firings] == [
        (24, InstanceStatus.PLANNING, TriggerKind.CATCH_UP),
        (25, InstanceStatus.PLANNING, TriggerKind.CATCH_UP),
        (26, InstanceStatus.PLANNING, TriggerKind.CATCH_UP),
        (27, InstanceStatus.SKIPPED, TriggerKind.CATCH_UP),
        (28, InstanceStatus.SKIPPED, TriggerKind.CATCH_UP),
    ]
    assert plan.next_fire == datetime(2026, 11, 29, 23, 5, tzinfo=UTC)


# -- plan_firing: properties ---------------------------------------------------------------------

TRIGGERS = [
    {"rate": "1m"},
    {"rate": "7m"},
    {"rate": "15m"},
    {"rate": "1h"},
    {"rate": "1d"},
    {"cron": "*/10 * * * *"},
    {"cron": "30 2 * * *", "timezone": "Europe/Berlin"},
    {"cron": "0 9 * * 1-5", "timezone": "America/New_York"},
]


@st.composite
def misfire_tasks(draw: st.DrawFn) -> TaskDefinition:
    return task(
        "p",
        trigger=draw(st.sampled_from(TRIGGERS)),
        misfire={
            "policy": draw(st.sampled_from(list(MisfirePolicy))),
            "grace_s": draw(st.sampled_from([0, 59, 60, 300, 3600, 86_400])),
            "max_catch_up": draw(st.integers(min_value=1, max_value=6)),
        },
    )


instants = st.datetimes(
    min_value=datetime(2025, 1, 1), max_value=datetime(2028, 12, 31), timezones=st.just(UTC)
)


def grid(
    definition: TaskDefinition,
    after: datetime,
    upto: datetime,
    limit: int = MAX_SLOTS_PER_TICK + 1,
) -> list[datetime]:
    """The trigger's slots in (after, upto], at most `limit` of them."""
    out = []
    for slot in islice(definition.trigger.slots_after(after), limit):
        if slot > upto:
            break
        out.append(slot)
    return out


def spread(firings: list[Firing]) -> list[datetime]:
    """Every slot the firings stand for: their own and the ones they cover, in order."""
    return sorted(s for f in firings for s in (f.slot, *f.covers))


@settings(max_examples=200, deadline=None)
@given(
    definition=misfire_tasks(),
    start=instants,
    claimed_before=st.booleans(),
    outage=st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=2)),
)
def test_plan_firing_properties(
    definition: TaskDefinition, start: datetime, claimed_before: bool, outage: timedelta
) -> None:
    first = first_fire_after(definition, start)
    assert first is not None
    last_slot = first if claimed_before else None
    next_fire = first_fire_after(definition, first) if claimed_before else first
    assert next_fire is not None
    now = next_fire + outage
    due = grid(definition, last_slot or (first - M), now.replace(second=0, microsecond=0), 10**5)

    plan = plan_firing(definition, next_fire=next_fire, last_slot=last_slot, now=now)
    slots = [f.slot for f in plan.firings]
    floor = last_slot or (first - M)

    # slots strictly increase and lie in (last_slot, now]; the clock moves past now
    assert slots == sorted(set(slots))
    assert all(floor < s <= now for s in slots)
    assert plan.next_fire is not None
    assert plan.next_fire > now
    assert plan.last_slot == (due[-1] if due else last_slot)
    # every due slot is fired, covered or recorded skipped, and nothing else is
    covered = [c for f in plan.firings for c in f.covers]
    assert sorted(slots + covered) == due

    grace = timedelta(seconds=definition.misfire.grace_s)
    now_min = now.replace(second=0, microsecond=0)
    late = [s for s in due if now_min - s > grace]
    fired = [f for f in plan.firings if f.status is InstanceStatus.PLANNING]
    skipped = [f for f in plan.firings if f.status is InstanceStatus.SKIPPED]
    assert {f.status for f in plan.firings} <= {InstanceStatus.PLANNING, InstanceStatus.SKIPPED}
    assert all(f.reason is None for f in fired)
    # skipped slots are recorded one by one, or (for many) by a record covering the rest
    assert len(skipped) <= MAX_SLOTS_PER_TICK
    assert all(all(f.slot < c for c in f.covers) for f in skipped)

    policy = definition.misfire.policy
    if policy is MisfirePolicy.FIRE_ONCE:
        assert len(plan.firings) == (1 if due else 0)
        if due:
            (only,) = plan.firings
            assert only.status is InstanceStatus.PLANNING
            assert only.slot == due[-1]
            assert only.covers == due[:-1]
            assert only.kind is (TriggerKind.CATCH_UP if due[-1] in late else TriggerKind.SCHEDULED)
    elif policy is MisfirePolicy.CATCH_UP:
        catch_ups = [f for f in fired if f.kind is TriggerKind.CATCH_UP]
        assert len(catch_ups) <= definition.misfire.max_catch_up
        assert [f.slot for f in catch_ups] == late[: definition.misfire.max_catch_up]
        assert spread(skipped) == late[definition.misfire.max_catch_up :]
        assert all(f.reason == "catch_up_limit" for f in skipped)
        assert [f.slot for f in fired if f.kind is TriggerKind.SCHEDULED] == [
            s for s in due if s not in late
        ]
    else:  # SKIP
        assert spread(skipped) == late
        assert all(f.reason == "misfire" for f in skipped)
        assert [f.slot for f in fired] == [s for s in due if s not in late]
        assert all(f.kind is TriggerKind.SCHEDULED for f in plan.firings)


@settings(max_examples=100, deadline=None)
@given(
    definition=misfire_tasks(),
    start=instants,
    gaps=st.lists(
        st.timedeltas(min_value=timedelta(seconds=1), max_value=timedelta(days=2)),
        min_size=1,
        max_size=6,
    ),
)
def test_successive_ticks_account_for_each_slot_once(
    definition: TaskDefinition, start: datetime, gaps: list[timedelta]
) -> None:
    """Ticks at increasing times, as the dispatcher runs them (only when the task is due).

    Every slot up to the task's last claimed slot is acted on (fired, covered or skipped)
    exactly once, however the ticks fall; a long outage is worked off over several ticks.
    """
    next_fire = first_fire_after(definition, start)
    assert next_fire is not None
    first, last_slot = next_fire, None
    seen: list[datetime] = []
    now = start
    for gap in gaps:
        now += gap
        if next_fire is None or next_fire > now:
            continue  # not due: the index on next fire time does not return the task
        plan = plan_firing(definition, next_fire=next_fire, last_slot=last_slot, now=now)
        seen += [f.slot for f in plan.firings] + [c for f in plan.firings for c in f.covers]
        assert plan.next_fire is None or plan.next_fire > now
        next_fire, last_slot = plan.next_fire, plan.last_slot
    assert len(seen) == len(set(seen))
    if last_slot is not None:
        assert sorted(seen) == list(
            takewhile(lambda s: s <= last_slot, definition.trigger.slots_after(first - M))
        )


@pytest.mark.parametrize("policy", list(MisfirePolicy))
def test_an_outage_longer_than_one_tick_can_plan(policy: MisfirePolicy) -> None:
    """A one-minute task whose dispatcher was down for a day: 1440 missed slots.

    A tick records at most MAX_SLOTS_PER_TICK firings; the ticks that follow (one a minute, the
    task due again at its next fire time) account for every slot exactly once (none silently
    missing), and the policy holds for the outage as a whole: fire_once fires
    one instance, at the latest slot, covering the others; catch_up fires at most max_catch_up.
    """
    definition = rate_task("1m", policy, max_catch_up=3)
    back = T0 + timedelta(days=1)

    def accounted_slots(after: datetime, upto: datetime) -> list[datetime]:
        return grid(definition, after, upto, limit=10**6)

    next_fire: datetime | None = T0 + M
    last_slot: datetime | None = T0
    plans = []
    for minute in range(5):
        now = back + minute * M
        if next_fire is None or next_fire > now:
            continue
        plan = plan_firing(definition, next_fire=next_fire, last_slot=last_slot, now=now)
        assert len(plan.firings) <= MAX_SLOTS_PER_TICK
        plans.append(plan)
        next_fire, last_slot = plan.next_fire, plan.last_slot

    firings = [f for plan in plans for f in plan.firings]
    accounted = [f.slot for f in firings] + [c for f in firings for c in f.covers]
    assert last_slot == back + 4 * M
    missing = sorted(set(grid(definition, T0, last_slot, limit=10**6)) - set(accounted))
    assert not missing, f"{len(missing)} slots never fired nor recorded, from {missing[0]}"
    assert len(accounted) == len(set(accounted)) == 24 * 60 + 4

    outage = [f for f in firings if f.slot <= back and f.status is InstanceStatus.PLANNING]
    if policy is MisfirePolicy.FIRE_ONCE:
        assert [f.slot for f in outage] == [back]
        assert len(outage[0].covers) == 24 * 60 - 1
    elif policy is MisfirePolicy.CATCH_UP:
        catch_ups = [f.slot for f in outage if f.kind is TriggerKind.CATCH_UP]
        assert catch_ups == [T0 + M, T0 + 2 * M, T0 + 3 * M]
    else:  # the slots inside the grace period fire; none of the others
        grace = timedelta(seconds=definition.misfire.grace_s)
        assert [f.slot for f in outage] == [
            s for s in accounted_slots(T0, back) if back - s <= grace
        ]


# -- business dates ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rule", "slot", "zone", "business_date", "interval"),
    [
        pytest.param(
            BusinessDateRule.PREVIOUS_DAY,
            "2026-11-29T00:05",
            "UTC",
            date(2026, 11, 28),
            ("2026-11-28T00:00", "2026-11-29T00:00"),
            id="previous-day-utc",
        ),
        pytest.param(
            BusinessDateRule.SAME_DAY,
            "2026-11-29T18:00",
            "UTC",
            date(2026, 11, 29),
            ("2026-11-29T00:00", "2026-11-29T18:00"),
            id="same-day-utc",
        ),
        # 00:05 in Berlin is 23:05Z the day before: the business date is the local yesterday.
        pytest.param(
            BusinessDateRule.PREVIOUS_DAY,
            "2026-11-28T23:05",
            "Europe/Berlin",
            date(2026, 11, 28),
            ("2026-11-27T23:00", "2026-11-28T23:00"),
            id="previous-day-berlin",
        ),
        pytest.param(
            BusinessDateRule.SAME_DAY,
            "2026-11-28T23:05",
            "Europe/Berlin",
            date(2026, 11, 29),
            ("2026-11-28T23:00", "2026-11-28T23:05"),
            id="same-day-berlin",
        ),
        pytest.param(
            BusinessDateRule.PREVIOUS_DAY,
            "2026-11-29T16:05",
            "Asia/Shanghai",
            date(2026, 11, 29),
            ("2026-11-28T16:00", "2026-11-29T16:00"),
            id="previous-day-shanghai",
        ),
        # The spring-forward day is 23 hours long, the fall-back day 25.
        pytest.param(
            BusinessDateRule.PREVIOUS_DAY,
            "2026-03-29T22:05",
            "Europe/Berlin",
            date(2026, 3, 29),
            ("2026-03-28T23:00", "2026-03-29T22:00"),
            id="previous-day-23h",
        ),
        pytest.param(
            BusinessDateRule.PREVIOUS_DAY,
            "2026-10-25T23:05",
            "Europe/Berlin",
            date(2026, 10, 25),
            ("2026-10-24T22:00", "2026-10-25T23:00"),
            id="previous-day-25h",
        ),
    ],
)
def test_business_date_and_data_interval(
    rule: BusinessDateRule,
    slot: str,
    zone: str,
    business_date: date,
    interval: tuple[str, str],
) -> None:
    at = datetime.fromisoformat(slot).replace(tzinfo=UTC)
    assert business_date_for(rule, at, zone) == business_date
    start, end = data_interval_for(rule, at, zone)
    assert (start, end) == tuple(datetime.fromisoformat(i).replace(tzinfo=UTC) for i in interval)
    assert start.tzinfo is UTC
    assert end.tzinfo is UTC


@settings(max_examples=200, deadline=None)
@given(
    slot=instants,
    zone=st.sampled_from(["UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata"]),
)
def test_previous_day_interval_ends_at_local_midnight_before_the_slot(
    slot: datetime, zone: str
) -> None:
    start, end = data_interval_for(BusinessDateRule.PREVIOUS_DAY, slot, zone)
    tz = ZoneInfo(zone)
    local_day = slot.astimezone(tz).date()
    assert start < end <= slot
    assert timedelta(hours=23) <= end - start <= timedelta(hours=25)
    assert end.astimezone(tz).replace(tzinfo=None) == datetime.combine(local_day, time(0))
    assert start.astimezone(tz).replace(tzinfo=None) == datetime.combine(
        local_day - timedelta(days=1), time(0)
    )
    assert business_date_for(BusinessDateRule.PREVIOUS_DAY, slot, zone) == local_day - timedelta(
        days=1
    )


# -- leases -------------------------------------------------------------------------------------


def shard(status: ShardStatus, *, attempt: int = 0, lease: int | None = None) -> ShardRecord:
    """A shard record whose lease ends `lease` seconds after T0."""
    return ShardRecord(
        instance_id="t@2026-11-29T12:00Z",
        index=0,
        status=status,
        attempt=attempt,
        owner="w" if status is ShardStatus.RUNNING else None,
        lease_until=None if lease is None else T0 + timedelta(seconds=lease),
        attempts=[Attempt(number=n, worker="w", started_at=T0) for n in range(1, attempt + 1)],
    )


@pytest.mark.parametrize(
    ("record", "verdict"),
    [
        pytest.param(None, LeaseVerdict.TAKE, id="new"),
        pytest.param(shard(ShardStatus.PENDING), LeaseVerdict.TAKE, id="pending"),
        pytest.param(shard(ShardStatus.PENDING, attempt=2), LeaseVerdict.TAKE, id="released"),
        pytest.param(
            shard(ShardStatus.RUNNING, attempt=1, lease=1), LeaseVerdict.BUSY, id="running-live"
        ),
        pytest.param(
            shard(ShardStatus.RUNNING, attempt=3, lease=1),
            LeaseVerdict.BUSY,
            id="running-live-last-attempt",
        ),
        pytest.param(
            shard(ShardStatus.RUNNING, attempt=1, lease=0),
            LeaseVerdict.TAKE,
            id="running-expires-now",
        ),
        pytest.param(
            shard(ShardStatus.RUNNING, attempt=2, lease=-1),
            LeaseVerdict.TAKE,
            id="running-expired-attempts-left",
        ),
        pytest.param(
            shard(ShardStatus.RUNNING, attempt=3, lease=-1),
            LeaseVerdict.EXHAUSTED,
            id="running-expired-no-attempts-left",
        ),
        *(
            pytest.param(
                shard(status, attempt=1, lease=60), LeaseVerdict.FINISHED, id=f"final-{status}"
            )
            for status in (
                ShardStatus.SUCCEEDED,
                ShardStatus.FAILED,
                ShardStatus.TIMED_OUT,
                ShardStatus.CANCELLED,
            )
        ),
    ],
)
def test_decide_lease(record: ShardRecord | None, verdict: LeaseVerdict) -> None:
    assert decide_lease(record, now=T0, max_attempts=3) is verdict


def test_final_statuses() -> None:
    assert {s for s in ShardStatus if s.final} == {
        ShardStatus.SUCCEEDED,
        ShardStatus.FAILED,
        ShardStatus.TIMED_OUT,
        ShardStatus.CANCELLED,
    }
    assert {s for s in InstanceStatus if not s.final} == {
        InstanceStatus.SCHEDULED,
        InstanceStatus.QUEUED,
        InstanceStatus.PLANNING,
        InstanceStatus.RUNNING,
        InstanceStatus.REDUCING,
    }


@pytest.mark.parametrize(
    ("failed", "timed_out", "status"),
    [
        (0, 0, InstanceStatus.SUCCEEDED),
        (1, 0, InstanceStatus.FAILED),
        (0, 1, InstanceStatus.FAILED),
        (3, 2, InstanceStatus.FAILED),
    ],
)
def test_decide_instance_outcome(failed: int, timed_out: int, status: InstanceStatus) -> None:
    assert decide_instance_outcome(failed, timed_out) is status


@pytest.mark.parametrize(
    ("attempt", "base", "cap", "delay"),
    [
        (1, 30, 43_200, 30),
        (2, 30, 43_200, 60),
        (3, 30, 43_200, 120),
        (4, 30, 43_200, 240),
        (12, 30, 43_200, 43_200),
        (1000, 30, 43_200, 43_200),
        (5, 30, 100, 100),
        (0, 30, 43_200, 0),
        (-1, 30, 43_200, 0),
        (3, 0, 43_200, 0),
    ],
)
def test_backoff_delay(attempt: int, base: int, cap: int, delay: int) -> None:
    assert backoff_delay_s(attempt, base, cap) == delay


@settings(max_examples=200, deadline=None)
@given(
    attempt=st.integers(min_value=1, max_value=200),
    base=st.integers(min_value=1, max_value=43_200),
)
def test_backoff_grows_and_is_capped(attempt: int, base: int) -> None:
    delay = backoff_delay_s(attempt, base)
    assert min(base, 43_200) <= delay <= 43_200
    assert backoff_delay_s(attempt + 1, base) >= delay
