"""Failover of a worker batch's records that had not started, at the template's defaults, on the
memory fakes and a manual clock (renewals and visibility holds are stepped by hand, as the
worker's threads would run them).

A batch of several records keeps each record's message on a visibility of one lease
(`VisibilityHold`), so a dead worker's unstarted records reappear within a lease rather than a
visibility timeout (1,800 s); a hold that lapsed while the worker lives never deletes a message
another consumer may hold; a duplicate that finds its instance at zero finalizes it.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, cast

import pytest

from iotsched import bootstrap
from iotsched.adapters.memory.queues import MemoryShardQueue
from iotsched.clock import ManualClock
from iotsched.context import ShardContext
from iotsched.core.instance_record import InstanceStatus
from iotsched.core.shard_message import ShardMessage
from iotsched.core.shard_record import (
    ShardRecord,
    ShardStatus,
)
from iotsched.local.host import FakeLambdaContext
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.execution import buffer as buffer_module
from iotsched.services.execution.batch import (
    ShardBatch,
    run_shard,
    waiting_records,
)
from iotsched.services.execution.outcomes import (
    Delivery,
    PendingShard,
    RetryShardError,
    ShardOutcome,
)
from iotsched.services.execution.schedules import HeldRenewals
from iotsched.services.execution.sweep import sweep
from iotsched.services.scheduling.tick import dispatch_tick
from iotsched.services.wiring import Tuning, Wiring
from tests.support import T0, task
from tests.unit.test_function_metrics import load, sqs_event

S = timedelta(seconds=1)
LEASE_S = 20  # the default
VISIBILITY_S = 1800  # the template's default: what an unheld record would wait


class Died(BaseException):
    """The worker process died here: nothing after this point runs."""


def setup(
    handler: Callable[[ShardContext], Any], shards: int = 3, **fields: Any
) -> tuple[Wiring, ManualClock, list[ShardMessage]]:
    clock = ManualClock(T0 + S)
    services = bootstrap.build_memory(clock=clock, handlers={"h": handler})
    fields.setdefault("timeout_s", 300)  # the template's worker timeout
    definition = task(
        "t",
        handler="h",
        sharding={"strategy": "static", "shards": [{"n": i} for i in range(shards)]},
        **fields,
    )
    apply_tasks([definition], services.tasks, now=T0 - timedelta(hours=1))
    dispatch_tick(T0, services)
    return services, clock, list(queue(services).sent)


def queue(services: Wiring) -> MemoryShardQueue:
    return cast("MemoryShardQueue", services.queue)


def held(services: Wiring) -> HeldRenewals:
    return cast("HeldRenewals", services.renewals)


def delivery(message: ShardMessage, receipt: str) -> Delivery:
    return Delivery(message.model_dump_json(), receipt)


def shards(services: Wiring, instance_id: str) -> dict[int, ShardRecord]:
    return {s.index: s for s in services.instances.list_shards(instance_id)}


def run_batch(
    services: Wiring, deliveries: list[Delivery], worker: str
) -> list[tuple[str, ShardOutcome, bool]]:
    """One invocation as the worker function runs it: each record's outcome once committed,
    and whether it may be acknowledged (deleted)."""
    batch = ShardBatch(services, worker=worker)
    batch.expect(deliveries)
    results = [batch.run(d) for d in deliveries]
    batch.end()
    settled: list[tuple[str, ShardOutcome, bool]] = []
    for d, result in zip(deliveries, results, strict=True):
        outcome = result.outcome if isinstance(result, PendingShard) else result
        assert outcome is not None
        settled.append(
            (d.receipt_handle, outcome, batch.may_acknowledge(d.receipt_handle, outcome))
        )
    return settled


def test_a_dead_worker_s_unstarted_records_reappear_within_a_lease_and_run_once_each() -> None:
    """A batch of 3 whose worker dies during record 1: records 2 and 3 were held on a visibility
    of one lease, renewed while it lived; they reappear within a lease of the death (not 1,800 s
    later), another worker runs each exactly once, and record 1 goes over by the sweeper."""
    runs: Counter[tuple[int, str]] = Counter()

    def handler(ctx: ShardContext) -> None:
        runs[(ctx.shard, ctx.worker)] += 1
        if ctx.shard == 0 and ctx.attempt == 1:
            for _ in range(4):  # 28 s: past the first lease, kept by the renewals
                clock.advance(7 * S)
                held(services).step()
            raise Died("SIGKILL")

    services, clock, messages = setup(handler)
    originals = [delivery(m, f"rh-{m.shard}") for m in messages]
    batch = ShardBatch(services, worker="w1")
    batch.expect(originals)
    # the first hold is made before anything runs: one request for the three records
    assert queue(services).held == {d.receipt_handle: LEASE_S for d in originals}
    assert queue(services).hold_requests == 1
    with pytest.raises(Died):
        batch.run(originals[0])
    died = clock.now()
    assert queue(services).hold_requests == 1 + 4  # renewed every third of a lease

    # Records 2 and 3 are visible again within a lease of the death.
    back = max(queue(services).held_until[d.receipt_handle] for d in originals[1:])
    assert died < back <= died + LEASE_S * S
    clock.set(back)
    # Another worker receives them (new receipts) and runs each once.
    settled = run_batch(services, [delivery(m, f"rh2-{m.shard}") for m in messages[1:]], "w2")
    assert [(o, ack) for _, o, ack in settled] == [(ShardOutcome.SUCCEEDED, True)] * 2
    iid = messages[0].instance_id
    found = shards(services, iid)
    assert [(found[i].status, found[i].attempt) for i in (1, 2)] == [(ShardStatus.SUCCEEDED, 1)] * 2
    assert found[1].attempts[0].started_at - died <= LEASE_S * S  # not VISIBILITY_S

    # Record 1's lease ends; the sweep sends a fresh message, taken over as attempt 2.
    clock.set(found[0].lease_until + S)  # type: ignore[operator]
    assert sweep(services).requeued_shards == [f"{iid}#0"]
    assert run_shard(delivery(queue(services).sent[-1], "fresh-0"), services, worker="w3") is (
        ShardOutcome.SUCCEEDED
    )
    # A late copy of a record that ran finds the instance final: nothing runs again.
    assert run_shard(delivery(messages[1], "late-1"), services, worker="w4") is (
        ShardOutcome.NOT_STARTED
    )
    assert runs == {(0, "w1"): 1, (0, "w3"): 1, (1, "w2"): 1, (2, "w2"): 1}
    final = services.instances.get_instance(iid)
    assert final is not None and final.status is InstanceStatus.SUCCEEDED


def test_a_waiting_record_s_visibility_is_renewed_while_its_worker_lives() -> None:
    """Record 2 waits 140 s behind a long record 1 (seven leases): its visibility never ends
    while the worker lives, one request renews both records, and the hold stops with the
    invocation; both records are acknowledged."""
    ends: list[datetime] = []

    def handler(ctx: ShardContext) -> None:
        if ctx.shard == 0:
            for _ in range(20):
                clock.advance(7 * S)
                held(services).step()
                ends.append(queue(services).held_until["rh-1"])
                assert ends[-1] - clock.now() >= (LEASE_S - 7) * S  # never near its end

    services, clock, messages = setup(handler, shards=2)
    deliveries = [delivery(m, f"rh-{m.shard}") for m in messages]
    started = clock.now()
    settled = run_batch(services, deliveries, "w1")
    assert [(o, ack) for _, o, ack in settled] == [(ShardOutcome.SUCCEEDED, True)] * 2
    assert len(ends) == 20 and ends == sorted(ends) and ends[-1] > started + 140 * S
    assert queue(services).hold_requests == 1 + 20  # one per renewal, both records in it
    assert held(services).holds() == []  # stopped with the invocation
    assert queue(services).visibility == {}  # no single change, no retry


def test_a_lone_record_is_held_and_a_death_before_its_first_renewal_fails_over_in_a_lease() -> None:
    """A lease enters the lease index with its first renewal, so the sweeper cannot see a worker
    that died before it: the record's own message must come back. An invocation of one record
    is held too (one request), and its record, back within a lease of the death, takes the
    expired lease over as attempt 2."""

    def handler(ctx: ShardContext) -> None:
        if ctx.attempt == 1:
            clock.advance(3 * S)  # before the first renewal (a third of a lease)
            raise Died("SIGKILL")

    services, clock, messages = setup(handler, shards=1)
    original = delivery(messages[0], "rh-0")
    batch = ShardBatch(services, worker="w1")
    batch.expect([original])
    assert queue(services).held == {"rh-0": LEASE_S}
    assert queue(services).hold_requests == 1
    with pytest.raises(Died):
        batch.run(original)
    died = clock.now()
    iid = messages[0].instance_id
    lease_end = shards(services, iid)[0].lease_until
    assert lease_end is not None
    clock.set(lease_end + 60 * S)
    assert sweep(services).requeued_shards == []  # never renewed: not in the lease index

    back = queue(services).held_until["rh-0"]
    assert died < back <= died + LEASE_S * S  # not VISIBILITY_S
    clock.set(back)
    assert run_batch(services, [delivery(messages[0], "rh2-0")], "w2")[0][1:] == (
        ShardOutcome.SUCCEEDED,
        True,
    )
    record = shards(services, iid)[0]
    assert [(a.worker, a.outcome) for a in record.attempts] == [
        ("w1", "lost"),
        ("w2", "succeeded"),
    ]
    assert record.attempts[1].started_at - died <= LEASE_S * S


def test_the_running_record_is_held_and_a_live_unindexed_lease_it_finds_is_indexed() -> None:
    """The record being run is held with the others. Record 2's worker dies 3 s into it, its
    lease (taken 5 s after the hold was set) outlives the hold: the record comes back while the
    dead attempt's lease is live. That delivery puts the lease into the index (its end as it
    is) and is acknowledged; the sweep after the lease's end sends a fresh message, whose
    worker takes the shard over."""

    def handler(ctx: ShardContext) -> None:
        if ctx.shard == 0:
            clock.advance(5 * S)
        elif ctx.attempt == 1:
            clock.advance(3 * S)
            raise Died("SIGKILL")

    services, clock, messages = setup(handler, shards=2)
    originals = [delivery(m, f"rh-{m.shard}") for m in messages]
    batch = ShardBatch(services, worker="w1")
    batch.expect(originals)
    batch.run(originals[0])
    with pytest.raises(Died):
        batch.run(originals[1])
    died = clock.now()
    iid = messages[0].instance_id
    dead = shards(services, iid)[1]
    assert dead.lease_until is not None
    back = queue(services).held_until["rh-1"]  # held while it ran, as the waiting ones
    assert died < back < dead.lease_until
    assert services.instances.expired_leases(dead.lease_until) == []  # not indexed yet

    clock.set(back)
    (settled,) = run_batch(services, [delivery(messages[1], "rh2-1")], "w2")
    assert settled[1:] == (ShardOutcome.DUPLICATE, True)  # live: acknowledged, nothing ran
    assert shards(services, iid)[1].lease_until == dead.lease_until  # its end unchanged
    assert [s.index for s in services.instances.expired_leases(dead.lease_until)] == [1]

    clock.set(dead.lease_until + 30 * S)
    assert sweep(services).requeued_shards == [f"{iid}#1"]
    assert run_shard(delivery(queue(services).sent[-1], "fresh-1"), services, worker="w3") is (
        ShardOutcome.SUCCEEDED
    )
    assert clock.now() - died <= (LEASE_S + 60) * S  # a lease and a sweep period


def test_a_lease_left_unindexed_on_an_ended_instance_ends_cancelled_with_its_message() -> None:
    """The worker dies before its first renewal and the instance is cancelled meanwhile: the
    sweeper cannot see the lease, so the record's message, back within a lease, ends the shard
    `cancelled` (the dead attempt `lost`), as the sweeper would have."""
    from iotsched.services.operations.actions import cancel_instance

    def handler(ctx: ShardContext) -> None:
        clock.advance(3 * S)
        raise Died("SIGKILL")

    services, clock, messages = setup(handler, shards=1)
    batch = ShardBatch(services, worker="w1")
    batch.expect([delivery(messages[0], "rh-0")])
    with pytest.raises(Died):
        batch.run(delivery(messages[0], "rh-0"))
    iid = messages[0].instance_id
    cancel_instance(iid, services)
    clock.set(queue(services).held_until["rh-0"] + S)
    (settled,) = run_batch(services, [delivery(messages[0], "rh2-0")], "w2")
    assert settled[1:] == (ShardOutcome.CANCELLED, True)
    record = shards(services, iid)[0]
    assert (record.status, record.attempts[-1].outcome) == (ShardStatus.CANCELLED, "lost")


def test_a_lease_at_its_cap_is_written_once_for_the_index() -> None:
    """A renewal leaves a lease at its timeout cap unwritten, to end; the first renewal writes
    it all the same (its end as it is), so that a hung attempt's lease is in the index and the
    sweeper takes it over when it ends."""
    # a lease as long as the hold (not indexed at its take), at its cap from the start
    tuning = dataclasses.replace(Tuning(), lease_margin_s=1, shard_lease_s=3)

    def handler(ctx: ShardContext) -> None:
        clock.advance(S)  # past the first renewal of a 3 s lease (timeout 2 s + margin 1 s)
        held(services).step()
        clock.advance(S)
        held(services).step()
        raise Died("SIGKILL")

    clock = ManualClock(T0 + S)
    services = bootstrap.build_memory(clock=clock, handlers={"h": handler}, tuning=tuning)
    definition = task("t", handler="h", timeout_s=2)
    apply_tasks([definition], services.tasks, now=T0 - timedelta(hours=1))
    dispatch_tick(T0, services)
    (message,) = queue(services).sent
    with pytest.raises(Died):
        run_shard(delivery(message, "rh-0"), services, worker="w1")
    record = shards(services, message.instance_id)[0]
    assert record.lease_until == record.attempts[0].started_at + 3 * S  # at its cap, unmoved
    assert [s.index for s in services.instances.expired_leases(record.lease_until)] == [0]


def lapse_while(services: Wiring, clock: ManualClock) -> None:
    """SQS refuses every hold request for more than a lease while the worker lives."""
    queue(services).fail_holds = 1000
    for _ in range(12):  # 24 s, a retry every tenth of a lease
        clock.advance(2 * S)
        held(services).step()


def test_a_lapsed_record_found_running_elsewhere_is_left_to_the_queue() -> None:
    """The hold lapsed; another consumer received record 2 and runs it. When record 2's turn
    comes here, its lease write finds that attempt: nothing runs, and the record is reported
    failed rather than deleted (a delete through this older receipt could delete the message
    the other consumer holds, whose retry would come from it)."""
    state: dict[str, Any] = {}

    def handler(ctx: ShardContext) -> None:
        if ctx.shard == 0:
            lapse_while(services, clock)
        elif ctx.worker == "w2":  # the other consumer, running record 2 meanwhile
            state["here"] = batch.run(originals[1])

    services, clock, messages = setup(handler, shards=2)
    originals = [delivery(m, f"rh-{m.shard}") for m in messages]
    batch = ShardBatch(services, worker="w1")
    batch.expect(originals)
    first = batch.run(originals[0])
    assert run_shard(delivery(messages[1], "rh2-1"), services, worker="w2") is (
        ShardOutcome.SUCCEEDED
    )
    batch.end()
    assert state["here"] is ShardOutcome.DUPLICATE
    assert batch.hold is not None and not batch.hold.intact("rh-1")
    assert not batch.may_acknowledge("rh-1", ShardOutcome.DUPLICATE)
    # record 1 ran and its shard is final: its delete cannot take anything from anyone
    assert isinstance(first, PendingShard) and first.outcome is ShardOutcome.SUCCEEDED
    assert batch.may_acknowledge("rh-0", ShardOutcome.SUCCEEDED)
    # the lapsed receipts were never touched again once the lapse was seen
    assert queue(services).visibility == {}


def test_an_intact_hold_acknowledges_a_duplicate() -> None:
    """Without a lapse the receipt is the message's own: a duplicate is deleted as ever."""
    services, _clock, messages = setup(lambda ctx: None, shards=2)
    assert run_shard(delivery(messages[1], "copy-1"), services, worker="w0") is (
        ShardOutcome.SUCCEEDED
    )
    settled = run_batch(services, [delivery(m, f"rh-{m.shard}") for m in messages], "w1")
    assert [(o, ack) for _, o, ack in settled] == [
        (ShardOutcome.SUCCEEDED, True),
        (ShardOutcome.DUPLICATE, True),
    ]


def test_a_lapsed_record_s_retry_goes_by_a_fresh_copy() -> None:
    """Record 2's attempt fails with attempts left after its hold lapsed: its message may be
    with another consumer (who may delete it as a duplicate), so a fresh copy carries the retry
    and the old receipt's visibility is left alone; the record fails (not deleted)."""

    def handler(ctx: ShardContext) -> None:
        if ctx.shard == 0:
            lapse_while(services, clock)
        elif ctx.attempt == 1:
            raise RuntimeError("device API down")

    services, clock, messages = setup(handler, shards=2, retry={"max_attempts": 3})
    originals = [delivery(m, f"rh-{m.shard}") for m in messages]
    batch = ShardBatch(services, worker="w1")
    batch.expect(originals)
    batch.run(originals[0])
    sent = len(queue(services).sent)
    with pytest.raises(RetryShardError):
        batch.run(originals[1])
    batch.end()
    assert queue(services).sent[sent:] == [messages[1]]  # the fresh copy
    assert "rh-1" not in queue(services).visibility  # no backoff through the old receipt
    assert run_shard(delivery(messages[1], "copy-1"), services, worker="w2") is (
        ShardOutcome.SUCCEEDED
    )
    assert shards(services, messages[0].instance_id)[1].attempt == 2


def test_an_intact_record_s_retry_still_waits_its_backoff_on_its_own_message() -> None:
    def handler(ctx: ShardContext) -> None:
        if ctx.shard == 1 and ctx.attempt == 1:
            raise RuntimeError("device API down")

    services, _clock, messages = setup(
        handler, shards=2, retry={"max_attempts": 3, "backoff_s": 30}
    )
    originals = [delivery(m, f"rh-{m.shard}") for m in messages]
    batch = ShardBatch(services, worker="w1")
    batch.expect(originals)
    batch.run(originals[0])
    with pytest.raises(RetryShardError):
        batch.run(originals[1])
    held(services).step()  # a renewal after the release leaves the backoff alone
    batch.end()
    assert queue(services).visibility == {"rh-1": 30}
    assert len(queue(services).sent) == 2  # no copy
    assert queue(services).held["rh-1"] == LEASE_S  # the hold before the release only


def test_a_duplicate_finalizes_an_instance_left_at_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker that wrote the last shard died before its finalize: the instance is open at
    zero. The message, delivered again, finds the shard final and finalizes the instance
    (rather than leaving it to the sweeper)."""
    services, _clock, messages = setup(lambda ctx: None, shards=1)
    real = buffer_module.finalize

    def dies(instance_id: str, services: Wiring) -> object:
        raise Died("SIGKILL between the completion and the finalize")

    monkeypatch.setattr(buffer_module, "finalize", dies)
    with pytest.raises(Died):
        run_shard(delivery(messages[0], "rh-0"), services, worker="w1")
    monkeypatch.setattr(buffer_module, "finalize", real)
    iid = messages[0].instance_id
    open_ = services.instances.get_instance(iid)
    assert open_ is not None and (open_.remaining, open_.status) == (0, InstanceStatus.RUNNING)

    assert run_shard(delivery(messages[0], "rh-0b"), services, worker="w2") is (
        ShardOutcome.DUPLICATE
    )
    final = services.instances.get_instance(iid)
    assert final is not None and final.status is InstanceStatus.SUCCEEDED


@pytest.mark.parametrize("lapses", [False, True])
def test_the_worker_function_leaves_a_lapsed_duplicate_to_the_queue(
    monkeypatch: pytest.MonkeyPatch, lapses: bool
) -> None:
    """Through the worker function: record 2's shard is leased by another live attempt. With
    the hold intact it is acknowledged as ever; with the hold lapsed it is a batch item failure
    (the event source then leaves the message alone)."""

    def handler(ctx: ShardContext) -> None:
        if ctx.shard == 0 and lapses:
            lapse_while(services, clock)

    services, clock, messages = setup(handler, shards=2)
    taken = services.instances.take_lease(
        messages[1].instance_id,
        1,
        bounds=messages[1].bounds,
        worker="other",
        now=clock.now(),
        lease_until=clock.now() + 600 * S,
        max_attempts=3,
    )
    assert taken.taken
    worker = load(monkeypatch, "worker", services)
    response = worker.lambda_handler(
        sqs_event(queue(services), [0, 1]), FakeLambdaContext("worker", 300)
    )
    expected = [{"itemIdentifier": "m-1"}] if lapses else []
    assert response == {"batchItemFailures": expected}
    assert shards(services, messages[0].instance_id)[0].status is ShardStatus.SUCCEEDED
    assert held(services).holds() == []  # the hold stopped with the invocation


def test_a_handler_can_name_the_records_its_invocation_has_not_started() -> None:
    """`waiting_records()` (what the chaos handler logs as it dies): the records of the running
    invocation not yet started; none outside an invocation."""
    seen: dict[int, list[tuple[str, int]]] = {}

    def handler(ctx: ShardContext) -> None:
        seen[ctx.shard] = waiting_records()

    services, _clock, messages = setup(handler)
    run_batch(services, [delivery(m, f"rh-{m.shard}") for m in messages], "w1")
    iid = messages[0].instance_id
    assert seen == {0: [(iid, 1), (iid, 2)], 1: [(iid, 2)], 2: []}
    assert waiting_records() == []


def test_a_lease_shorter_than_the_hold_is_indexed_with_its_take() -> None:
    """A short `timeout_s` makes the attempt's lease (timeout + margin, 3 s) shorter than its
    message's hold (20 s): a worker that dies at once is taken over by the sweeper when the
    lease ends, not only when the hold does."""
    tuning = dataclasses.replace(Tuning(), lease_margin_s=1)

    def handler(ctx: ShardContext) -> None:
        if ctx.attempt == 1:
            raise Died("SIGKILL")

    clock = ManualClock(T0 + S)
    services = bootstrap.build_memory(clock=clock, handlers={"h": handler}, tuning=tuning)
    apply_tasks([task("t", handler="h", timeout_s=2)], services.tasks, now=T0 - timedelta(hours=1))
    dispatch_tick(T0, services)
    (message,) = queue(services).sent
    batch = ShardBatch(services, worker="w1")
    batch.expect([delivery(message, "rh-0")])
    with pytest.raises(Died):
        batch.run(delivery(message, "rh-0"))
    record = shards(services, message.instance_id)[0]
    assert record.lease_until == record.attempts[0].started_at + 3 * S
    clock.set(record.lease_until + S)
    assert clock.now() < queue(services).held_until["rh-0"]  # the hold has not ended
    assert sweep(services).requeued_shards == [f"{message.instance_id}#0"]


def test_heartbeats_between_the_renewals_cost_no_write_of_their_own() -> None:
    """A 30 s shard heartbeating every 5 s on the default lease: the scheduled renewals (every
    third of a lease) carry the lease; a heartbeat writes only where the lease was not written
    since its take (the write puts it into the index) or would end within two thirds of a
    lease. 1 + 4 lease writes, not 6 + 4, and the lease never comes near its end."""
    writes: list[datetime] = []
    margins: list[timedelta] = []

    def handler(ctx: ShardContext) -> None:
        events = [(5.0 * n, "beat") for n in range(1, 7)]
        events += [(20 / 3 * n, "renew") for n in range(1, 5)]
        started = clock.now()
        for at, what in sorted(events):
            clock.set(started + timedelta(seconds=at))
            if what == "beat":
                ctx.heartbeat()
            else:
                held(services).step()
            record = shards(services, ctx.instance_id)[ctx.shard]
            assert record.lease_until is not None
            margins.append(record.lease_until - clock.now())

    services, clock, messages = setup(handler, shards=1)
    extend = services.instances.extend_lease

    def counted(*args: Any, **kwargs: Any) -> None:
        writes.append(clock.now())
        extend(*args, **kwargs)

    services.instances.extend_lease = counted  # type: ignore[method-assign]
    assert run_shard(delivery(messages[0], "rh-0"), services, worker="w1") is (
        ShardOutcome.SUCCEEDED
    )
    assert len(writes) == 1 + 4
    assert min(margins) >= timedelta(seconds=LEASE_S * 2 / 3) - S
