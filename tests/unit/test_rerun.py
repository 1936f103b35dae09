"""Reruns with stored bounds: whole instance, one shard, the failed shards; history kept."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from datetime import date, timedelta
from typing import Any, cast

import pytest

from iotsched import bootstrap
from iotsched.adapters.memory.queues import MemoryShardQueue
from iotsched.clock import ManualClock
from iotsched.context import ShardContext
from iotsched.core.instance_record import (
    InstanceStatus,
    TriggerKind,
)
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.execution.batch import run_shard
from iotsched.services.execution.outcomes import (
    Delivery,
    RetryShardError,
)
from iotsched.services.operations.actions import (
    InstanceConflictError,
    NothingToRerunError,
    rerun_instance,
)
from iotsched.services.operations.views import shard_views
from iotsched.services.scheduling.tick import dispatch_tick
from iotsched.services.wiring import Wiring
from iotsched.tasklib import registry
from tests.support import T0, task

TUESDAY = T0 - timedelta(days=5)  # 2026-11-24T12:00Z, a Tuesday


class Seen:
    """A shard handler recording the bounds and business date it ran with."""

    def __init__(self) -> None:
        self.runs: list[tuple[int, dict[str, Any], date]] = []
        self.fail: set[int] = set()

    def __call__(self, ctx: ShardContext) -> Mapping[str, Any]:
        self.runs.append((ctx.shard, dict(ctx.bounds), ctx.business_date))
        if ctx.shard in self.fail:
            raise RuntimeError("boom")
        return {"n": ctx.bounds["end"] - ctx.bounds["start"]}


def total(ctx: ShardContext) -> Mapping[str, Any]:
    return {"n": sum(p["result"]["n"] for p in ctx.partials()), "shards": len(ctx.partials())}


def work_off(services: Wiring) -> None:
    queue = cast("MemoryShardQueue", services.queue)
    while queue.sent:
        message = queue.sent.pop(0)
        with contextlib.suppress(RetryShardError):
            run_shard(
                Delivery(body=message.model_dump_json(), receipt_handle="rh"), services, worker="w"
            )


def setup() -> tuple[Wiring, Seen, ManualClock, str]:
    clock = ManualClock(TUESDAY + timedelta(seconds=5))
    seen = Seen()
    services = bootstrap.build_memory(
        clock=clock, handlers={**registry(), "seen": seen, "total": total}
    )
    definition = task(
        "scan",
        handler="seen",
        reduce="total",
        trigger={"cron": "0 12 * * *"},
        sharding={"strategy": "id_range", "shards": 8, "id_max": 8000},
        retry={"max_attempts": 1},
    )
    apply_tasks([definition], services.tasks, now=TUESDAY - timedelta(hours=1))
    seen.fail = {3}
    (instance_id,) = dispatch_tick(TUESDAY, services).claimed
    work_off(services)
    return services, seen, clock, instance_id


def test_a_rerun_of_shard_3_uses_tuesdays_stored_bounds_after_the_fleet_grew() -> None:
    services, seen, clock, tuesday = setup()
    first = services.instances.get_instance(tuesday)
    assert first is not None and first.status is InstanceStatus.FAILED
    tuesday_bounds = first.plan.bounds(3)
    # the fleet grew by 1,000 devices since: the task now spans more ids in more shards
    grown = task(
        "scan",
        handler="seen",
        reduce="total",
        trigger={"cron": "0 12 * * *"},
        sharding={"strategy": "id_range", "shards": 9, "id_max": 9000},
    )
    apply_tasks([grown], services.tasks, now=clock.now())
    clock.set(T0)
    seen.fail = set()
    seen.runs.clear()
    second = rerun_instance(tuesday, services, shard=3)
    assert (second.instance_id, second.run, second.trigger_kind) == (
        f"{tuesday}~run2",
        2,
        TriggerKind.RERUN,
    )
    work_off(services)
    assert seen.runs == [(3, tuesday_bounds, first.business_date)]  # Tuesday's, not today's
    done = services.instances.get_instance(second.instance_id)
    assert done is not None and done.status is InstanceStatus.SUCCEEDED
    # the reduce ran again over every shard: run 1's seven and run 2's shard 3
    (reduce_record,) = [
        s for s in services.instances.list_shards(second.instance_id) if s.index == 8
    ]
    assert reduce_record.result == {"n": 8000, "shards": 8}
    # the history is kept: run 1 is still failed, untouched
    assert services.instances.get_instance(tuesday) == first
    views = shard_views(done, services.instances.list_shards(done.instance_id))
    assert [v["status"] for v in views[:8]] == ["not_rerun"] * 3 + ["succeeded"] + ["not_rerun"] * 4


def test_rerun_failed_picks_what_did_not_succeed_and_refuses_when_nothing_did() -> None:
    services, seen, _, tuesday = setup()
    seen.fail = set()
    second = rerun_instance(tuesday, services, failed_only=True)
    assert second.only == [3]
    with pytest.raises(InstanceConflictError):  # run 2 has not ended yet
        rerun_instance(tuesday, services)
    work_off(services)
    with pytest.raises(NothingToRerunError):
        rerun_instance(second.instance_id, services, failed_only=True)
    with pytest.raises(NothingToRerunError):
        rerun_instance(tuesday, services, shard=99)
    third = rerun_instance(second.instance_id, services)  # a whole rerun, numbered after run 2
    assert (third.instance_id, third.run, third.only) == (f"{tuesday}~run3", 3, None)
    work_off(services)
    done = services.instances.get_instance(third.instance_id)
    assert done is not None and done.status is InstanceStatus.SUCCEEDED
