"""The functions' invocations without a Lambda event: what the worker settles, commits and
counts (`worker_invocation`), what the bucket dispatcher answers and counts
(`dispatcher_invocation`), and the sweeper's and the DLQ function's counts."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from iotsched import bootstrap
from iotsched.adapters.memory.queues import MemoryDispatchQueue, MemoryShardQueue
from iotsched.adapters.sqs import tick_body
from iotsched.clock import ManualClock
from iotsched.context import ShardContext
from iotsched.core.buckets import DEFAULT_BUCKETS, bucket_of
from iotsched.core.instance_record import InstanceRecord
from iotsched.ports.messaging import BucketTick
from iotsched.ports.shards import CompletionVerdict
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.execution.batch import ShardBatch
from iotsched.services.execution.dead_letter_invocation import take_dead_letter, trace_of
from iotsched.services.execution.outcomes import (
    Delivery,
    RetryShardError,
    ShardOutcome,
    ShardReport,
)
from iotsched.services.execution.sweeper_invocation import run_sweeper
from iotsched.services.execution.worker_invocation import (
    Metric,
    WorkerInvocation,
    shard_metrics,
)
from iotsched.services.operations.on_demand import run_now
from iotsched.services.scheduling.dispatcher_invocation import (
    RETRY_S,
    DispatchMessage,
    dispatch_messages,
    send_tick,
    tick_of,
)
from iotsched.services.wiring import Wiring
from tests.support import T0, task

STEP = timedelta(milliseconds=1500)
BUCKET_COUNTS = {
    "InstancesFired",
    "DuplicateClaimsRejected",
    "InstancesSkipped",
    "InstancesQueued",
    "InstancesResumed",
    "InstancesFailedToStart",
    "ShardMessagesSent",
    "DueTasks",
    "BucketsDispatched",
    "BucketTicksAbsorbed",
    "BucketTicksWaiting",
}


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
def services(clock: ManualClock) -> Wiring:
    def step(ctx: ShardContext) -> None:
        """Takes 1.5 s of the manual clock; shard 2 always fails."""
        clock.advance(STEP)
        if ctx.shard == 2:
            raise RuntimeError("shard 2 fails")

    return bootstrap.build_memory(clock=clock, handlers={"step": step})


def fire_scan(services: Wiring, **fields: Any) -> tuple[InstanceRecord, dict[str, Delivery]]:
    """`scan` (3 id-range shards of `step`) run now: its instance and its deliveries by
    message id (`m-<shard>`)."""
    definition = task(
        "scan",
        handler="step",
        sharding={"strategy": "id_range", "shards": 3, "key_space": "device_id", "id_max": 30},
        timeout_s=60,
        **fields,
    )
    apply_tasks([definition], services.tasks, now=T0)
    instance, _ = run_now("scan", services)
    queue = services.queue
    assert isinstance(queue, MemoryShardQueue)
    deliveries = {
        f"m-{m.shard}": Delivery(m.model_dump_json(), f"rh-{m.shard}") for m in queue.sent
    }
    return instance, deliveries


def invocation(services: Wiring, published: list[Metric]) -> WorkerInvocation:
    # the timer never fires by itself: the batch commits when `settle` asks
    batch = ShardBatch(services, worker="w-1", timer=lambda delay, fn: _NeverFires())
    return WorkerInvocation(batch, ends=services.ends, publish=published.append)


class _NeverFires:
    def cancel(self) -> None:
        """Nothing to call off."""


def names(published: list[Metric]) -> list[str]:
    return sorted(m.name for m in published)


# -- the worker --------------------------------------------------------------------------------


def test_a_report_comes_to_its_outcome_flags_and_duration() -> None:
    timed_out = ShardReport(outcome=ShardOutcome.TIMED_OUT, duration_ms=1500)
    assert shard_metrics(timed_out) == [
        Metric("ShardsFailed", 1),
        Metric("ShardsTimedOut", 1),
        Metric("ShardDuration", 1500, "Milliseconds"),
    ]
    retried = ShardReport(retried=True, taken_over=True)
    assert shard_metrics(retried) == [Metric("ShardsRetried", 1), Metric("ShardsTakenOver", 1)]
    # given back: counted once, whether a copy was sent (the outcome) or it was made visible
    sent_back = ShardReport(outcome=ShardOutcome.GIVEN_BACK, given_back=True)
    made_visible = ShardReport(given_back=True)
    assert shard_metrics(sent_back) == shard_metrics(made_visible) == [Metric("ShardsGivenBack", 1)]
    assert shard_metrics(ShardReport()) == []  # malformed: nothing to count


def test_finished_shards_wait_for_settle_and_one_not_written_comes_back(
    services: Wiring, monkeypatch: pytest.MonkeyPatch
) -> None:
    instance, deliveries = fire_scan(services)
    store = services.instances
    commits: list[list[int]] = []
    original = store.complete_shards

    def complete_shards(completions: Any) -> list[CompletionVerdict]:
        commits.append([c.index for c in completions])
        verdicts = original([c for c in completions if c.index != 1])
        return [
            CompletionVerdict.UNWRITTEN if c.index == 1 else verdicts.pop(0) for c in completions
        ]

    monkeypatch.setattr(store, "complete_shards", complete_shards)
    published: list[Metric] = []
    run = invocation(services, published)
    run.begin([deliveries["m-0"], deliveries["m-1"]])

    assert run.run("m-0", deliveries["m-0"]) == "pending"
    assert run.run("m-1", deliveries["m-1"]) == "pending"
    assert commits == [] and published == []  # nothing written nor counted before settle

    assert run.settle([]) == ["m-1"]
    assert commits == [[0, 1]]  # one commit for the batch
    assert names(published) == ["ShardDuration", "ShardDuration", "ShardsSucceeded"]
    run.end()
    assert names(published) == ["ShardDuration", "ShardDuration", "ShardsSucceeded"]
    found = store.get_instance(instance.instance_id)
    assert found is not None and found.remaining == 2


def test_a_record_that_raised_is_counted_and_stays_a_failure(services: Wiring) -> None:
    _, deliveries = fire_scan(services, retry={"max_attempts": 2, "backoff_s": 0})
    published: list[Metric] = []
    run = invocation(services, published)
    run.begin([deliveries["m-2"]])

    with pytest.raises(RetryShardError):  # attempts left: the message comes back
        run.run("m-2", deliveries["m-2"])

    assert names(published) == ["ShardDuration", "ShardsRetried"]
    assert run.settle(["m-2"]) == ["m-2"]


def test_the_end_publishes_the_instances_the_invocation_ended(services: Wiring) -> None:
    _, deliveries = fire_scan(services, retry={"max_attempts": 1})
    published: list[Metric] = []
    first = invocation(services, published)
    first.begin([deliveries["m-0"], deliveries["m-1"]])
    for message_id in ("m-0", "m-1"):
        first.run(message_id, deliveries[message_id])
    assert first.settle([]) == []
    first.end()
    # shard 2 has not run: the instance goes on
    assert names(published) == [
        "ShardDuration",
        "ShardDuration",
        "ShardsSucceeded",
        "ShardsSucceeded",
    ]

    published.clear()
    last = invocation(services, published)
    last.begin([deliveries["m-2"]])
    assert last.run("m-2", deliveries["m-2"]) == "pending"  # its last attempt failed
    assert last.settle([]) == []
    last.end()
    assert published == [
        Metric("ShardsFailed", 1),
        Metric("ShardDuration", 1500, "Milliseconds"),
        Metric("InstancesFailed", 1),  # its completion ended the instance: counted once
    ]


def test_a_record_whose_hold_lapsed_is_left_to_the_queue(
    services: Wiring, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, deliveries = fire_scan(services)
    run = invocation(services, [])
    run.begin([deliveries["m-0"]])
    assert run.run("m-0", deliveries["m-0"]) == "pending"
    monkeypatch.setattr(run.batch, "may_acknowledge", lambda receipt, outcome: False)
    assert run.settle([]) == ["m-0"]


# -- the dispatcher ----------------------------------------------------------------------------


def test_the_tick_sends_every_bucket_and_counts_them() -> None:
    ticks = MemoryDispatchQueue()
    fan_out, counts = send_tick(T0 + timedelta(seconds=42), ticks, buckets=4)
    assert fan_out.now == T0
    assert [t.bucket for t in ticks.sent] == [0, 1, 2, 3]
    assert counts == {"BucketTicksSent": 4}


def due_every_minute(services: Wiring) -> int:
    """Task `a`, due every minute from T0 on: its bucket."""
    definition = task("a", trigger={"rate": "1m"}, misfire={"grace_s": 60})
    apply_tasks([definition], services.tasks, now=T0 - timedelta(minutes=1))
    return bucket_of("a", DEFAULT_BUCKETS)


def test_a_bucket_message_is_dispatched_dropped_or_retried(
    services: Wiring, monkeypatch: pytest.MonkeyPatch
) -> None:
    ticks = MemoryDispatchQueue()
    bucket = due_every_minute(services)
    body = tick_body(BucketTick(minute=T0, bucket=bucket))
    messages = [
        DispatchMessage("m-1", "rh-1", body),
        DispatchMessage("m-3", "rh-3", "not json"),  # malformed: dropped, not retried
    ]

    done = dispatch_messages(messages, services, ticks, remaining_ms=60_000, request_id="r")

    assert done.failures == [] and ticks.held == {}
    assert [r.verdict.value for r in done.results.values()] == ["dispatched"]
    assert set(done.counts) == BUCKET_COUNTS
    assert done.counts["BucketsDispatched"] == 1 and done.counts["BucketTicksAbsorbed"] == 0
    assert done.counts["InstancesFired"] == 1 and done.counts["DueTasks"] == 1
    assert done.answer() == {"batchItemFailures": []}
    assert set(done.answer(reports=True)["reports"]) == {"m-1"}

    def fails(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("store down")

    monkeypatch.setattr("iotsched.services.scheduling.dispatcher_invocation.dispatch_bucket", fails)
    later = tick_body(BucketTick(minute=T0 + timedelta(minutes=1), bucket=bucket))
    retried = dispatch_messages(
        [DispatchMessage("m-4", "rh-4", later)], services, ticks, remaining_ms=1, request_id="r"
    )
    assert retried.failures == ["m-4"] and ticks.held == {"rh-4": RETRY_S}
    assert retried.answer() == {"batchItemFailures": [{"itemIdentifier": "m-4"}]}
    assert retried.counts["BucketsDispatched"] == 0


def test_a_held_bucket_absorbs_a_copy_of_its_minute_and_holds_another_minute(
    services: Wiring, clock: ManualClock
) -> None:
    ticks = MemoryDispatchQueue()
    bucket = due_every_minute(services)
    assert services.tasks.take_tick(
        bucket,
        T0,
        owner="elsewhere",
        now=clock.now(),
        until=clock.now() + timedelta(minutes=5),
    ).taken
    messages = [
        DispatchMessage("m-1", "rh-1", tick_body(BucketTick(minute=T0, bucket=bucket))),
        DispatchMessage(
            "m-2", "rh-2", tick_body(BucketTick(minute=T0 + timedelta(minutes=1), bucket=bucket))
        ),
    ]

    done = dispatch_messages(messages, services, ticks, remaining_ms=60_000, request_id="r")

    # the minute the lease was taken for: a copy of a dispatch that runs, acknowledged; the
    # next minute waits for the lease's end
    assert [r.verdict.value for r in done.results.values()] == ["absorbed", "wait"]
    assert done.failures == ["m-2"]
    assert ticks.held == {"rh-2": done.results["m-2"].wait_s} and done.results["m-2"].wait_s > 1
    assert done.counts["BucketTicksAbsorbed"] == 1 and done.counts["BucketTicksWaiting"] == 1
    assert done.counts["BucketsDispatched"] == 0


def test_a_dispatch_message_names_its_bucket_minute_and_trace() -> None:
    body = tick_body(BucketTick(minute=T0, bucket=7, trace="t-1"))
    assert tick_of(body) == BucketTick(minute=T0, bucket=7, trace="t-1")
    for malformed in ("", "{}", '{"minute": "x", "bucket": 1}'):
        assert tick_of(malformed) is None


# -- the sweeper and the dead letters ----------------------------------------------------------


def test_a_sweep_counts_each_thing_it_did_zeros_too(services: Wiring) -> None:
    run = run_sweeper(services)
    assert run.counts == {
        "InstancesTimedOut": 0,
        "ShardsTimedOut": 0,
        "ShardsRequeued": 0,
        "DispatchesResumed": 0,
        "InstancesFinalized": 0,
        "ShardsCancelled": 0,
        "InstancesFollowedUp": 0,
        "AlertsRepublished": 0,
        "TasksMissed": 0,
    }
    assert run.report.now == T0


def test_a_dead_letter_is_counted_and_its_instance_end_too(services: Wiring) -> None:
    assert take_dead_letter("{}", services).counts == {"DeadLetters": 1}  # malformed: dropped
    _, deliveries = fire_scan(services)
    services.ends.drain()
    for message_id in ("m-0", "m-1"):
        take_dead_letter(deliveries[message_id].body, services)
    last = take_dead_letter(deliveries["m-2"].body, services)
    assert last.counts == {"DeadLetters": 1, "InstancesFailed": 1}
    assert trace_of('{"trace": "t-1"}') == "t-1"
    assert trace_of("[]") is None and trace_of("not json") is None
