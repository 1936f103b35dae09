"""The shards of one worker batch complete together (`ShardBatch`), on the in-memory fakes.

One `complete_shards` call for the batch's finished shards, one instance read per instance
before the leases (while fresh) and one after the commit; the finalizer where a counter reached
zero; a completion not written leaves its message to come back; a pending shard's lease never
runs out while the batch goes on.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any, cast

import pytest

from iotsched import bootstrap
from iotsched.adapters.memory.queues import MemoryShardQueue
from iotsched.clock import ManualClock
from iotsched.context import ShardContext
from iotsched.core.instance_record import (
    InstanceRecord,
    InstanceStatus,
)
from iotsched.core.shard_message import ShardMessage
from iotsched.ports.shards import (
    CompletionVerdict,
    ShardCompletion,
)
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.execution.batch import (
    ShardBatch,
    run_shard,
)
from iotsched.services.execution.buffer import (
    UNWRITTEN_RETURN_S,
    CompletionBuffer,
)
from iotsched.services.execution.outcomes import (
    CompletionNotWrittenError,
    Delivery,
    GivenBackError,
    PendingShard,
    ShardOutcome,
    ShardReport,
)
from iotsched.services.scheduling.tick import dispatch_tick
from iotsched.services.wiring import Wiring
from iotsched.tasklib import registry
from tests.support import T0, task

S = timedelta(seconds=1)


class Spy:
    """Wraps the instance store: counts reads and completion calls, may refuse completions."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.reads: Counter[str] = Counter()
        self.commits: list[list[tuple[str, int]]] = []
        self.refuse: BaseException | None = None
        self.unwritten: set[tuple[str, int]] = set()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def get_instance(self, instance_id: str) -> InstanceRecord | None:
        self.reads[instance_id] += 1
        found: InstanceRecord | None = self._store.get_instance(instance_id)
        return found

    def instance_ended(self, instance_id: str) -> bool:
        self.reads[instance_id] += 1
        return bool(self._store.instance_ended(instance_id))

    def complete_shards(self, completions: Sequence[ShardCompletion]) -> list[CompletionVerdict]:
        self.commits.append([(c.instance_id, c.index) for c in completions])
        if self.refuse is not None:
            raise self.refuse
        kept = [c for c in completions if (c.instance_id, c.index) not in self.unwritten]
        verdicts = iter(self._store.complete_shards(kept))
        return [
            CompletionVerdict.UNWRITTEN
            if (c.instance_id, c.index) in self.unwritten
            else next(verdicts)
            for c in completions
        ]


def setup(
    clock: ManualClock,
    *tasks: tuple[str, int],
    handlers: Mapping[str, Any] | None = None,
    timeout_s: int = 60,
) -> tuple[Wiring, Spy, list[ShardMessage]]:
    """Tasks (id, shards) due at T0, dispatched: their shard messages, in order."""
    services = bootstrap.build_memory(clock=clock, handlers={**registry(), **(handlers or {})})
    spy = Spy(services.instances)
    services = dataclasses.replace(services, instances=cast("Any", spy))
    definitions = [
        task(
            name,
            trigger={"rate": "15m"},
            sharding={"strategy": "static", "shards": [{"n": i} for i in range(n)]},
            timeout_s=timeout_s,
            **({"handler": "work"} if handlers else {}),
        )
        for name, n in tasks
    ]
    apply_tasks(definitions, services.tasks, now=T0 - 7 * 60 * S)
    clock.set(T0 + 3 * S)
    dispatch_tick(clock.now(), services)
    messages = list(cast("MemoryShardQueue", services.queue).sent)
    spy.reads.clear()
    return services, spy, messages


class Timer:
    """One scheduled call of a `Timers`: fired by the test, or cancelled by the batch."""

    def __init__(self, delay_s: float, call: Callable[[], object]) -> None:
        self.delay_s, self.call, self.cancelled = delay_s, call, False

    def cancel(self) -> None:
        self.cancelled = True

    def fire(self) -> None:
        assert not self.cancelled, "a cancelled timer does not fire"
        self.call()


class Timers:
    """A `ShardBatch` timer the test fires by hand (no thread, no real time)."""

    def __init__(self) -> None:
        self.set: list[Timer] = []

    def __call__(self, delay_s: float, call: Callable[[], object]) -> Timer:
        self.set.append(Timer(delay_s, call))
        return self.set[-1]

    def live(self) -> list[Timer]:
        return [t for t in self.set if not t.cancelled]


def delivery(message: ShardMessage, n: int = 0, receive_count: int = 1) -> Delivery:
    return Delivery(message.model_dump_json(), f"rh-{n}", receive_count=receive_count)


def instance(services: Wiring, instance_id: str) -> InstanceRecord:
    found = services.instances.get_instance(instance_id)
    assert found is not None
    return found


def test_a_batch_commits_once_and_reads_each_instance_once_before_and_once_after(
    clock: ManualClock,
) -> None:
    services, spy, messages = setup(clock, ("a", 3), ("b", 2))
    ids = sorted({m.instance_id for m in messages})
    batch = ShardBatch(services, worker="w", timer=Timers())

    results = [batch.run(delivery(m, n)) for n, m in enumerate(messages)]

    assert all(isinstance(r, PendingShard) for r in results)
    assert spy.commits == []  # nothing written yet: no message may be acknowledged
    assert {i: spy.reads[i] for i in ids} == dict.fromkeys(ids, 1)  # one read before the leases
    settled = batch.commit()
    assert [p.outcome for p in settled] == [ShardOutcome.SUCCEEDED] * 5
    assert all(p.error is None for p in settled)
    assert len(spy.commits) == 1 and len(spy.commits[0]) == 5
    # one read after the commit per instance, and the finalizer's own read where it reached 0
    assert {i: spy.reads[i] for i in ids} == dict.fromkeys(ids, 3)
    for i in ids:
        assert instance(services, i).status is InstanceStatus.SUCCEEDED
    assert batch.commit() == []  # nothing left pending


def test_outcomes_other_than_a_finished_shard_are_immediate(clock: ManualClock) -> None:
    services, spy, messages = setup(clock, ("a", 2))
    batch = ShardBatch(services, worker="w", timer=Timers())
    first = batch.run(delivery(messages[0]))
    assert isinstance(first, PendingShard)
    # the same message again in the batch: its shard runs under this batch's live lease
    assert batch.run(delivery(messages[0], 1)) is ShardOutcome.DUPLICATE
    batch.commit()
    # a delivery after the commit: the shard is finished
    assert batch.run(delivery(messages[0], 2)) is ShardOutcome.DUPLICATE
    assert spy.commits == [[(messages[0].instance_id, 0)]]


def test_a_stale_completion_is_reported_stale_and_the_others_commit(clock: ManualClock) -> None:
    services, _spy, messages = setup(clock, ("a", 3))
    batch = ShardBatch(services, worker="w", timer=Timers())
    pending = [batch.run(delivery(m, n)) for n, m in enumerate(messages)]
    # shard 1's lease expires and another worker takes it over before the batch commits
    clock.advance(200 * S)
    taken = services.instances.take_lease(
        messages[1].instance_id,
        1,
        bounds={},
        worker="other",
        now=clock.now(),
        lease_until=clock.now() + 90 * S,
        max_attempts=3,
    )
    assert taken.taken
    settled = batch.commit()
    assert [p.outcome for p in settled] == [
        ShardOutcome.SUCCEEDED,
        ShardOutcome.STALE,
        ShardOutcome.SUCCEEDED,
    ]
    assert [p.report.outcome for p in settled] == [p.outcome for p in settled]
    assert pending == settled
    inst = instance(services, messages[0].instance_id)
    assert (inst.status, inst.remaining) == (InstanceStatus.RUNNING, 1)


@pytest.mark.parametrize("how", ["raises", "unwritten"])
def test_a_completion_not_written_comes_back_and_is_finished_later(
    clock: ManualClock, how: str
) -> None:
    calls: list[tuple[int, int]] = []

    def work(ctx: ShardContext) -> None:
        calls.append((ctx.shard, ctx.attempt))

    services, spy, messages = setup(clock, ("a", 2), handlers={"work": work})
    iid = messages[0].instance_id
    if how == "raises":
        spy.refuse = ConnectionError("DynamoDB unreachable")
    else:
        spy.unwritten = {(iid, 0)}
    batch = ShardBatch(services, worker="w", timer=Timers())
    for n, m in enumerate(messages):
        batch.run(delivery(m, n))
    first, second = batch.commit()
    assert first.outcome is None and first.report.outcome is None
    if how == "raises":
        assert isinstance(first.error, ConnectionError)
        assert second.outcome is None and second.error is not None
    else:
        assert isinstance(first.error, CompletionNotWrittenError)
        assert (second.outcome, second.error) == (ShardOutcome.SUCCEEDED, None)
    assert instance(services, iid).remaining == 2 if how == "raises" else 1
    spy.refuse, spy.unwritten = None, set()

    # The message comes back in seconds, not after its visibility timeout: the batch made it
    # visible again and ended its lease ...
    queue = cast("MemoryShardQueue", services.queue)
    assert queue.visibility[delivery(messages[0], 0).receipt_handle] == UNWRITTEN_RETURN_S
    if how == "raises":
        assert queue.visibility[delivery(messages[1], 1).receipt_handle] == UNWRITTEN_RETURN_S
    clock.advance(UNWRITTEN_RETURN_S * S)
    # ... so its next delivery takes the shard over at once and finishes it.
    outcome = run_shard(delivery(messages[0], 6, receive_count=2), services, worker="w2")
    assert outcome is ShardOutcome.SUCCEEDED
    assert calls.count((0, 1)) == 1 and calls.count((0, 2)) == 1
    if how == "raises":
        assert run_shard(delivery(messages[1], 7, receive_count=3), services, worker="w2") is (
            ShardOutcome.SUCCEEDED
        )
    inst = instance(services, iid)
    assert (inst.status, inst.remaining, inst.failed_shards) == (InstanceStatus.SUCCEEDED, 0, 0)


def test_short_shards_with_the_default_timeouts_commit_once(clock: ManualClock) -> None:
    # timeout_s 300 s (lease 330 s) in a function with 300 s left: the shards still batch
    services, spy, messages = setup(clock, ("a", 4), timeout_s=300)
    timers = Timers()
    batch = ShardBatch(services, worker="w", time_left_s=lambda: 300.0, timer=timers)
    results = [batch.run(delivery(m, n)) for n, m in enumerate(messages)]
    assert all(isinstance(r, PendingShard) and r.outcome is None for r in results)
    assert spy.commits == []
    # one timer, set when the second message started: HOLD_S after the first shard finished
    assert [t.delay_s for t in timers.set] == [CompletionBuffer.HOLD_S]
    batch.commit()
    assert [len(c) for c in spy.commits] == [4]
    assert timers.live() == []  # the commit called the timer off
    assert instance(services, messages[0].instance_id).status is InstanceStatus.SUCCEEDED


def test_a_long_shard_has_the_finished_ones_committed_by_the_timer_while_it_runs(
    clock: ManualClock,
) -> None:
    seen_while_running: list[list[list[tuple[str, int]]]] = []

    def work(ctx: ShardContext) -> None:
        if ctx.shard == 1:  # the long one: the timer fires while it runs
            clock.advance(CompletionBuffer.HOLD_S * S)
            timers.live()[0].fire()
            seen_while_running.append(list(spy.commits))
            clock.advance(40 * S)

    services, spy, messages = setup(clock, ("a", 3), handlers={"work": work})
    timers = Timers()
    batch = ShardBatch(services, worker="w", timer=timers)
    first = batch.run(delivery(messages[0]))
    second = batch.run(delivery(messages[1], 1))
    iid = messages[0].instance_id
    assert seen_while_running == [[[(iid, 0)]]]
    assert isinstance(first, PendingShard) and first.outcome is ShardOutcome.SUCCEEDED
    assert isinstance(second, PendingShard) and second.outcome is None
    clock.advance(CompletionBuffer.HOLD_S * S)  # shard 1's hold is over: committed before shard 2
    batch.run(delivery(messages[2], 2))
    assert [len(c) for c in spy.commits] == [1, 1]
    assert len(timers.set) == 1
    batch.commit()
    assert [len(c) for c in spy.commits] == [1, 1, 1]
    assert instance(services, iid).status is InstanceStatus.SUCCEEDED


def test_the_commit_deadline_is_the_earliest_of_hold_lease_and_invocation_end(
    clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    services, _spy, messages = setup(clock, ("a", 3))  # leases of 20 s
    left = [1000.0]
    batch = ShardBatch(services, worker="w", time_left_s=lambda: left[0], timer=Timers())
    assert batch.commit_deadline() is None
    first = batch.run(delivery(messages[0]))
    assert isinstance(first, PendingShard)
    hold = first.finished_at + CompletionBuffer.HOLD_S * S
    assert batch.commit_deadline() == hold
    monkeypatch.setattr(CompletionBuffer, "HOLD_S", 600.0)  # the lease's end comes first
    assert batch.commit_deadline() == first.lease_until - ShardBatch.COMMIT_ALLOWANCE_S * S
    left[0] = 12.0  # the invocation's end comes first
    assert batch.commit_deadline() == clock.now() + (12 - ShardBatch.COMMIT_ALLOWANCE_S) * S


def test_a_batch_near_the_end_of_its_invocation_commits_before_the_next_shard(
    clock: ManualClock,
) -> None:
    services, spy, messages = setup(clock, ("a", 3))
    left = [1000.0]
    timers = Timers()
    batch = ShardBatch(services, worker="w", time_left_s=lambda: left[0], timer=timers)
    batch.run(delivery(messages[0]))
    batch.run(delivery(messages[1], 1))
    assert [t.delay_s for t in timers.set] == [CompletionBuffer.HOLD_S]
    left[0] = ShardBatch.COMMIT_ALLOWANCE_S  # no time left to hold anything
    batch.run(delivery(messages[2], 2))
    assert [len(c) for c in spy.commits] == [2]  # before shard 2 started
    batch.commit()
    assert [len(c) for c in spy.commits] == [2, 1]


def test_the_thread_timer_commits_while_the_next_handler_runs(
    clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(CompletionBuffer, "HOLD_S", 0.2)
    committed = threading.Event()

    def work(ctx: ShardContext) -> None:
        if ctx.shard == 1:  # waits (up to 10 s) for the timer thread's commit
            deadline = time.monotonic() + 10
            while not spy.commits and time.monotonic() < deadline:
                time.sleep(0.01)
            if spy.commits:
                committed.set()

    services, spy, messages = setup(clock, ("a", 2), handlers={"work": work})
    batch = ShardBatch(services, worker="w")  # the real timer: a daemon thread
    first = batch.run(delivery(messages[0]))
    batch.run(delivery(messages[1], 1))
    assert committed.is_set()
    assert isinstance(first, PendingShard) and first.outcome is ShardOutcome.SUCCEEDED
    batch.commit()
    assert [len(c) for c in spy.commits] == [1, 1]


def test_a_cancel_is_seen_before_a_handler_starts_once_the_read_is_older_than_a_second(
    clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [0.0]
    monkeypatch.setattr("iotsched.services.execution.reads.time.monotonic", lambda: now[0])
    services, spy, messages = setup(clock, ("a", 3))
    iid = messages[0].instance_id
    batch = ShardBatch(services, worker="w", timer=Timers())
    assert isinstance(batch.run(delivery(messages[0])), PendingShard)
    assert services.instances.end_instance(
        iid, status=InstanceStatus.CANCELLED, reason="cancelled", finished_at=clock.now()
    )
    now[0] = 0.5  # within the shared read's second: the batch still sees it running
    assert isinstance(batch.run(delivery(messages[1], 1)), PendingShard)
    now[0] = 1.5  # read again: cancelled, the shard is not started
    assert batch.run(delivery(messages[2], 2)) is ShardOutcome.NOT_STARTED
    assert spy.reads[iid] == 2
    assert {s.index for s in services.instances.list_shards(iid)} == {0, 1}


def test_a_heartbeat_commits_the_batch_s_finished_shards(clock: ManualClock) -> None:
    committed_at_heartbeat: list[int] = []

    def work(ctx: ShardContext) -> None:
        if ctx.shard == 1:
            ctx.heartbeat()
            committed_at_heartbeat.append(len(spy.commits))

    services, spy, messages = setup(clock, ("a", 2), handlers={"work": work})
    batch = ShardBatch(services, worker="w", timer=Timers())
    first = batch.run(delivery(messages[0]))
    batch.run(delivery(messages[1], 1))
    assert committed_at_heartbeat == [1]
    assert isinstance(first, PendingShard) and first.outcome is ShardOutcome.SUCCEEDED
    batch.commit()
    assert [len(c) for c in spy.commits] == [1, 1]


# -- the records an invocation has not started when it is about to run out of time ------------


def given_back_setup(
    clock: ManualClock, handlers: Mapping[str, Any] | None = None, time_left: float = 100.0
) -> tuple[Wiring, ShardBatch, Timers, list[Delivery]]:
    services, _spy, messages = setup(clock, ("a", 3), handlers=handlers)
    timers = Timers()
    batch = ShardBatch(services, worker="w", time_left_s=lambda: time_left, timer=timers)
    deliveries = [delivery(m, n) for n, m in enumerate(messages)]
    batch.expect(deliveries)
    return services, batch, timers, deliveries


def queue_of(services: Wiring) -> MemoryShardQueue:
    return cast("MemoryShardQueue", services.queue)


def test_records_not_started_when_the_invocation_nears_its_end_are_sent_back(
    clock: ManualClock,
) -> None:
    def long(ctx: ShardContext) -> None:
        if ctx.shard == 0:  # the invocation's end comes near while shard 0 runs
            closing.fire()

    services, batch, timers, deliveries = given_back_setup(clock, handlers={"work": long})
    (closing,) = timers.set
    assert closing.delay_s == 100 - ShardBatch.COMMIT_ALLOWANCE_S
    originals = list(queue_of(services).sent)
    first = batch.run(deliveries[0])
    # fresh copies of shards 1 and 2 (their receive count starts again), in one send
    assert queue_of(services).sent == [*originals, *originals[1:]]
    assert queue_of(services).visibility == {}
    for d in deliveries[1:]:
        report = ShardReport()
        assert batch.run(d, report=report) is ShardOutcome.GIVEN_BACK  # acknowledged
        assert report.given_back and report.outcome is ShardOutcome.GIVEN_BACK
    batch.end()
    assert isinstance(first, PendingShard) and first.outcome is ShardOutcome.SUCCEEDED
    assert closing.cancelled
    iid = originals[0].instance_id
    assert [s.index for s in services.instances.list_shards(iid)] == [0]  # 1, 2 never started
    assert instance(services, iid).remaining == 2
    # the copies run as any delivery does
    for n, copy in enumerate(queue_of(services).sent[3:], 10):
        assert run_shard(delivery(copy, n), services, worker="w2") is ShardOutcome.SUCCEEDED
    assert instance(services, iid).status is InstanceStatus.SUCCEEDED


def test_the_closing_timer_commits_what_finished_and_sends_back_the_rest(
    clock: ManualClock,
) -> None:
    services, batch, timers, deliveries = given_back_setup(clock)
    first = batch.run(deliveries[0])
    assert isinstance(first, PendingShard) and first.outcome is None
    timers.set[0].fire()  # between two records
    assert first.outcome is ShardOutcome.SUCCEEDED
    assert len(queue_of(services).sent) == 3 + 2
    assert batch.run(deliveries[1]) is ShardOutcome.GIVEN_BACK


def test_where_no_copy_can_be_sent_the_records_are_made_visible_and_fail(
    clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    services, batch, timers, deliveries = given_back_setup(clock)
    assert isinstance(batch.run(deliveries[0]), PendingShard)

    def refuse(messages: object) -> int:
        raise ConnectionError("SQS is unreachable")

    monkeypatch.setattr(queue_of(services), "send", refuse)
    timers.set[0].fire()
    assert queue_of(services).visibility == {"rh-1": 0, "rh-2": 0}  # visible again at once
    report = ShardReport()
    with pytest.raises(GivenBackError):  # a batch item failure: not acknowledged
        batch.run(deliveries[1], report=report)
    assert report.given_back and report.outcome is None


def test_the_first_record_always_starts_and_a_short_function_gives_nothing_back(
    clock: ManualClock,
) -> None:
    services, batch, timers, deliveries = given_back_setup(clock)
    originals = list(queue_of(services).sent)
    timers.set[0].fire()  # before any record started: all but the first go back
    assert queue_of(services).sent[3:] == originals[1:]
    assert isinstance(batch.run(deliveries[0]), PendingShard)
    assert [batch.run(d) for d in deliveries[1:]] == [ShardOutcome.GIVEN_BACK] * 2
    assert len(queue_of(services).sent) == 5  # nothing sent twice

    # a record reached after the close (not among the expected) goes back when reached
    services, batch, timers, deliveries = given_back_setup(clock)
    assert isinstance(batch.run(deliveries[0]), PendingShard)
    timers.set[0].fire()
    late = delivery(ShardMessage.model_validate_json(deliveries[1].body), 9)
    assert batch.run(late) is ShardOutcome.GIVEN_BACK
    assert len(queue_of(services).sent) == 3 + 2 + 1

    # a function whose whole timeout is within the allowance: no timer, every record runs
    services, batch, timers, deliveries = given_back_setup(
        clock, time_left=ShardBatch.COMMIT_ALLOWANCE_S
    )
    assert timers.set == []
    assert all(isinstance(batch.run(d), PendingShard) for d in deliveries)
    assert len(queue_of(services).sent) == 3


def test_a_heartbeat_does_not_wait_for_a_commit_in_progress(clock: ManualClock) -> None:
    held, returned = threading.Event(), threading.Event()

    def hold_the_lock() -> None:  # a commit in progress on the timer thread, as it were
        with batch.completions._lock:
            held.set()
            returned.wait(10)

    def work(ctx: ShardContext) -> None:
        if ctx.shard == 1:
            holder.start()
            held.wait(10)
            ctx.heartbeat()  # must not wait for the holder (it would past the handler's timeout)
            returned.set()

    services, spy, messages = setup(clock, ("a", 2), handlers={"work": work})
    batch = ShardBatch(services, worker="w", timer=Timers())
    holder = threading.Thread(target=hold_the_lock)
    batch.run(delivery(messages[0]))
    started = time.monotonic()
    batch.run(delivery(messages[1], 1))
    holder.join()
    assert returned.is_set() and time.monotonic() - started < 5
    batch.commit()
    assert [len(c) for c in spy.commits] == [2]


def test_a_malformed_record_is_made_visible_at_once_and_its_siblings_still_run(
    clock: ManualClock,
) -> None:
    # given a batch of two shards and a poison record between them, every record held
    services, _spy, messages = setup(clock, ("a", 2))
    batch = ShardBatch(services, worker="w", timer=Timers(), renewals=lambda _: Timer(0, list))
    poison = Delivery('{"instance_id": "a@x", "shard": "not-a-number"', "rh-poison")
    good = [delivery(m, n) for n, m in enumerate(messages)]
    batch.expect([good[0], poison, good[1]])
    queue = queue_of(services)
    assert batch.hold is not None
    assert queue.held == dict.fromkeys(["rh-0", "rh-poison", "rh-1"], batch.hold.seconds)
    # when each runs
    assert isinstance(batch.run(good[0]), PendingShard)
    with pytest.raises(ValueError, match="validation error"):
        batch.run(poison)
    assert isinstance(batch.run(good[1]), PendingShard)
    # then the poison one is visible again at once (the DLQ after maxReceiveCount quick
    # receives), no longer held, and the two shards commit
    assert queue.visibility == {"rh-poison": 0}
    queue.held.clear()
    batch.hold.step()
    assert set(queue.held) == {"rh-0", "rh-1"}  # a renewal does not hide it again
    assert [p.outcome for p in batch.commit()] == [ShardOutcome.SUCCEEDED] * 2


def test_a_handler_asking_every_second_reads_its_instance_once_per_renewal_and_sees_an_end(
    clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a shard whose handler works 30 s, asking ctx.cancelled() every second, and whose
    # instance is cancelled 21 s in
    now = [0.0]
    monkeypatch.setattr(
        "iotsched.services.execution.handler_context.time.monotonic", lambda: now[0]
    )
    asked: list[tuple[float, bool]] = []
    services: Wiring | None = None

    def work(ctx: ShardContext) -> None:
        assert services is not None
        for second in range(31):
            now[0] = float(second)
            if second == 21:
                services.instances.end_instance(
                    ctx.instance_id,
                    status=InstanceStatus.CANCELLED,
                    reason="cancelled",
                    finished_at=clock.now(),
                )
            asked.append((now[0], ctx.cancelled()))
            if asked[-1][1]:
                return

    services, spy, messages = setup(clock, ("a", 1), handlers={"work": work})
    iid = messages[0].instance_id
    batch = ShardBatch(services, worker="w", timer=Timers(), renewals=lambda _: Timer(0, list))
    reads_before = spy.reads[iid]
    batch.run(delivery(messages[0]))
    # then the instance was read once per renewal period (20 s leases: 6.7 s), not every second
    period = services.tuning.shard_lease_s / 3
    seen_at = next(t for t, cancelled in asked if cancelled)
    assert spy.reads[iid] - reads_before <= 21 / period + 2
    # and the end was seen within one period
    assert 21 <= seen_at <= 21 + period
    assert not any(cancelled for t, cancelled in asked if t < 21)
