"""Manual runs, submissions and backfills on the in-memory services."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import cast

import pytest

from iotsched import bootstrap
from iotsched.adapters.memory.queues import MemoryShardQueue
from iotsched.clock import ManualClock
from iotsched.core.instance_record import (
    InstanceStatus,
    TriggerKind,
)
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.definitions.control import TaskNotFoundError
from iotsched.services.operations.on_demand import (
    ManualRunError,
    backfill_slots,
    plan_backfill,
    run_now,
    submit,
)
from iotsched.services.scheduling.tick import dispatch_tick
from iotsched.services.wiring import Wiring
from tests.support import T0, task


def make(**fields: object) -> tuple[Wiring, ManualClock]:
    clock = ManualClock(T0 + timedelta(seconds=20))
    services = bootstrap.build_memory(clock=clock)
    apply_tasks([task("t", **fields)], services.tasks, now=T0 - timedelta(days=10))
    return services, clock


def sent(services: Wiring) -> int:
    return len(cast("MemoryShardQueue", services.queue).sent)


def test_run_now_is_a_manual_instance_with_the_given_business_date_and_params() -> None:
    services, _ = make(params={"a": 1, "b": 2})
    instance, report = run_now("t", services, business_date=date(2026, 11, 1), params={"b": 3})
    assert report.claimed == [instance.instance_id]
    assert instance.instance_id == "t@2026-11-29T12:00Z"
    assert instance.trigger_kind is TriggerKind.MANUAL
    assert instance.business_date == date(2026, 11, 1)
    assert (instance.data_interval_start, instance.data_interval_end) == (
        datetime(2026, 11, 1, tzinfo=UTC),
        datetime(2026, 11, 2, tzinfo=UTC),
    )
    assert instance.params == {"a": 1, "b": 3}
    assert sent(services) == 1


def test_run_now_racing_the_schedule_collides_on_the_slot() -> None:
    services, _ = make(trigger={"rate": "1m"})
    dispatch_tick(T0, services)  # the 12:00 slot fired
    instance, report = run_now("t", services)
    assert report.claimed == [] and report.duplicate_claims == 1
    assert (
        instance.trigger_kind is TriggerKind.CATCH_UP
        or instance.trigger_kind is TriggerKind.SCHEDULED
    )
    assert sent(services) == 1


def test_the_same_request_id_creates_one_instance_even_minutes_later() -> None:
    services, clock = make()
    first, _ = run_now("t", services, request_id="req-1")
    clock.advance(timedelta(minutes=7))
    again, report = run_now("t", services, request_id="req-1")
    other, _ = run_now("t", services, request_id="req-2")
    assert again.instance_id == first.instance_id == "t@2026-11-29T12:00Z~manual-req-1"
    assert report.claimed == []
    assert other.instance_id == "t@2026-11-29T12:07Z~manual-req-2"
    assert sent(services) == 2
    with pytest.raises(TaskNotFoundError):
        run_now("nope", services)


def test_a_submission_waits_in_the_store_until_its_time_then_the_tick_fires_it() -> None:
    services, clock = make(trigger={"rate": "1d"})
    at = T0 + timedelta(hours=2)
    pending = submit("t", services, at=at, params={"x": 1}, request_id="s1")
    assert pending.status is InstanceStatus.SCHEDULED and pending.fire_at == at
    assert submit("t", services, at=at, request_id="s1").instance_id == pending.instance_id
    # (the task's own daily slot fires on its own; only the submission matters here)
    assert pending.instance_id not in dispatch_tick(T0 + timedelta(hours=1), services).claimed
    clock.set(at + timedelta(seconds=2))
    report = dispatch_tick(at, services)
    assert pending.instance_id in report.claimed
    started = services.instances.get_instance(pending.instance_id)
    assert started is not None and started.status is InstanceStatus.RUNNING
    assert started.params["x"] == 1
    assert pending.instance_id not in dispatch_tick(at, services).claimed  # fired once


def test_backfill_plans_the_slots_of_a_date_range_and_never_doubles_a_slot() -> None:
    services, _ = make(trigger={"cron": "5 0 * * *", "timezone": "Asia/Shanghai"})
    plan = plan_backfill("t", services, start=date(2026, 11, 19), end=date(2026, 11, 21))
    # business dates 11-19..11-21 (previous_day): 00:05 in Shanghai on 11-20..11-22, which
    # is 16:05 UTC the day before
    assert [d.slot for d in plan.slots] == [
        datetime(2026, 11, 19, 16, 5, tzinfo=UTC),
        datetime(2026, 11, 20, 16, 5, tzinfo=UTC),
        datetime(2026, 11, 21, 16, 5, tzinfo=UTC),
    ]
    assert plan.shards_per_instance == 1 and plan.estimated_requests["dynamodb"] > 0
    assert [what for _, what in backfill_slots(plan, services)] == ["claimed"] * 3
    assert [what for _, what in backfill_slots(plan, services)] == ["exists"] * 3
    instance = services.instances.get_instance("t@2026-11-19T16:05Z")
    assert instance is not None and instance.trigger_kind is TriggerKind.BACKFILL
    assert instance.business_date == date(2026, 11, 19)  # previous_day in Shanghai
    with pytest.raises(ManualRunError):
        plan_backfill("t", services, start=date(2026, 11, 22), end=date(2026, 11, 20))
