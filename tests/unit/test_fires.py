"""Fire instants (iotsched.core.fires) and the firing plan over them: jitter, maintenance
windows for firings, excluded dates, max_runs and end_at."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from hypothesis import given, settings
from hypothesis import strategies as st

from iotsched.core.decisions import first_fire_after, plan_firing
from iotsched.core.fires import (
    INLINE_EXCLUSION,
    ceil_minute,
    exclusions,
    fire_of,
    fires_after,
    jitter_offset,
    next_fire_after,
    start_clock,
)
from iotsched.core.instance_record import InstanceStatus
from iotsched.core.task_definition import TaskDefinition
from iotsched.core.task_fleet_safety import Window
from iotsched.core.windows import is_open
from tests.support import T0, task

M = timedelta(minutes=1)
H = timedelta(hours=1)
BERLIN = ZoneInfo("Europe/Berlin")


def hourly(task_id: str = "t", **fields: Any) -> TaskDefinition:
    return task(task_id, trigger={"cron": "0 * * * *"}, **fields)


def test_a_task_without_fleet_fields_fires_on_its_slots() -> None:
    plain = hourly()
    fires = [f for _, f in zip(range(3), fires_after(plain, T0 - M), strict=False)]
    assert [(f.slot, f.fire_at, f.offset_s) for f in fires] == [
        (T0, T0, 0),
        (T0 + H, T0 + H, 0),
        (T0 + 2 * H, T0 + 2 * H, 0),
    ]


def test_jitter_is_a_stable_hash_of_task_and_slot() -> None:
    assert jitter_offset("a", T0, 600) == jitter_offset("a", T0, 600)
    offsets = {jitter_offset(f"task-{n}", T0, 600) for n in range(200)}
    assert len(offsets) > 100 and min(offsets) >= 0 and max(offsets) <= 600
    assert jitter_offset("a", T0, 0) == 0


def test_jitter_over_1000_tasks_spreads_their_fire_instants() -> None:
    fires = [fire_of(hourly(f"dev-{n:04d}", jitter_s=600), T0, T0 + H) for n in range(1000)]
    minutes = Counter(f.fire_at for f in fires)
    assert all(f.slot == T0 for f in fires)  # the slot (and so the instance id) stays
    assert all(T0 <= f.fire_at <= T0 + 10 * M for f in fires)
    assert all(f.fire_at == ceil_minute(T0 + timedelta(seconds=f.offset_s)) for f in fires)
    assert len(minutes) >= 10
    assert max(minutes.values()) <= 150  # no minute holds more than 15 % of them


def test_jitter_never_moves_a_slot_past_the_next_one() -> None:
    every_5 = task("t", trigger={"rate": "5m"}, jitter_s=3600)
    fires = [f for _, f in zip(range(500), fires_after(every_5, T0 - M), strict=False)]
    assert all(f.offset_s <= 240 for f in fires)
    instants = [f.fire_at for f in fires]
    assert instants == sorted(instants) and len(set(instants)) == len(instants)


def test_jittered_slots_are_due_at_their_fire_instant_and_keep_their_slot() -> None:
    jittered = hourly("j", jitter_s=1800)
    first = fire_of(jittered, T0, T0 + H)
    assert first.offset_s > 60  # this task and slot: a fire instant some minutes late
    before = plan_firing(jittered, next_fire=first.fire_at, last_slot=None, now=first.fire_at - M)
    at = plan_firing(jittered, next_fire=first.fire_at, last_slot=None, now=first.fire_at)
    assert before.firings == []
    assert [f.slot for f in at.firings] == [T0]
    assert at.next_fire == fire_of(jittered, T0 + H, T0 + 2 * H).fire_at


def test_misfire_grace_counts_from_the_fire_instant() -> None:
    late = hourly("j", jitter_s=1800, misfire={"policy": "skip", "grace_s": 60})
    fire = fire_of(late, T0, T0 + H)
    on_time = plan_firing(late, next_fire=fire.fire_at, last_slot=T0 - H, now=fire.fire_at + M)
    missed = plan_firing(late, next_fire=fire.fire_at, last_slot=T0 - H, now=fire.fire_at + 2 * M)
    assert [f.status for f in on_time.firings] == [InstanceStatus.PLANNING]
    assert [(f.status, f.reason) for f in missed.firings] == [(InstanceStatus.SKIPPED, "misfire")]


NIGHT_WINDOW = {"cron": "0 2 * * *", "duration": "2h", "timezone": "Europe/Berlin"}


def fired_over(definition: TaskDefinition, start: datetime, end: datetime) -> list[Any]:
    """Tick every minute of [start, end) as a dispatcher would (the plan's clock carried from
    tick to tick, the slot before `start` already fired): every firing with its minute."""
    last_slot: datetime | None = start - H
    next_fire = first_fire_after(definition, start - H)
    made = []
    at = start
    while at < end:
        if next_fire is not None and next_fire <= at:
            plan = plan_firing(definition, next_fire=next_fire, last_slot=last_slot, now=at)
            made += [(at, f) for f in plan.firings]
            next_fire, last_slot = plan.next_fire, plan.last_slot or last_slot
        at += M
    return made


def test_a_night_window_holds_an_hourly_task_across_both_dst_nights_of_2026() -> None:
    night = hourly("n", window=NIGHT_WINDOW)
    window = Window.model_validate(NIGHT_WINDOW)
    spring = fired_over(
        night, datetime(2026, 3, 28, 6, 0, tzinfo=UTC), datetime(2026, 3, 29, 6, 0, tzinfo=UTC)
    )
    autumn = fired_over(
        night, datetime(2026, 10, 24, 6, 0, tzinfo=UTC), datetime(2026, 10, 25, 6, 0, tzinfo=UTC)
    )
    for made in (spring, autumn):
        assert all(is_open(window, at) for at, _ in made)
        assert all(f.status is InstanceStatus.PLANNING for _, f in made)
    # 02:00 does not exist on 29 March: the window is 03:00-05:00 CEST (01:00Z-03:00Z).
    assert [(at, f.slot) for at, f in spring] == [
        (datetime(2026, 3, 29, 1, 0, tzinfo=UTC), datetime(2026, 3, 29, 1, 0, tzinfo=UTC)),
        (datetime(2026, 3, 29, 2, 0, tzinfo=UTC), datetime(2026, 3, 29, 2, 0, tzinfo=UTC)),
    ]
    # 02:00 happens twice on 25 October: open from 02:00 CEST for 2 h (00:00Z-02:00Z).
    assert [(at, f.slot) for at, f in autumn] == [
        (datetime(2026, 10, 25, 0, 0, tzinfo=UTC), datetime(2026, 10, 25, 0, 0, tzinfo=UTC)),
        (datetime(2026, 10, 25, 1, 0, tzinfo=UTC), datetime(2026, 10, 25, 1, 0, tzinfo=UTC)),
    ]
    # The slots that waited for the window are covered by its first firing (fire_once).
    assert len(spring[0][1].covers) == 19 and len(autumn[0][1].covers) == 18
    assert [
        f.window_wait for f in [fire_of(night, datetime(2026, 3, 28, 12, 0, tzinfo=UTC), None)]
    ] == [timedelta(hours=13)]


def test_an_excluded_date_is_neither_fired_nor_recorded_and_the_clock_moves_past_it() -> None:
    daily = task(
        "d",
        trigger={"cron": "0 9 * * *", "timezone": "Europe/Berlin"},
        exclude={"dates": ["2026-12-25"], "calendars": ["holidays"]},
        misfire={"policy": "skip"},
    )
    calendars = {"holidays": [date(2026, 12, 26)]}
    on_24 = datetime(2026, 12, 24, 8, 0, tzinfo=UTC)
    excluded = [
        f
        for _, f in zip(
            range(3), fires_after(daily, on_24, {date(2026, 12, 25): "x"}), strict=False
        )
    ]
    assert excluded[0].excluded_by == "x"
    assert next_fire_after(daily, on_24, calendars=calendars) == datetime(
        2026, 12, 27, 8, 0, tzinfo=UTC
    )
    # An outage over both excluded days: the 27th is missed and recorded skipped, nothing else.
    plan = plan_firing(
        daily,
        next_fire=datetime(2026, 12, 25, 8, 0, tzinfo=UTC),
        last_slot=on_24,
        now=datetime(2026, 12, 27, 12, 0, tzinfo=UTC),
        calendars=calendars,
    )
    assert [(f.slot.date(), f.status, f.reason) for f in plan.firings] == [
        (date(2026, 12, 27), InstanceStatus.SKIPPED, "misfire")
    ]
    assert plan.next_fire == datetime(2026, 12, 28, 8, 0, tzinfo=UTC)
    # On time on an excluded day: nothing at all, and the clock moves to the next day fired.
    quiet = plan_firing(
        daily,
        next_fire=datetime(2026, 12, 25, 8, 0, tzinfo=UTC),
        last_slot=on_24,
        now=datetime(2026, 12, 25, 8, 0, tzinfo=UTC),
        calendars=calendars,
    )
    assert quiet.firings == [] and quiet.runs == 0
    assert quiet.next_fire == datetime(2026, 12, 27, 8, 0, tzinfo=UTC)
    assert INLINE_EXCLUSION == "exclude.dates"


def test_max_runs_fires_exactly_that_many_slots_then_never_again() -> None:
    limited = task("m", trigger={"rate": "1h"}, max_runs=3, misfire={"policy": "catch_up"})
    runs, next_fire, last_slot, fired = 0, T0, None, []
    for n in range(8):
        plan = plan_firing(
            limited, next_fire=next_fire, last_slot=last_slot, now=T0 + n * H, runs=runs
        )
        fired += [f.slot for f in plan.firings]
        runs, next_fire, last_slot = runs + plan.runs, plan.next_fire, plan.last_slot
    assert fired == [T0, T0 + H, T0 + 2 * H] and runs == 3 and next_fire is None
    # A catch-up after an outage stops at the limit too.
    outage = plan_firing(limited, next_fire=T0, last_slot=None, now=T0 + 5 * H, runs=1)
    assert [f.slot for f in outage.firings] == [T0, T0 + H]
    assert outage.next_fire is None and outage.runs == 2


def test_end_at_fires_no_slot_after_it() -> None:
    ending = task("e", trigger={"rate": "1h"}, end_at=(T0 + 2 * H).isoformat())
    next_fire, last_slot, fired = T0, None, []
    for n in range(6):
        plan = plan_firing(ending, next_fire=next_fire, last_slot=last_slot, now=T0 + n * H)
        fired += [f.slot for f in plan.firings]
        next_fire, last_slot = plan.next_fire, plan.last_slot
    assert fired == [T0, T0 + H, T0 + 2 * H] and next_fire is None
    assert first_fire_after(ending, T0 + 3 * H) is None


WINDOWS = [
    None,
    {"cron": "0 2 * * *", "duration": "2h", "timezone": "Europe/Berlin"},
    {"cron": "*/30 * * * *", "duration": "10m"},
    {"cron": "0 22 * * 1-5", "duration": "3h", "timezone": "America/New_York"},
]
TRIGGERS = [
    {"rate": "1m"},
    {"rate": "7m"},
    {"rate": "1h"},
    {"cron": "0 9 * * *", "timezone": "Europe/Berlin"},
    {"cron": "*/20 * * * *", "timezone": "Europe/Berlin"},
]


@settings(max_examples=60, deadline=None)
@given(
    trigger=st.sampled_from(TRIGGERS),
    jitter=st.sampled_from([0, 30, 600, 5400]),
    window=st.sampled_from(WINDOWS),
    policy=st.sampled_from(["skip", "fire_once", "catch_up"]),
    excluded=st.sets(st.integers(0, 6), max_size=3),
    gaps=st.lists(st.integers(1, 600), min_size=1, max_size=25),
)
def test_the_plan_never_fires_a_slot_twice_nor_an_excluded_one_nor_outside_the_window(
    trigger: dict[str, Any],
    jitter: int,
    window: dict[str, Any] | None,
    policy: str,
    excluded: set[int],
    gaps: list[int],
) -> None:
    start = datetime(2026, 3, 27, 22, 0, tzinfo=UTC)
    days = [date(2026, 3, 28) + timedelta(days=d) for d in sorted(excluded)]
    definition = task(
        "p",
        trigger=trigger,
        jitter_s=jitter,
        window=window,
        misfire={"policy": policy, "max_catch_up": 500},
        exclude={"dates": [d.isoformat() for d in days]},
    )
    zone = ZoneInfo(definition.timezone)
    next_fire, last_slot = start_clock(definition, start)  # as applying it at `start` does
    fired: list[datetime] = []
    now = start
    for gap in gaps:
        now += gap * M
        if next_fire is None or next_fire > now:
            continue
        plan = plan_firing(definition, next_fire=next_fire, last_slot=last_slot, now=now)
        for f in plan.firings:
            for slot in (f.slot, *f.covers):
                assert slot.astimezone(zone).date() not in days
            if f.status is InstanceStatus.PLANNING:
                fired.append(f.slot)
                following = next(iter(definition.trigger.slots_after(f.slot)), None)
                dates = dict.fromkeys(days, INLINE_EXCLUSION)
                instant = fire_of(definition, f.slot, following, dates).fire_at
                assert instant <= now  # never before its fire instant
                if definition.window is not None:
                    assert is_open(definition.window, instant)
                    # A slot waiting for its window never fires on an excluded date either.
                    assert instant.astimezone(zone).date() not in days
        assert plan.next_fire is None or plan.next_fire > now
        next_fire, last_slot = plan.next_fire, plan.last_slot or last_slot
    assert len(fired) == len(set(fired))
    assert fired == sorted(fired)
    assert all(slot > start for slot in fired)


def test_a_slot_waiting_for_its_window_passes_over_openings_on_excluded_dates() -> None:
    night = task(
        "night",
        trigger={"cron": "0 * * * *", "timezone": "Europe/Berlin"},
        window={"cron": "0 2 * * *", "duration": "2h", "timezone": "Europe/Berlin"},
        exclude={"dates": ["2026-12-24", "2026-12-25", "2026-12-26"]},
    )
    # 2026-12-23 05:00 CET waits for a window; the openings of the 24th to the 26th are on
    # excluded dates: it fires at the opening of the 27th, 02:00 CET.
    slot = datetime(2026, 12, 23, 4, 0, tzinfo=UTC)
    fires = [
        f for _, f in zip(range(1), fires_after(night, slot - M, exclusions(night)), strict=False)
    ]
    assert fires[0].slot == slot
    assert fires[0].fire_at == datetime(2026, 12, 27, 1, 0, tzinfo=UTC)
