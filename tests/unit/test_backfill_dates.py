"""`backfill --from/--to` are business dates: every slot whose business date lies in the range
is selected, and no other, for every trigger and business_date rule."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iotsched import bootstrap
from iotsched.clock import ManualClock
from iotsched.core.decisions import business_date_for, data_interval_for
from iotsched.core.task_definition import (
    BusinessDateRule,
    TaskDefinition,
)
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.operations.on_demand import (
    ManualRunError,
    backfill_slots,
    plan_backfill,
)
from iotsched.services.wiring import Wiring
from tests.support import T0, task

ZONES = [
    "UTC",
    "Asia/Shanghai",
    "Europe/Berlin",
    "America/New_York",
    "America/Santiago",  # daylight saving changes at midnight
    "Asia/Kolkata",  # +05:30
    "Pacific/Chatham",  # +12:45 / +13:45
    "Pacific/Kiritimati",  # +14
    "Pacific/Pago_Pago",  # -11
]


def make(definition: TaskDefinition) -> Wiring:
    services = bootstrap.build_memory(clock=ManualClock(T0))
    apply_tasks([definition], services.tasks, now=T0 - timedelta(days=400))
    return services


def backfilled(services: Wiring, first: date, last: date) -> dict[datetime, date]:
    """Backfill [first, last] and return each claimed instance's slot and business date."""
    plan = plan_backfill("t", services, start=first, end=last)
    made = {}
    for instance_id, what in backfill_slots(plan, services):
        assert what == "claimed"
        instance = services.instances.get_instance(instance_id)
        assert instance is not None
        made[instance.slot] = instance.business_date
    return made


def grid(definition: TaskDefinition, first: date, last: date) -> list[datetime]:
    """Every slot of the trigger from a week before `first` to a week after `last` (UTC)."""
    start = datetime.combine(first - timedelta(days=7), time(0), tzinfo=UTC)
    end = datetime.combine(last + timedelta(days=8), time(0), tzinfo=UTC)
    slots = []
    for slot in definition.trigger.slots_after(start):
        if slot >= end:
            break
        slots.append(slot)
    return slots


def test_a_daily_previous_day_task_backfills_the_business_dates_asked_for() -> None:
    # the case: daily 00:05, business date previous_day
    definition = task(
        trigger={"cron": "5 0 * * *", "timezone": "Asia/Shanghai"}, business_date="previous_day"
    )
    services = make(definition)
    made = backfilled(services, date(2026, 11, 30), date(2026, 12, 2))
    assert sorted(made.values()) == [date(2026, 11, 30), date(2026, 12, 1), date(2026, 12, 2)]
    # 00:05 in Shanghai on 12-01 (16:05 UTC on 11-30) works on 11-30
    assert min(made) == datetime(2026, 11, 30, 16, 5, tzinfo=UTC)


def test_an_hourly_task_backfills_every_slot_of_each_business_date() -> None:
    definition = task(trigger={"cron": "0 * * * *", "timezone": "Europe/Berlin"})
    services = make(definition)
    made = backfilled(services, date(2026, 3, 28), date(2026, 3, 28))
    assert set(made.values()) == {date(2026, 3, 28)}
    # previous_day: the slots of the local day after, 03-29, which has 23 hours (DST)
    berlin = ZoneInfo("Europe/Berlin")
    assert {s.astimezone(berlin).date() for s in made} == {date(2026, 3, 29)}
    assert len(made) == 23


def test_a_weekly_task_backfills_the_week_whose_business_date_is_in_range() -> None:
    # Mondays 00:10 Berlin, previous_day: the business date is the Sunday before
    definition = task(
        trigger={"cron": "10 0 * * 1", "timezone": "Europe/Berlin"},
        params={"period": "weekly"},
    )
    services = make(definition)
    with pytest.raises(ManualRunError, match="no slot for business dates"):
        plan_backfill("t", services, start=date(2026, 11, 23), end=date(2026, 11, 28))  # Mon-Sat
    made = backfilled(services, date(2026, 11, 23), date(2026, 11, 29))  # Mon-Sun
    assert made == {datetime(2026, 11, 29, 23, 10, tzinfo=UTC): date(2026, 11, 29)}


def test_the_plan_shows_each_slot_with_its_business_date_and_data_interval() -> None:
    definition = task(trigger={"cron": "5 0 * * *", "timezone": "America/New_York"})
    plan = plan_backfill("t", make(definition), start=date(2026, 11, 1), end=date(2026, 11, 1))
    [entry] = plan.slots
    assert entry.slot == datetime(2026, 11, 2, 5, 5, tzinfo=UTC)  # 00:05 EST on 11-02
    assert entry.business_date == date(2026, 11, 1)
    # 11-01 is the autumn DST day in New York: 25 hours, from 04:00 UTC to 05:00 UTC
    assert (entry.data_interval_start, entry.data_interval_end) == (
        datetime(2026, 11, 1, 4, 0, tzinfo=UTC),
        datetime(2026, 11, 2, 5, 0, tzinfo=UTC),
    )


minute_field = st.one_of(
    st.integers(0, 59).map(str),
    st.lists(st.integers(0, 59), min_size=2, max_size=3, unique=True).map(
        lambda ms: ",".join(map(str, sorted(ms)))
    ),
)
hour_field = st.one_of(
    st.just("*"),
    st.sampled_from(["*/2", "*/3", "*/6", "1-5", "22,23", "0", "2", "3", "12", "23"]),
    st.integers(0, 23).map(str),
)
day_field = st.sampled_from([("*", "*"), ("*", "1"), ("*", "0,6"), ("1", "*"), ("28-31", "*")])
crons = st.builds(
    lambda m, h, dd: {"cron": f"{m} {h} {dd[0]} * {dd[1]}"}, minute_field, hour_field, day_field
)
rates = st.sampled_from(["45m", "1h", "90m", "5h", "1d", "2d"]).map(lambda r: {"rate": r})
triggers = st.builds(
    lambda t, zone: {**t, "timezone": zone}, st.one_of(crons, rates), st.sampled_from(ZONES)
)
rules = st.sampled_from(list(BusinessDateRule))
ranges = st.builds(
    lambda first, span: (first, first + timedelta(days=span)),
    st.dates(date(2025, 1, 1), date(2027, 12, 31)),
    st.integers(0, 3),
)


def _definition(trigger: dict[str, Any], rule: BusinessDateRule) -> TaskDefinition:
    return task(trigger=trigger, business_date=rule.value)


@settings(max_examples=60, deadline=None)
@given(trigger=triggers, rule=rules, span=ranges)
def test_a_backfill_makes_exactly_the_slots_whose_business_date_is_in_range(
    trigger: dict[str, Any], rule: BusinessDateRule, span: tuple[date, date]
) -> None:
    first, last = span
    definition = _definition(trigger, rule)
    zone = definition.timezone
    wanted = {
        s
        for s in grid(definition, first, last)
        if first <= business_date_for(rule, s, zone) <= last
    }
    services = make(definition)
    if not wanted:
        with pytest.raises(ManualRunError):
            plan_backfill("t", services, start=first, end=last)
        return
    made = backfilled(services, first, last)
    assert all(first <= d <= last for d in made.values()), made  # every one in range
    assert set(made) == wanted  # and every slot in range made


@settings(max_examples=200, deadline=None)
@given(trigger=triggers, rule=rules, span=ranges)
def test_the_business_date_selection_is_exact_and_carries_each_slots_interval(
    trigger: dict[str, Any], rule: BusinessDateRule, span: tuple[date, date]
) -> None:
    from iotsched.core.decisions import slots_for_business_dates

    first, last = span
    definition = _definition(trigger, rule)
    zone = definition.timezone
    selected = slots_for_business_dates(definition, first, last)
    slots = [d.slot for d in selected]
    assert slots == sorted(set(slots))
    assert slots == [
        s
        for s in grid(definition, first, last)
        if first <= business_date_for(rule, s, zone) <= last
    ]
    for d in selected:
        assert d.business_date == business_date_for(rule, d.slot, zone)
        start, end = data_interval_for(rule, d.slot, zone)
        assert (d.data_interval_start, d.data_interval_end) == (start, end)
        assert d.data_interval_start.utcoffset() == timedelta(0)


def test_a_backfill_covers_at_most_366_business_dates_both_ends_counted() -> None:
    services = make(task(trigger={"cron": "0 12 * * *"}))
    leap_year = plan_backfill("t", services, start=date(2024, 1, 1), end=date(2024, 12, 31))
    assert len(leap_year.slots) == 366
    with pytest.raises(ManualRunError, match="at most 366 days"):
        plan_backfill("t", services, start=date(2024, 1, 1), end=date(2025, 1, 1))  # 367 days
