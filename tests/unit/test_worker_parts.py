"""The worker's parts stand alone: the invocation deadline, the attempt runner and the
completion buffer each work without a `ShardBatch` around them, and a batch builds its own."""

from __future__ import annotations

from typing import cast

from iotsched.adapters.memory.queues import MemoryShardQueue
from iotsched.clock import ManualClock
from iotsched.core.instance_record import InstanceStatus
from iotsched.core.shard_message import ShardMessage
from iotsched.services.execution.attempt import AttemptRunner
from iotsched.services.execution.batch import ShardBatch
from iotsched.services.execution.buffer import CompletionBuffer
from iotsched.services.execution.deadline import InvocationDeadline
from iotsched.services.execution.outcomes import (
    Delivery,
    PendingShard,
    ShardOutcome,
    ShardReport,
)
from iotsched.services.execution.reads import InstanceReads
from iotsched.services.execution.schedules import HeldRenewals
from tests.unit.test_shard_batch import S, Timers, delivery, instance, setup


def test_the_deadline_gives_back_what_has_not_started_and_then_closes(
    clock: ManualClock,
) -> None:
    services, _spy, messages = setup(clock, ("a", 3))
    queue = cast("MemoryShardQueue", services.queue)
    timers, closed = Timers(), []
    deadline = InvocationDeadline(
        services,
        parse=ShardMessage.model_validate_json,
        time_left_s=lambda: 100.0,
        timer=timers,
        release=lambda receipt: True,
        on_close=lambda: closed.append(True),
    )
    assert deadline.ends() == clock.now() + 100 * S
    deliveries = [delivery(m, n) for n, m in enumerate(messages)]
    deadline.arm(deliveries)
    (closing,) = timers.set
    assert closing.delay_s == 90
    sent = len(queue.sent)
    closing.fire()  # nothing started: all but the first go back, in one send
    assert queue.sent[sent:] == messages[1:]
    assert closed == [True]
    assert deadline.may_start(deliveries[0]) is None  # the first starts whatever the time
    assert deadline.may_start(deliveries[1]) is ShardOutcome.GIVEN_BACK
    deadline.end()  # the closing timer is done: no wait


def test_without_its_time_left_the_deadline_gives_nothing_back(clock: ManualClock) -> None:
    services, _spy, messages = setup(clock, ("a", 2))
    timers = Timers()
    deadline = InvocationDeadline(
        services,
        parse=ShardMessage.model_validate_json,
        time_left_s=None,
        timer=timers,
        release=lambda receipt: True,
        on_close=lambda: None,
    )
    deadline.arm([delivery(m, n) for n, m in enumerate(messages)])
    assert deadline.ends() is None and timers.set == []


def test_the_runner_leaves_its_shards_to_a_buffer_that_commits_them_together(
    clock: ManualClock,
) -> None:
    services, spy, messages = setup(clock, ("a", 2))
    reads, renewals = InstanceReads(services), HeldRenewals()
    buffer = CompletionBuffer(
        services,
        reads=reads,
        timer=Timers(),
        invocation_end=lambda: None,
        release=lambda receipt: True,
    )
    retried: list[Delivery] = []
    runner = AttemptRunner(
        services,
        worker="w",
        renewals=renewals,
        reads=reads,
        retry_later=lambda d, message, attempt, delay_s: retried.append(d),
        commit_pending=lambda: buffer.commit(block=False),
    )
    for n, message in enumerate(messages):
        result = runner.run(delivery(message, n), message, ShardReport())
        assert isinstance(result, PendingShard) and result.outcome is None
        buffer.add(result)
    assert len(renewals.live()) == 2  # renewed until the commit settles
    settled = buffer.commit()
    assert [p.outcome for p in settled] == [ShardOutcome.SUCCEEDED] * 2
    assert spy.commits == [[(m.instance_id, m.shard) for m in messages]]  # one transaction
    assert renewals.live() == [] and retried == []
    assert instance(services, messages[0].instance_id).status is InstanceStatus.SUCCEEDED


def test_each_batch_builds_its_own_parts(clock: ManualClock) -> None:
    services, _spy, messages = setup(clock, ("a", 2))
    first = ShardBatch(services, worker="w", timer=Timers())
    second = ShardBatch(services, worker="w", timer=Timers())
    assert isinstance(first.run(delivery(messages[0])), PendingShard)
    assert len(first.pending) == 1 and second.pending == []
    for part in ("completions", "deadline", "attempts", "reads"):
        assert getattr(first, part) is not getattr(second, part)
    first.end()
    assert first.pending == []
