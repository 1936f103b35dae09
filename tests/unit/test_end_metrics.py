"""Each end of an instance is counted once, by the write that ended it (`services.ends`): the
functions' InstancesSucceeded/Failed/Aborted, whatever the path and however many callers race
to finalize."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, cast

import pytest

from iotsched import bootstrap
from iotsched.adapters.memory.queues import MemoryShardQueue
from iotsched.clock import ManualClock
from iotsched.core.instance_record import InstanceStatus
from iotsched.core.shard_message import ShardMessage
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.end_tally import EndTally
from iotsched.services.execution.batch import run_shard
from iotsched.services.execution.completion import finalize
from iotsched.services.execution.outcomes import (
    Delivery,
    ShardOutcome,
)
from iotsched.services.execution.sweep import sweep
from iotsched.services.operations.actions import (
    InstanceConflictError,
    cancel_instance,
)
from iotsched.services.scheduling.tick import dispatch_tick
from iotsched.services.wiring import Wiring
from tests.support import T0, task

S = timedelta(seconds=1)


def fire(clock: ManualClock, shards: int, **fields: Any) -> tuple[Wiring, list[ShardMessage]]:
    """Task `t` (`noop`, `shards` static shards, one attempt each) fired at T0."""
    services = bootstrap.build_memory(clock=clock)
    definition = task(
        "t",
        trigger={"rate": "1h"},
        sharding={"strategy": "static", "shards": [{"n": i} for i in range(shards)]},
        retry={"max_attempts": 1},
        **fields,
    )
    apply_tasks([definition], services.tasks, now=T0 - 3600 * S)
    clock.set(T0 + 3 * S)
    dispatch_tick(clock.now(), services)
    return services, list(cast("MemoryShardQueue", services.queue).sent)


def deliver(services: Wiring, message: ShardMessage, worker: str = "w1") -> ShardOutcome:
    return run_shard(Delivery(message.model_dump_json(), f"rh-{worker}"), services, worker=worker)


def test_the_last_shard_counts_the_end_once_however_many_finalize(clock: ManualClock) -> None:
    services, (first, second) = fire(clock, 2)
    assert services.ends.drain() == {}  # firing ends nothing

    assert deliver(services, first) is ShardOutcome.SUCCEEDED
    assert services.ends.drain() == {}  # a shard's end is not its instance's
    assert deliver(services, second) is ShardOutcome.SUCCEEDED
    assert services.ends.drain() == {"InstancesSucceeded": 1}

    # a racing worker's finalize, a duplicate delivery, the sweeper: the end is written already
    assert finalize(first.instance_id, services) is None
    assert deliver(services, second, worker="w2") is ShardOutcome.NOT_STARTED
    clock.advance(3600 * S)
    sweep(services)
    assert services.ends.drain() == {}


def test_a_failed_shard_ends_the_instance_failed_once(clock: ManualClock) -> None:
    services, messages = fire(clock, 3, params={"fail": [1]})
    outcomes = [deliver(services, m) for m in messages]
    assert outcomes == [ShardOutcome.SUCCEEDED, ShardOutcome.FAILED, ShardOutcome.SUCCEEDED]
    assert services.ends.drain() == {"InstancesFailed": 1}


def test_an_abort_is_counted_as_such_and_a_cancel_not_at_all(clock: ManualClock) -> None:
    services, messages = fire(
        clock, 4, params={"fail": [0]}, abort={"failure_percent": 50, "min_executed": 1}
    )
    assert deliver(services, messages[0]) is ShardOutcome.FAILED  # 1 of 1 ended failed
    found = services.instances.get_instance(messages[0].instance_id)
    assert found is not None and found.status is InstanceStatus.ABORTED
    assert services.ends.drain() == {"InstancesAborted": 1}

    other, _ = fire(clock, 2)
    (message, _) = cast("MemoryShardQueue", other.queue).sent
    assert cancel_instance(message.instance_id, other).status is InstanceStatus.CANCELLED
    with pytest.raises(InstanceConflictError):  # again: ended already, nothing written
        cancel_instance(message.instance_id, other)
    assert other.ends.drain() == {}  # the operator's (API, CLI): no metric would see them all


def test_a_timeout_is_the_sweeper_s_own_metric_not_one_of_these(clock: ManualClock) -> None:
    services, _messages = fire(clock, 1, timeout_s=60, instance_timeout_s=120)
    clock.advance(3600 * S)
    report = sweep(services)
    assert len(report.timed_out_instances) == 1  # InstancesTimedOut
    assert services.ends.drain() == {}


def test_the_tally_starts_again_from_zero_at_each_drain() -> None:
    tally = EndTally()
    for status in (
        InstanceStatus.SUCCEEDED,
        InstanceStatus.SUCCEEDED,
        InstanceStatus.FAILED,
        InstanceStatus.SKIPPED,  # InstancesSkipped, the dispatcher's own
    ):
        tally.record(status)
    assert tally.drain() == {"InstancesSucceeded": 2, "InstancesFailed": 1}
    assert tally.drain() == {}
