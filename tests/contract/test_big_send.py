"""A big instance is sent in steps, its cursor recorded on the instance: a dispatch that dies
mid-send is resumed where it stopped, never from shard 0 (docs/guarantees.md, "Big instances"), on the
fakes and on moto server (SQS and DynamoDB), with the reruns of some shards and the reduce.

Step sizes are shrunk here (`small_steps`) so that a few hundred shards make many steps; the
sizes the product uses are exercised by `test_every_shard_of_a_20000_shard_instance_...`.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any, cast

import pytest

from iotsched import bootstrap
from iotsched.adapters.dynamodb import DynamoDBStore
from iotsched.adapters.dynamodb import transact_outcomes as transact
from iotsched.adapters.memory.queues import MemoryShardQueue
from iotsched.clock import ManualClock
from iotsched.context import ShardContext
from iotsched.core.instance_record import (
    InstanceRecord,
    InstanceStatus,
)
from iotsched.core.shard_message import ShardMessage
from iotsched.ports.messaging import ShardQueue
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.execution.batch import run_shard
from iotsched.services.execution.outcomes import Delivery
from iotsched.services.execution.sweep import sweep
from iotsched.services.operations.actions import rerun_instance
from iotsched.services.scheduling import send as send_module
from iotsched.services.scheduling.lifecycle import send_shards
from iotsched.services.scheduling.report import TickReport
from iotsched.services.scheduling.tick import dispatch_tick
from iotsched.services.wiring import Wiring
from iotsched.tasklib import registry
from tests.contract.conftest import Store
from tests.faults import Faults
from tests.support import T0, AwsResources, instance, receive_all, received_shard_messages, task

# Big instances: each scenario runs on memory in the quick loop, on DynamoDB in the full run.
pytestmark = pytest.mark.load

S = timedelta(seconds=1)
SHARDS = 300
BIG = "big@2026-11-29T12:00Z"


class QueueDied(ConnectionError):
    """The queue (or the dispatcher's process) failed mid-send."""


class DyingQueue:
    """The shard queue, in SendMessageBatch requests of 10; the `fail_after`-th request and
    every one after it raise until `revive()` (a dispatcher whose send dies mid-way)."""

    def __init__(self, inner: ShardQueue, fail_after: int | None = None) -> None:
        self.inner = inner
        self.fail_after = fail_after
        self.requests = 0
        self._lock = threading.Lock()

    def revive(self) -> None:
        self.fail_after = None

    def send(self, messages: Sequence[ShardMessage]) -> int:
        made = 0
        for start in range(0, len(messages), 10):
            with self._lock:
                if self.fail_after is not None and self.requests >= self.fail_after:
                    raise QueueDied(f"the queue failed after {self.requests} requests")
                self.requests += 1
            made += self.inner.send(messages[start : start + 10])
        return made

    def extend_visibility(self, receipt_handle: str, seconds: int) -> None:
        self.inner.extend_visibility(receipt_handle, seconds)

    def hold_visibility(self, receipt_handles: Sequence[str], seconds: int) -> set[str]:
        return self.inner.hold_visibility(receipt_handles, seconds)


class Harness:
    """Wiring whose queue can die, and what reached the real queue, per shard."""

    def __init__(self, services: Wiring, aws: AwsResources | None) -> None:
        self.queue = DyingQueue(services.queue)
        self.services = Wiring(**{**services.__dict__, "queue": self.queue})
        self.aws = aws
        self._seen: list[ShardMessage] = []

    @property
    def clock(self) -> ManualClock:
        return cast("ManualClock", self.services.clock)

    def arrived(self, expect: int) -> list[ShardMessage]:
        """Every message that reached the queue so far (taken off it, on SQS)."""
        if self.aws is None:
            return list(cast("MemoryShardQueue", self.queue.inner).sent)
        # Until the queue is empty (every send is over, and moto shows a message at once):
        # `expect` only bounds the polls.
        raw = receive_all(
            self.aws.client("sqs"),
            self.aws.shard_queue_url,
            expect=None,
            max_polls=expect // 10 + 20,
        )
        self._seen += received_shard_messages(raw)
        return list(self._seen)

    def counts(self, expect: int) -> Counter[tuple[str, int]]:
        return Counter((m.instance_id, m.shard) for m in self.arrived(expect))


@pytest.fixture(params=["memory", pytest.param("moto", marks=pytest.mark.moto)])
def harness(request: pytest.FixtureRequest) -> Harness:
    clock = ManualClock(T0 + 3 * S)
    if request.param == "memory":
        return Harness(bootstrap.build_memory(clock=clock), None)
    aws: AwsResources = request.getfixturevalue("aws_resources")
    return Harness(bootstrap.build(aws.settings, clock=clock, clients=aws.clients()), aws)


@pytest.fixture
def small_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """Steps of 50 shards, sent in chunks of 20 (5 requests a step)."""
    monkeypatch.setattr(send_module, "STEP_SHARDS", 50)
    monkeypatch.setattr(send_module, "CHUNK_MESSAGES", 20)


def apply_big(services: Wiring, shards: int = SHARDS, **fields: Any) -> None:
    definition = task(
        "big",
        trigger={"rate": "15m"},
        sharding={"strategy": "id_range", "shards": shards, "id_max": shards * 10},
        **fields,
    )
    apply_tasks([definition], services.tasks, now=T0 - timedelta(minutes=7))


def resume_after_the_lease(h: Harness, instance_id: str, *, by: str = "sweep") -> None:
    """The dispatcher is gone: once its dispatch lease ends, the sweeper (or the tick's next
    delivery, which finds the slot claimed) resumes the send."""
    stalled = h.services.instances.get_instance(instance_id)
    assert stalled is not None and stalled.status is InstanceStatus.PLANNING
    assert stalled.dispatch_lease_until is not None
    h.clock.set(stalled.dispatch_lease_until + S)
    h.queue.revive()
    if by == "sweep":
        assert sweep(h.services).resumed == [instance_id]
    else:
        assert dispatch_tick(T0, h.services).resumed == [instance_id]


@pytest.mark.usefixtures("small_steps")
@pytest.mark.parametrize("by", ["sweep", "tick"])
def test_a_send_that_dies_mid_way_resumes_where_it_stopped(harness: Harness, by: str) -> None:
    h = harness
    apply_big(h.services)
    h.queue.fail_after = 17  # steps of 5 requests: 3 steps recorded, the 4th dies in flight
    with pytest.raises(QueueDied):
        dispatch_tick(T0, h.services)
    stalled = h.services.instances.get_instance(BIG)
    resume_after_the_lease(h, BIG, by=by)
    counts = h.counts(expect=SHARDS + 20)
    assert set(counts) == {(BIG, n) for n in range(SHARDS)}  # every shard went out
    assert counts[(BIG, 0)] == 1  # never re-sent from shard 0
    # Only the step in flight when it died (shards 150-199) may have gone out twice.
    assert max(counts.values()) <= 2
    assert {n for (_, n), c in counts.items() if c > 1} <= set(range(150, 200))
    assert stalled is not None and stalled.sent == 150  # the cursor it resumed from
    done = h.services.instances.get_instance(BIG)
    assert done is not None and done.status is InstanceStatus.RUNNING


@pytest.mark.usefixtures("small_steps")
def test_every_shard_is_sent_once_and_the_cursor_ends_at_the_last_step(harness: Harness) -> None:
    h = harness
    apply_big(h.services)
    report = dispatch_tick(T0, h.services)
    assert report.claimed == [BIG] and report.messages_sent == SHARDS
    assert report.send_requests == SHARDS // 10
    counts = h.counts(expect=SHARDS)
    assert counts == Counter({(BIG, n): 1 for n in range(SHARDS)})
    done = h.services.instances.get_instance(BIG)
    assert done is not None and done.status is InstanceStatus.RUNNING
    assert done.sent == SHARDS - 50  # recorded after every step but the last


@pytest.mark.usefixtures("small_steps")
def test_a_rerun_of_some_shards_resumes_in_its_own_send_order(harness: Harness) -> None:
    h = harness
    base = instance("big", shards=SHARDS, claimed_at=T0, status=InstanceStatus.PLANNING)
    only = list(range(1, SHARDS, 2))  # 150 shards: 3 steps of 50
    rerun = base.model_copy(
        update={"instance_id": f"{base.instance_id}~run2", "only": only, "remaining": len(only)}
    )
    assert h.services.instances.claim_instance(rerun) is None
    h.queue.fail_after = 12  # steps 1 and 2 recorded (10 requests), the third dies
    with pytest.raises(QueueDied):
        send_shards(rerun, h.services, TickReport(now=T0))
    stalled = h.services.instances.get_instance(rerun.instance_id)
    assert stalled is not None and stalled.sent == 100
    resume_after_the_lease(h, rerun.instance_id)
    counts = h.counts(expect=len(only) + 20)
    assert set(counts) == {(rerun.instance_id, n) for n in only}  # none of the other shards
    assert counts[(rerun.instance_id, 1)] == 1
    assert max(counts.values()) <= 2
    assert all(c == 1 for (_, n), c in counts.items() if n < only[100])


@pytest.mark.usefixtures("small_steps")
def test_a_full_rerun_of_a_big_instance_sends_every_shard_from_the_start(
    harness: Harness,
) -> None:
    h = harness
    shards = 150
    apply_big(h.services, shards=shards)
    dispatch_tick(T0, h.services)
    first = h.services.instances.get_instance(BIG)
    assert first is not None and first.sent == shards - 50
    assert h.services.instances.end_instance(
        BIG, status=InstanceStatus.CANCELLED, reason="test", finished_at=h.clock.now()
    )
    second = rerun_instance(BIG, h.services)
    assert second.status is InstanceStatus.RUNNING
    counts = h.counts(expect=2 * shards)
    assert counts == Counter(
        {(iid, n): 1 for iid in (BIG, second.instance_id) for n in range(shards)}
    )


@pytest.mark.usefixtures("small_steps")
def test_a_dispatcher_taken_over_stops_at_its_next_step(harness: Harness) -> None:
    """Dispatcher A is slow: its lease ends mid-send and the sweeper resumes from the cursor;
    A's next step is refused, so no shard goes out more than twice."""
    h = harness
    apply_big(h.services)
    taken_over = threading.Event()

    class SlowQueue(DyingQueue):
        def send(self, messages: Sequence[ShardMessage]) -> int:
            made = super().send(messages)
            if self.requests >= 12 and not taken_over.is_set():
                taken_over.set()
                current = h.services.instances.get_instance(BIG)
                assert current is not None and current.dispatch_lease_until is not None
                h.clock.set(current.dispatch_lease_until + S)
                assert sweep(h.services).resumed == [BIG]  # B sends the rest
            return made

    h.queue = SlowQueue(h.queue.inner)
    h.services = Wiring(**{**h.services.__dict__, "queue": h.queue})
    dispatch_tick(T0, h.services)
    assert taken_over.is_set()
    counts = h.counts(expect=SHARDS + 50)
    assert set(counts) == {(BIG, n) for n in range(SHARDS)}
    assert counts[(BIG, 0)] == 1 and max(counts.values()) <= 2
    done = h.services.instances.get_instance(BIG)
    assert done is not None and done.status is InstanceStatus.RUNNING


@pytest.mark.usefixtures("small_steps")
def test_a_send_past_its_budget_gives_the_dispatch_up_to_the_next_sweep(
    harness: Harness,
) -> None:
    h = harness
    base = instance("big", shards=SHARDS, claimed_at=T0 + 3 * S)
    assert h.services.instances.claim_instance(base) is None
    send_shards(base, h.services, TickReport(now=T0), budget_s=0.0)  # one step, then pauses
    paused = h.services.instances.get_instance(base.instance_id)
    assert paused is not None and paused.status is InstanceStatus.PLANNING
    assert paused.sent == 50
    assert paused.dispatch_lease_until == h.clock.now()  # given up: no wait for a lease
    assert sweep(h.services).resumed == [base.instance_id]
    counts = h.counts(expect=SHARDS)
    assert counts == Counter({(base.instance_id, n): 1 for n in range(SHARDS)})


# -- the reduce --------------------------------------------------------------------------------


def test_a_big_instance_resumed_mid_send_reduces_once_over_every_shard(
    small_steps: None,
) -> None:
    seen: list[int] = []

    def work(ctx: ShardContext) -> Mapping[str, Any]:
        return {"n": 1}

    def total(ctx: ShardContext) -> Mapping[str, Any]:
        seen.append(len(ctx.partials()))
        return {"n": len(ctx.partials())}

    clock = ManualClock(T0 + 3 * S)
    built = bootstrap.build_memory(
        clock=clock, handlers={**registry(), "work": work, "total": total}
    )
    h = Harness(built, None)
    apply_big(h.services, shards=120, handler="work", reduce="total")
    h.queue.fail_after = 7  # the first step recorded, the second dies in flight
    with pytest.raises(QueueDied):
        dispatch_tick(T0, h.services)
    resume_after_the_lease(h, BIG)
    queue = cast("MemoryShardQueue", h.queue.inner)
    counts = Counter(m.shard for m in queue.sent)
    assert set(counts) == set(range(120)) and counts[0] == 1 and max(counts.values()) <= 2
    delivered: list[ShardMessage] = []
    while queue.sent:
        message = queue.sent.pop(0)
        delivered.append(message)
        run_shard(
            Delivery(body=message.model_dump_json(), receipt_handle="rh"),
            h.services,
            worker="w",
        )
    assert [m.shard for m in delivered if m.reduce] == [120]  # its message went out once
    assert seen == [120]  # the reduce ran once, over every shard's result
    done = h.services.instances.get_instance(BIG)
    assert done is not None and done.status is InstanceStatus.SUCCEEDED


# -- the cursor's write, on every store --------------------------------------------------------


def test_advance_dispatch_is_fenced_on_the_lease_held(store: Store) -> None:
    inst = instance(shards=3, claimed_at=T0, dispatch_lease_s=60)
    assert store.claim_instance(inst) is None
    iid, held = inst.instance_id, inst.dispatch_lease_until
    assert held == T0 + 60 * S
    assert store.advance_dispatch(iid, sent=1000, held=held, until=T0 + 90 * S) is True
    current = store.get_instance(iid)
    assert current is not None
    assert (current.sent, current.dispatch_lease_until) == (1000, T0 + 90 * S)
    # The lease it held is gone: a stale holder is refused and changes nothing.
    assert store.advance_dispatch(iid, sent=2000, held=held, until=T0 + 120 * S) is False
    # Another dispatcher takes the dispatch over once the lease ends, and goes on from there.
    assert store.take_dispatch(iid, now=T0 + 90 * S, until=T0 + 150 * S) is True
    assert store.advance_dispatch(iid, sent=2000, held=T0 + 90 * S, until=T0 + 180 * S) is False
    assert store.advance_dispatch(iid, sent=2000, held=T0 + 150 * S, until=T0 + 180 * S) is True
    current = store.get_instance(iid)
    assert current is not None and current.sent == 2000
    # Not once the instance left planning.
    assert store.set_instance_status(
        iid, expected=InstanceStatus.PLANNING, status=InstanceStatus.RUNNING
    )
    assert store.advance_dispatch(iid, sent=3000, held=T0 + 180 * S, until=T0 + 240 * S) is False


def test_advance_dispatch_moves_the_deadline_the_sweeper_reads(store: Store) -> None:
    # A capped instance's paced send moves its deadline on: the record and the sweeper's
    # deadline order (`open_instances`) both see the new one, and a later step without a
    # deadline leaves it where it is.
    early = instance(shards=3, claimed_at=T0, dispatch_lease_s=60)
    late = instance(task_id="later", shards=3, claimed_at=T0 + 10 * S, dispatch_lease_s=60)
    for inst in (early, late):
        assert store.claim_instance(inst) is None
    assert [i.instance_id for i in store.open_instances()] == [early.instance_id, late.instance_id]
    moved = late.deadline + timedelta(hours=2)
    held = early.dispatch_lease_until
    assert store.advance_dispatch(
        early.instance_id, sent=2, held=held, until=T0 + 90 * S, deadline=moved
    )
    current = store.get_instance(early.instance_id)
    assert current is not None and current.deadline == moved and current.sent == 2
    assert [i.instance_id for i in store.open_instances()] == [late.instance_id, early.instance_id]
    assert store.advance_dispatch(early.instance_id, sent=3, held=T0 + 90 * S, until=T0 + 99 * S)
    current = store.get_instance(early.instance_id)
    assert current is not None and current.deadline == moved


def test_advance_dispatch_without_a_lease_and_concurrent_holders(store: Store) -> None:
    inst = instance(shards=3).model_copy(update={"dispatch_lease_until": None})
    assert store.claim_instance(inst) is None
    iid = inst.instance_id
    results: list[bool] = []
    barrier = threading.Barrier(6)

    def advance(n: int) -> None:
        barrier.wait(timeout=30)
        results.append(store.advance_dispatch(iid, sent=1000, held=None, until=T0 + (60 + n) * S))

    threads = [threading.Thread(target=advance, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False] * 5 + [True]  # one holder goes on; the others stop
    current = store.get_instance(iid)
    assert current is not None and current.sent == 1000


def test_a_claimed_instance_starts_with_nothing_sent(store: Store) -> None:
    inst: InstanceRecord = instance(shards=2)
    assert store.claim_instance(inst) is None
    current = store.get_instance(inst.instance_id)
    assert current is not None and current.sent == 0


@pytest.mark.moto
@pytest.mark.usefixtures("small_steps")
def test_a_cursor_write_in_conflict_with_transactions_on_dynamodb_does_not_stop_the_send(
    aws_resources: AwsResources,
) -> None:
    """DynamoDB answers a single write on an item inside a transaction with
    TransactionConflictException, which botocore does not retry and moto never gives: the
    adapter's rounds run out on the first step's write, the send goes on, and the next step
    records the cursor."""
    faults = Faults().reject(
        "TransactionConflictException", operation="UpdateItem", times=transact.ROUNDS
    )
    built = bootstrap.build(
        aws_resources.settings, clock=ManualClock(T0 + 3 * S), clients=aws_resources.clients()
    )
    store = faults.install(cast("DynamoDBStore", built.instances), aws_resources)
    h = Harness(
        Wiring(**{**built.__dict__, "tasks": store, "instances": store, "blocking": store}),
        aws_resources,
    )
    base = instance("big", shards=SHARDS, claimed_at=T0 + 3 * S)
    assert store.claim_instance(base) is None
    send_shards(base, h.services, TickReport(now=T0))
    assert faults.pending == 0 and len(faults.answered) == transact.ROUNDS
    done = store.get_instance(base.instance_id)
    assert done is not None and done.status is InstanceStatus.RUNNING
    assert done.sent == SHARDS - 50
    assert h.counts(expect=SHARDS) == Counter({(base.instance_id, n): 1 for n in range(SHARDS)})
