"""Fire instants through the tick on the in-memory services: jittered tasks claimed once at
their fire instants however the tick is repeated, excluded dates never recorded nor alerted,
max_runs counted by the clock's advance, and named calendars applied from task files."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, date, datetime, timedelta
from typing import Any, cast

import pytest

from iotsched import bootstrap
from iotsched.adapters.memory.queues import MemoryAlertSink, MemoryShardQueue
from iotsched.clock import ManualClock
from iotsched.core.fires import fire_of
from iotsched.core.instance_record import InstanceStatus, TriggerKind
from iotsched.services.definitions.apply import (
    apply_task_file,
    apply_tasks,
)
from iotsched.services.definitions.task_file import TaskFileError
from iotsched.services.execution.batch import run_shard
from iotsched.services.execution.outcomes import Delivery, ShardOutcome
from iotsched.services.operations.views import (
    task_view,
    upcoming_fires,
)
from iotsched.services.scheduling.tick import dispatch_tick
from iotsched.services.wiring import Wiring
from iotsched.tasklib import registry
from tests.support import T0, task

M = timedelta(minutes=1)
H = timedelta(hours=1)


def services_at(at: datetime) -> tuple[Wiring, ManualClock]:
    clock = ManualClock(at)
    return bootstrap.build_memory(clock=clock), clock


def tick(services: Wiring, clock: ManualClock, at: datetime) -> list[str]:
    clock.set(at + timedelta(seconds=5))
    return dispatch_tick(at, services).claimed


def test_1000_jittered_tasks_are_claimed_once_each_at_their_fire_instants() -> None:
    services, clock = services_at(T0 - 30 * M)
    tasks = [task(f"dev-{n:04d}", trigger={"cron": "0 * * * *"}, jitter_s=600) for n in range(1000)]
    apply_tasks(tasks, services.tasks, now=T0 - 30 * M)
    expected = {f"{t.id}@2026-11-29T12:00Z": fire_of(t, T0, T0 + H).fire_at for t in tasks}

    claimed_at: dict[str, list[datetime]] = {}
    for minute in range(11):
        at = T0 + minute * M
        for _ in range(2):  # every minute's tick delivered twice
            for instance_id in tick(services, clock, at):
                claimed_at.setdefault(instance_id, []).append(at)
    for minute in (0, 5, 10):  # replays after the clocks advanced
        for instance_id in tick(services, clock, T0 + minute * M):
            claimed_at.setdefault(instance_id, []).append(T0 + minute * M)

    assert claimed_at == {i: [at] for i, at in expected.items()}
    per_minute = Counter(at for [at] in claimed_at.values())
    assert len(per_minute) >= 10 and max(per_minute.values()) <= 150
    for t in tasks[:50]:
        instance = services.instances.get_instance(f"{t.id}@2026-11-29T12:00Z")
        assert instance is not None and instance.slot == T0
        stored = services.tasks.get_task(t.id)
        assert stored is not None and stored.runs == 1
        assert stored.next_fire == fire_of(t, T0 + H, T0 + 2 * H).fire_at


HOLIDAYS: dict[str, Any] = {"name": "holidays", "dates": ["2026-12-25", "2026-12-26"]}


@pytest.mark.parametrize("policy", ["skip", "catch_up", "fire_once"])
@pytest.mark.parametrize("how", ["inline", "calendar"])
def test_an_excluded_holiday_is_neither_fired_nor_recorded_nor_alerted_across_an_outage(
    policy: str, how: str
) -> None:
    applied_at = datetime(2026, 12, 24, 7, 0, tzinfo=UTC)
    services, clock = services_at(applied_at)
    exclude = {"dates": HOLIDAYS["dates"]} if how == "inline" else {"calendars": ["holidays"]}
    entry = {
        "id": "daily",
        "handler": "noop",
        "trigger": {"cron": "0 9 * * *", "timezone": "Europe/Berlin"},
        "misfire": {"policy": policy, "grace_s": 300},
        "exclude": exclude,
    }
    apply_task_file(
        {"calendars": [HOLIDAYS], "tasks": [entry]},
        handlers=registry(),
        store=lambda: services.tasks,
        now=lambda: applied_at,
    )
    assert tick(services, clock, datetime(2026, 12, 24, 8, 0, tzinfo=UTC)) == [
        "daily@2026-12-24T08:00Z"
    ]
    # Down from the 24th's firing to the 27th at noon: the 25th and 26th are holidays.
    claimed = tick(services, clock, datetime(2026, 12, 27, 12, 0, tzinfo=UTC))

    for day in (25, 26):
        assert services.instances.get_instance(f"daily@2026-12-{day}T08:00Z") is None
    missed = services.instances.get_instance("daily@2026-12-27T08:00Z")
    assert missed is not None
    if policy == "skip":
        assert (claimed, missed.status, missed.reason) == ([], InstanceStatus.SKIPPED, "misfire")
    else:
        assert claimed == ["daily@2026-12-27T08:00Z"] and missed.covers == []
    assert cast("MemoryAlertSink", services.alerts).published == []
    stored = services.tasks.get_task("daily")
    assert stored is not None and stored.next_fire == datetime(2026, 12, 28, 8, 0, tzinfo=UTC)
    view = task_view(stored)
    assert view["excluded_dates"] == {
        "2026-12-25": "exclude.dates" if how == "inline" else "calendar:holidays",
        "2026-12-26": "exclude.dates" if how == "inline" else "calendar:holidays",
    }


def test_max_runs_fires_three_slots_through_the_tick_then_never_again() -> None:
    services, clock = services_at(T0 - M)
    apply_tasks([task("thrice", trigger={"rate": "1h"}, max_runs=3)], services.tasks, now=T0 - M)
    claimed = [i for n in range(6) for i in tick(services, clock, T0 + n * H)]
    assert claimed == [f"thrice@2026-11-29T{h}:00Z" for h in (12, 13, 14)]
    stored = services.tasks.get_task("thrice")
    assert stored is not None and (stored.runs, stored.next_fire) == (3, None)
    assert task_view(stored)["stop_reason"] == "max_runs reached (3 of 3 runs fired)"
    assert upcoming_fires(stored) == []
    # Re-applied unchanged, the count stays and it stays stopped.
    apply_tasks([task("thrice", trigger={"rate": "1h"}, max_runs=3)], services.tasks, now=T0)
    again = services.tasks.get_task("thrice")
    assert again is not None and (again.runs, again.next_fire) == (3, None)


def test_end_at_stops_the_task_through_the_tick() -> None:
    services, clock = services_at(T0 - M)
    ending = task("ending", trigger={"rate": "1h"}, end_at=(T0 + H).isoformat())
    apply_tasks([ending], services.tasks, now=T0 - M)
    claimed = [i for n in range(4) for i in tick(services, clock, T0 + n * H)]
    assert claimed == ["ending@2026-11-29T12:00Z", "ending@2026-11-29T13:00Z"]
    stored = services.tasks.get_task("ending")
    assert stored is not None and stored.next_fire is None
    assert task_view(stored)["stop_reason"] == "end_at passed (no slot after 2026-11-29T13:00Z)"


def test_apply_stores_calendars_first_and_refuses_an_unknown_one() -> None:
    services, _ = services_at(T0)
    entry = {
        "id": "scan",
        "handler": "noop",
        "trigger": {"cron": "0 9 * * *"},
        "exclude": {"calendars": ["holidays"]},
    }

    def apply(data: dict[str, Any]) -> Any:
        return apply_task_file(
            data, handlers=registry(), store=lambda: services.tasks, now=lambda: T0
        )

    with pytest.raises(TaskFileError) as refused:
        apply({"tasks": [entry]})
    assert refused.value.problems == [
        "task 'scan': exclude.calendars: unknown calendar 'holidays' (known: none)"
    ]
    assert services.tasks.list_tasks() == [] and services.tasks.list_calendars() == []

    first = apply({"calendars": [HOLIDAYS], "tasks": [entry]})
    assert (first.created, first.calendars) == (["scan"], ["holidays"])
    stored = services.tasks.get_task("scan")
    assert stored is not None
    assert stored.calendars == {"holidays": [date(2026, 12, 25), date(2026, 12, 26)]}

    # A later file names the stored calendar; another changes it: the task's dates follow.
    other = {**entry, "id": "report"}
    assert apply({"tasks": [other]}).created == ["report"]
    changed = apply({"calendars": [{**HOLIDAYS, "dates": ["2026-12-31"]}]})
    assert changed.calendars == ["holidays"]
    for task_id in ("scan", "report"):
        again = services.tasks.get_task(task_id)
        assert again is not None and again.calendars == {"holidays": [date(2026, 12, 31)]}
    assert apply({"calendars": [{**HOLIDAYS, "dates": ["2026-12-31"]}]}).calendars == []
    [listed] = services.tasks.list_calendars()
    assert listed.dates == [date(2026, 12, 31)]


def test_a_task_applied_while_its_window_is_closed_owes_the_slots_after_the_apply() -> None:
    applied_at = T0 + timedelta(seconds=30)  # 12:00:30, after the 12:00 slot
    services, clock = services_at(applied_at)
    waiting = task(
        "waiting",
        trigger={"cron": "0 * * * *"},
        window={"cron": "0 22 * * *", "duration": "1h"},
        misfire={"policy": "skip"},
    )
    apply_tasks([waiting], services.tasks, now=applied_at)
    stored = services.tasks.get_task("waiting")
    assert stored is not None and stored.next_fire == T0 + 10 * H
    assert [tick(services, clock, T0 + n * H) for n in range(1, 10)] == [[]] * 9

    claimed = tick(services, clock, T0 + 10 * H)

    # Every slot from 13:00 to 22:00 waited for the 22:00 opening; 12:00 predates the apply.
    assert claimed == [f"waiting@2026-11-29T{h}:00Z" for h in range(13, 23)]
    # The window closes at 23:00: the 23:00 slot waits for the next evening's opening.
    assert tick(services, clock, T0 + 11 * H) == []
    stored = services.tasks.get_task("waiting")
    assert stored is not None and stored.next_fire == T0 + 34 * H


def test_an_outage_of_24_hourly_slots_under_each_misfire_policy() -> None:
    start = datetime(2026, 2, 1, 0, 0, tzinfo=UTC)
    services, clock = services_at(start - 30 * M)
    base: dict[str, Any] = {"handler": "noop", "trigger": {"rate": "1h"}, "timeout_s": 2}
    apply_tasks(
        [
            task("m-skip", **base, misfire={"policy": "skip", "grace_s": 300}),
            task("m-once", **base, misfire={"policy": "fire_once", "grace_s": 300}),
            task(
                "m-catch",
                **base,
                misfire={"policy": "catch_up", "max_catch_up": 5, "grace_s": 300},
            ),
        ],
        services.tasks,
        now=start - 30 * M,
    )
    for _ in range(2):
        tick(services, clock, start)
    sink = cast("MemoryAlertSink", services.alerts)
    sink.published.clear()
    # the dispatcher was down for 24 slots and comes back at 2026-02-02T00:00:20Z, the tick
    # delivered twice, then the next minute's
    back = start + 24 * H
    for _ in range(2):
        clock.set(back + 20 * timedelta(seconds=1))
        dispatch_tick(back + 20 * timedelta(seconds=1), services)
    clock.set(back + M + 20 * timedelta(seconds=1))
    dispatch_tick(back + M + 20 * timedelta(seconds=1), services)
    queue = cast("MemoryShardQueue", services.queue)
    while queue.sent:
        message = queue.sent.pop(0)
        delivery = Delivery(body=message.model_dump_json(), receipt_handle="rh")
        assert run_shard(delivery, services, worker="w") is ShardOutcome.SUCCEEDED

    def instances(task_id: str) -> list[Any]:
        return [i for i in services.instances.list_instances(task_id=task_id) if i.slot > start]

    # skip: 23 missed slots recorded skipped (reason misfire); the on-time slot ran
    skip = instances("m-skip")
    assert Counter(i.status for i in skip) == {
        InstanceStatus.SKIPPED: 23,
        InstanceStatus.SUCCEEDED: 1,
    }
    assert {i.reason for i in skip if i.status is InstanceStatus.SKIPPED} == {"misfire"}
    assert [i.slot for i in skip if i.status is InstanceStatus.SUCCEEDED] == [back]
    # fire_once: one instance for the latest slot, covering the 23 others
    (once,) = instances("m-once")
    assert (once.slot, once.status, once.covers_count) == (back, InstanceStatus.SUCCEEDED, 23)
    # catch_up (max 5): the 5 oldest missed slots ran, 18 were recorded skipped, the latest ran
    catch = sorted(instances("m-catch"), key=lambda i: i.slot)
    ran = [i for i in catch if i.status is InstanceStatus.SUCCEEDED]
    assert [i.slot for i in ran] == [start + n * H for n in (1, 2, 3, 4, 5)] + [back]
    assert [i.trigger_kind for i in ran[:5]] == [TriggerKind.CATCH_UP] * 5
    dropped = [i for i in catch if i.status is InstanceStatus.SKIPPED]
    assert len(dropped) == 18 and {i.reason for i in dropped} == {"catch_up_limit"}
    # with one alert for the dropped catch-ups, though the tick came twice
    alerts = [a for a in sink.published if a.type == "catch_up_dropped"]
    assert len(alerts) == 1 and alerts[0].task_id == "m-catch"
    assert alerts[0].reason.startswith("18 missed slot(s)")
