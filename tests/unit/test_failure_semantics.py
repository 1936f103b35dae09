"""Failure semantics (docs/guarantees.md: "Leases", "Completion", "When things fail", "Effects, once").

Every scenario interleaves attempts, worker deaths, sweeps and dead letters by hand on a manual
clock and asserts on what the stores hold afterwards. The scenarios are written against a
`Harness` (services + a way to read what was sent and alerted) so that
`tests/integration/test_failure_runtime.py` runs the key ones again on the moto server; here
they run on the in-memory fakes (unit tests open no socket).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

import pytest

from iotsched import bootstrap
from iotsched.adapters.memory.queues import (
    MemoryAlertSink,
    MemoryShardQueue,
)
from iotsched.adapters.memory.store import MemoryInstanceStore
from iotsched.clock import ManualClock
from iotsched.context import Handler, ShardContext
from iotsched.core.alert_message import Alert
from iotsched.core.attempt_record import (
    Attempt,
    AttemptOutcome,
)
from iotsched.core.decisions import backoff_delay_s
from iotsched.core.instance_record import (
    InstanceRecord,
    InstanceStatus,
)
from iotsched.core.shard_message import ShardMessage
from iotsched.core.shard_record import (
    ShardRecord,
    ShardStatus,
)
from iotsched.ports.shards import StaleAttemptError
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.execution.batch import run_shard
from iotsched.services.execution.dead_letters import handle_dead_letter
from iotsched.services.execution.outcomes import (
    Delivery,
    RetryShardError,
    ShardOutcome,
)
from iotsched.services.execution.sweep import (
    SweepReport,
    sweep,
)
from iotsched.services.operations.actions import (
    InstanceConflictError,
    InstanceNotFoundError,
    cancel_instance,
)
from iotsched.services.scheduling.tick import dispatch_tick
from iotsched.services.wiring import Wiring
from iotsched.tasklib import registry
from tests.support import T0, task

SLOT = T0  # 12:00Z, on the 15-minute grid the scenarios' task uses
IID = "t@2026-11-29T12:00Z"
S = timedelta(seconds=1)
#: The sweeper's requeue delay in the scenarios (the queue's visibility timeout in production).
REQUEUE_AFTER_S = 120


# -- the harness ---------------------------------------------------------------------------------


@dataclass
class Harness:
    """Wiring on one backend, and what reached its queue and alert topic.

    Attributes:
        services: the use-cases' ports; `handlers` is the mutable mapping they use.
        clock: the manual clock every lease and deadline is measured on.
        handlers: the handler registry; scenarios add their own handlers to it.
        take_messages: shard messages sent since the last call, by (instance, shard).
        take_alerts: alerts published since the last call.
    """

    services: Wiring
    clock: ManualClock
    handlers: dict[str, Handler]
    take_messages: Callable[[], list[ShardMessage]]
    take_alerts: Callable[[], list[Alert]]


def memory_harness(clock: ManualClock) -> Harness:
    """A harness on the in-memory fakes."""
    handlers: dict[str, Handler] = dict(registry())
    services = bootstrap.build_memory(clock=clock, handlers=handlers)
    queue = cast("MemoryShardQueue", services.queue)
    sink = cast("MemoryAlertSink", services.alerts)
    seen = {"messages": 0, "alerts": 0}

    def take_messages() -> list[ShardMessage]:
        new = queue.sent[seen["messages"] :]
        seen["messages"] = len(queue.sent)
        return sorted(new, key=lambda m: (m.instance_id, m.shard))

    def take_alerts() -> list[Alert]:
        new = sink.published[seen["alerts"] :]
        seen["alerts"] = len(sink.published)
        return list(new)

    return Harness(services, clock, handlers, take_messages, take_alerts)


@pytest.fixture
def h(clock: ManualClock) -> Harness:
    """The in-memory harness on the `clock` fixture."""
    return memory_harness(clock)


class Died(BaseException):
    """The worker process died here: nothing after this point runs, no `except Exception`."""


def dies(ctx: ShardContext) -> None:
    """A handler whose worker dies mid-shard, after a renewal (its lease in the lease index),
    leaving its lease to expire."""
    ctx.heartbeat()
    raise Died(f"worker died running shard {ctx.shard} attempt {ctx.attempt}")


def dies_on_first_attempt(ctx: ShardContext) -> None:
    """A handler whose first attempt's worker dies after a renewal; later attempts succeed."""
    if ctx.attempt == 1:
        ctx.heartbeat()
        raise Died("worker died on attempt 1")


class DieAfterClaim:
    """Faults: the dispatcher dies between its claim and the send of the shard messages."""

    def after_claim(self, instance_id: str) -> None:
        raise Died(f"dispatcher died after claiming {instance_id}")

    def at(self, point: str, instance_id: str) -> None:
        """No deaths elsewhere."""


def fire(h: Harness, *, shards: int = 1, **fields: Any) -> list[ShardMessage]:
    """Apply task `t` (static shards `{"n": i}`), deliver the 12:00 tick; returns its messages.

    The clock reads 12:00:03 when the instance is claimed.
    """
    fields.setdefault("trigger", {"rate": "15m"})
    fields.setdefault(
        "sharding", {"strategy": "static", "shards": [{"n": i} for i in range(shards)]}
    )
    apply_tasks([task("t", **fields)], h.services.tasks, now=SLOT - 7 * 60 * S)
    h.clock.set(SLOT + 3 * S)
    report = dispatch_tick(SLOT, h.services)
    assert report.claimed == [IID]
    messages = h.take_messages()
    assert [m.shard for m in messages] == list(range(shards))
    return messages


def deliver(
    h: Harness, message: ShardMessage, *, worker: str = "w1", receipt: str = "rh"
) -> ShardOutcome:
    """One delivery of `message` to a worker."""
    return run_shard(
        Delivery(body=message.model_dump_json(), receipt_handle=receipt), h.services, worker=worker
    )


def instance_of(h: Harness) -> InstanceRecord:
    found = h.services.instances.get_instance(IID)
    assert found is not None
    return found


def shard_of(h: Harness, index: int) -> ShardRecord:
    found = [s for s in h.services.instances.list_shards(IID) if s.index == index]
    assert len(found) == 1, f"no record for shard {index}"
    return found[0]


def state(h: Harness) -> tuple[InstanceRecord, list[ShardRecord]]:
    """Everything the store holds about the instance."""
    return instance_of(h), h.services.instances.list_shards(IID)


def do_sweep(h: Harness, requeue_after_s: int = REQUEUE_AFTER_S) -> SweepReport:
    return sweep(h.services, requeue_after_s=requeue_after_s)


def did_nothing(report: SweepReport) -> bool:
    return not any(v for k, v in report.as_dict().items() if k != "now")


def assert_second_sweep_changes_nothing(h: Harness) -> None:
    """Sweep again (a minute later): no write, no message, no alert."""
    before = state(h)
    h.clock.advance(60 * S)
    report = do_sweep(h)
    assert did_nothing(report), report.as_dict()
    assert state(h) == before
    assert h.take_messages() == []
    assert h.take_alerts() == []


def finish(attempt: Attempt, at: datetime, outcome: ShardStatus, error: str | None) -> Attempt:
    """`attempt` as its worker would write it at its end."""
    return attempt.model_copy(
        update={
            "ended_at": at,
            "duration_ms": int((at - attempt.started_at).total_seconds() * 1000),
            "outcome": AttemptOutcome(outcome.value),
            "error": error,
        }
    )


# -- scenarios (shared with the moto run) ---------------------------------------------------------


def scenario_fencing(h: Harness) -> None:
    """Attempt 1 takes the lease and stalls; its lease expires; attempt 2 takes over and finishes.

    Attempt 1, woken up, cannot claim an effect, heartbeat, finish the shard, release it or
    decrement the counter; the record shows both attempts.
    """
    stalled, resume = threading.Event(), threading.Event()
    zombie: dict[str, str] = {}
    second: dict[str, bool] = {}

    def stall(ctx: ShardContext) -> None:
        if ctx.shard != 0:
            return
        if ctx.attempt == 1:
            assert ctx.once("effect#a")  # done before the stall: a second run must skip it
            stalled.set()
            if not resume.wait(30):
                raise TimeoutError("the test never resumed attempt 1")
            calls: dict[str, Callable[[], object]] = {
                "once": lambda: ctx.once("effect#c"),
                "heartbeat": ctx.heartbeat,
            }
            for name, call in calls.items():
                try:
                    call()
                    zombie[name] = "allowed"
                except StaleAttemptError:
                    zombie[name] = "refused"
            return  # returns normally: run_shard then tries to complete the shard
        second["effect#a"] = ctx.once("effect#a")
        second["effect#b"] = ctx.once("effect#b")

    h.handlers["stall"] = stall
    first_msg, other_msg = fire(h, shards=2, handler="stall", timeout_s=60)
    # renewals are held (never stepped): attempt 1 is hung, its lease is the first one
    lease_s = min(h.services.tuning.shard_lease_s, 60 + h.services.tuning.lease_margin_s)
    outcome: list[ShardOutcome | BaseException] = []

    def attempt_1() -> None:
        try:
            outcome.append(deliver(h, first_msg, worker="w1", receipt="rh-1"))
        except BaseException as exc:  # surfaced by the assertions below
            outcome.append(exc)

    thread = threading.Thread(target=attempt_1, name="attempt-1")
    thread.start()
    try:
        assert stalled.wait(30), outcome
        started = h.clock.now()
        # While attempt 1 holds a live lease, a duplicate delivery runs nothing.
        h.clock.advance((lease_s - 1) * S)
        assert deliver(h, first_msg, worker="w2", receipt="rh-2") is ShardOutcome.DUPLICATE
        # Attempt 1's lease expires; attempt 2 takes over and finishes.
        h.clock.set(started + lease_s * S)
        assert deliver(h, first_msg, worker="w2", receipt="rh-3") is ShardOutcome.SUCCEEDED
        assert second == {"effect#a": False, "effect#b": True}
        after_takeover = state(h)
    finally:
        resume.set()
        thread.join(30)
    assert not thread.is_alive()

    # Attempt 1 wakes up: every write it tries is refused, and its delivery is acknowledged stale.
    assert outcome == [ShardOutcome.STALE]
    assert zombie == {"once": "refused", "heartbeat": "refused"}
    assert state(h) == after_takeover

    inst, shards = after_takeover
    assert (inst.status, inst.remaining, inst.failed_shards) == (InstanceStatus.RUNNING, 1, 0)
    (shard,) = shards
    assert (shard.status, shard.attempt, shard.owner) == (ShardStatus.SUCCEEDED, 2, "w2")
    assert shard.lease_until is None
    first, second_attempt = shard.attempts
    # the takeover closed attempt 1: lost, ended when attempt 2 took over
    assert (first.number, first.worker, first.ended_at, first.outcome) == (
        1,
        "w1",
        started + lease_s * S,
        AttemptOutcome.LOST,
    )
    assert first.keys == ["effect#a"]
    assert (second_attempt.number, second_attempt.worker, second_attempt.outcome) == (
        2,
        "w2",
        "succeeded",
    )
    assert second_attempt.keys == ["effect#b"]
    assert shard.keys_written == ["effect#a", "effect#b"]

    # The store itself refuses each write attempt 1 could still make, and changes nothing.
    store = h.services.instances
    ended = finish(first, h.clock.now(), ShardStatus.SUCCEEDED, None)
    refused: list[Callable[[], object]] = [
        lambda: store.complete_shard(IID, 0, status=ShardStatus.SUCCEEDED, attempt=ended),
        lambda: store.complete_shard(IID, 0, status=ShardStatus.FAILED, attempt=ended, error="x"),
        lambda: store.release_shard(
            IID, 0, attempt=ended.model_copy(update={"outcome": AttemptOutcome.FAILED})
        ),
        lambda: store.extend_lease(IID, 0, attempt=1, until=h.clock.now() + 600 * S),
        lambda: store.record_effect("effect#d", instance_id=IID, index=0, attempt=1),
    ]
    for write in refused:
        with pytest.raises(StaleAttemptError):
            write()
    assert state(h) == after_takeover

    # The other shard finishes: the counter went down exactly once per shard.
    assert deliver(h, other_msg, worker="w3") is ShardOutcome.SUCCEEDED
    inst = instance_of(h)
    assert (inst.status, inst.remaining, inst.failed_shards) == (InstanceStatus.SUCCEEDED, 0, 0)
    assert h.take_alerts() == []


def scenario_sweep_times_out_an_exhausted_lease(h: Harness) -> None:
    """The last attempt's worker died: once its lease expires the sweeper ends it timed_out."""
    h.handlers["dies"] = dies
    (message,) = fire(h, handler="dies", retry={"max_attempts": 1}, timeout_s=60)
    with pytest.raises(Died):
        deliver(h, message, worker="w1")
    running = shard_of(h, 0)
    assert (running.status, running.attempt) == (ShardStatus.RUNNING, 1)
    assert running.lease_until is not None

    h.clock.set(running.lease_until - S)  # a live lease is left alone
    assert did_nothing(do_sweep(h))
    assert shard_of(h, 0) == running

    # Expired, but a last attempt gets one more lease period (a late renewal would keep it).
    grace = h.services.tuning.shard_lease_s * S
    h.clock.set(running.lease_until + grace - S)
    assert did_nothing(do_sweep(h))
    assert shard_of(h, 0) == running

    h.clock.set(running.lease_until + grace)
    report = do_sweep(h)
    assert report.timed_out_shards == [f"{IID}#0"]
    assert (report.requeued_shards, report.timed_out_instances, report.cancelled_shards) == (
        [],
        [],
        [],
    )
    shard = shard_of(h, 0)
    assert (shard.status, shard.attempt, shard.lease_until) == (ShardStatus.TIMED_OUT, 1, None)
    (attempt,) = shard.attempts
    assert (attempt.worker, attempt.outcome) == ("w1", "lost")  # the shard ends timed_out
    assert attempt.ended_at == running.lease_until + grace  # given up then
    inst = instance_of(h)
    assert (inst.status, inst.remaining, inst.failed_shards) == (InstanceStatus.FAILED, 0, 1)
    (alert,) = h.take_alerts()
    assert (alert.type, alert.instance_id, alert.status) == ("instance_failed", IID, "failed")
    assert [(f["shard"], f["status"]) for f in alert.failed_shards] == [(0, "timed_out")]
    assert h.take_messages() == []

    assert_second_sweep_changes_nothing(h)
    # The dead worker's message, shown again by SQS, finds the instance ended.
    assert deliver(h, message, worker="w2") is ShardOutcome.NOT_STARTED
    assert h.take_alerts() == []


def scenario_sweep_requeues_a_lost_lease_only_after_the_delay(h: Harness) -> None:
    """An expired lease with attempts left gets a fresh message, only `requeue_after_s` late."""
    h.handlers["dies_once"] = dies_on_first_attempt
    (message,) = fire(h, handler="dies_once", retry={"max_attempts": 3}, timeout_s=60)
    with pytest.raises(Died):
        deliver(h, message, worker="w1")
    running = shard_of(h, 0)
    assert running.lease_until is not None

    for at in (running.lease_until, running.lease_until + (REQUEUE_AFTER_S - 1) * S):
        h.clock.set(at)
        assert did_nothing(do_sweep(h))
        assert h.take_messages() == []
        assert shard_of(h, 0) == running

    h.clock.set(running.lease_until + REQUEUE_AFTER_S * S)
    report = do_sweep(h)
    assert report.requeued_shards == [f"{IID}#0"]
    assert report.timed_out_shards == []
    assert h.take_messages() == [message]  # the same shard, its stored bounds
    requeued = shard_of(h, 0)  # the lease's end moved to now: expired, but freshly
    assert requeued == running.model_copy(update={"lease_until": h.clock.now()})

    # While that message waits, the next sweeps do not send it again...
    h.clock.advance((REQUEUE_AFTER_S - 1) * S)
    assert did_nothing(do_sweep(h))
    assert h.take_messages() == []
    # ... until it too could have been lost.
    h.clock.advance(S)
    assert do_sweep(h).requeued_shards == [f"{IID}#0"]
    assert h.take_messages() == [message]

    assert deliver(h, message, worker="w2") is ShardOutcome.SUCCEEDED
    shard = shard_of(h, 0)
    assert (shard.status, shard.attempt) == (ShardStatus.SUCCEEDED, 2)
    assert [(a.worker, a.outcome) for a in shard.attempts] == [("w1", "lost"), ("w2", "succeeded")]
    assert instance_of(h).status is InstanceStatus.SUCCEEDED
    assert h.take_alerts() == []
    assert_second_sweep_changes_nothing(h)


def scenario_sweep_times_out_an_instance_past_its_deadline(h: Harness) -> None:
    """Past its deadline the instance ends timed_out with one alert; no unstarted shard runs.

    Shard 0 is running (its handler sees `ctx.cancelled()`), shard 1's worker died holding a
    lease (a later sweep ends it cancelled), shard 2 never started (its delivery runs nothing).
    """
    calls: list[tuple[int, int]] = []
    seen_cancelled: list[bool] = []
    reports: list[SweepReport] = []

    def watch(ctx: ShardContext) -> None:
        calls.append((ctx.shard, ctx.attempt))
        if ctx.shard == 1:
            ctx.heartbeat()  # a renewal (the lease in the index), then the process dies
            raise Died("worker died")
        if ctx.shard == 0:
            # The sweeper runs while this handler works, after the instance's deadline.
            h.clock.set(instance_of(h).deadline)
            reports.append(do_sweep(h, requeue_after_s=1800))
            seen_cancelled.append(ctx.cancelled())

    h.handlers["watch"] = watch
    m0, m1, m2 = fire(h, shards=3, handler="watch", instance_timeout_s=600, timeout_s=60)
    deadline = instance_of(h).deadline
    assert deadline == SLOT + 3 * S + 600 * S
    with pytest.raises(Died):
        deliver(h, m1, worker="w1")

    assert deliver(h, m0, worker="w0") is ShardOutcome.CANCELLED
    (report,) = reports
    assert report.timed_out_instances == [IID]
    assert report.requeued_shards == report.timed_out_shards == report.cancelled_shards == []
    assert seen_cancelled == [True]
    inst = instance_of(h)
    assert (inst.status, inst.reason) == (InstanceStatus.TIMED_OUT, "instance_timeout")
    assert inst.finished_at == deadline
    (alert,) = h.take_alerts()
    assert (alert.type, alert.status, alert.reason) == (
        "instance_timed_out",
        "timed_out",
        "instance_timeout",
    )
    shard0 = shard_of(h, 0)
    assert (shard0.status, shard0.attempts[-1].outcome) == (ShardStatus.CANCELLED, "cancelled")

    # The unstarted shard never runs.
    assert deliver(h, m2, worker="w2") is ShardOutcome.NOT_STARTED
    assert calls == [(1, 1), (0, 1)]
    assert [s.index for s in h.services.instances.list_shards(IID)] == [0, 1]

    # The next sweep ends the dead worker's lease as cancelled, without another alert.
    report = do_sweep(h, requeue_after_s=1800)
    # nor does the dead worker's message shown again
    assert deliver(h, m1, worker="w2") is ShardOutcome.NOT_STARTED
    assert report.cancelled_shards == [f"{IID}#1"]
    assert report.timed_out_instances == report.timed_out_shards == report.requeued_shards == []
    shard1 = shard_of(h, 1)
    assert (shard1.status, shard1.lease_until) == (ShardStatus.CANCELLED, None)
    assert shard1.attempts[-1].outcome == "lost"  # the shard ends cancelled
    assert instance_of(h).status is InstanceStatus.TIMED_OUT
    assert h.take_alerts() == []
    assert h.take_messages() == []
    assert_second_sweep_changes_nothing(h)


def scenario_sweep_resumes_a_stuck_dispatch(h: Harness) -> None:
    """A dispatcher died between claim and send: after its dispatch lease the sweeper sends."""
    dying = dataclasses.replace(h.services, faults=DieAfterClaim())
    apply_tasks(
        [task("t", trigger={"rate": "15m"}, sharding={"strategy": "static", "shards": [{}, {}]})],
        h.services.tasks,
        now=SLOT - 7 * 60 * S,
    )
    h.clock.set(SLOT + 3 * S)
    with pytest.raises(Died):
        dispatch_tick(SLOT, dying)
    inst = instance_of(h)
    assert inst.status is InstanceStatus.PLANNING
    assert inst.dispatch_lease_until is not None
    assert h.take_messages() == []

    h.clock.set(inst.dispatch_lease_until - S)  # the dispatcher might still be sending
    assert did_nothing(do_sweep(h))
    assert h.take_messages() == []
    assert instance_of(h).status is InstanceStatus.PLANNING

    h.clock.set(inst.dispatch_lease_until)
    report = do_sweep(h)
    assert report.resumed == [IID]
    messages = h.take_messages()
    assert [(m.instance_id, m.shard) for m in messages] == [(IID, 0), (IID, 1)]
    assert instance_of(h).status is InstanceStatus.RUNNING
    assert_second_sweep_changes_nothing(h)

    for n, message in enumerate(messages):
        assert deliver(h, message, worker=f"w{n}") is ShardOutcome.SUCCEEDED
    assert instance_of(h).status is InstanceStatus.SUCCEEDED
    assert h.take_alerts() == []


def scenario_sweep_finalizes_an_instance_left_at_zero(h: Harness, outcome: ShardStatus) -> None:
    """The last shard's worker wrote the shard and the counter, then died before finalizing."""
    (message,) = fire(h, retry={"max_attempts": 1}, timeout_s=60)
    store = h.services.instances
    now = h.clock.now()
    lease = store.take_lease(
        IID,
        0,
        bounds=message.bounds,
        worker="w1",
        now=now,
        lease_until=now + 90 * S,
        max_attempts=1,
    )
    assert lease.taken
    h.clock.advance(5 * S)
    error = None if outcome is ShardStatus.SUCCEEDED else "boom"
    done = finish(lease.shard.attempts[-1], h.clock.now(), outcome, error)
    result = store.complete_shard(IID, 0, status=outcome, attempt=done, error=error)
    assert result.remaining == 0
    assert instance_of(h).status is InstanceStatus.RUNNING  # (the worker died here)

    report = do_sweep(h)
    assert report.finalized == [IID]
    expected = (
        InstanceStatus.SUCCEEDED if outcome is ShardStatus.SUCCEEDED else InstanceStatus.FAILED
    )
    inst = instance_of(h)
    assert (inst.status, inst.remaining) == (expected, 0)
    alerts = h.take_alerts()
    if expected is InstanceStatus.SUCCEEDED:
        assert alerts == []
    else:
        assert [(a.type, a.instance_id) for a in alerts] == [("instance_failed", IID)]
    assert_second_sweep_changes_nothing(h)


def scenario_dead_letters(h: Harness, first_state: str) -> None:
    """Shard messages past maxReceiveCount: each ends its shard failed exactly once.

    Shard 0 is dead-lettered while the others are open (`first_state`: no record yet, pending
    after a released attempt, or running under a worker that is still alive); shard 1 succeeds;
    shard 2, never started, is dead-lettered last and finalizes the instance.
    """
    m0, m1, m2 = fire(
        h, shards=3, params={"fail": [0]}, retry={"max_attempts": 2, "backoff_s": 0}, timeout_s=60
    )
    store = h.services.instances
    live: ShardRecord | None = None
    if first_state == "pending":
        with pytest.raises(RetryShardError):
            deliver(h, m0, worker="w1")
        assert shard_of(h, 0).status is ShardStatus.PENDING
    elif first_state == "running":
        now = h.clock.now()
        lease = store.take_lease(
            IID,
            0,
            bounds=m0.bounds,
            worker="w1",
            now=now,
            lease_until=now + 90 * S,
            max_attempts=2,
        )
        assert lease.taken
        live = lease.shard

    assert handle_dead_letter(m0.model_dump_json(), h.services) == "dead_lettered"
    shard0 = shard_of(h, 0)
    assert (shard0.status, shard0.error, shard0.lease_until) == (
        ShardStatus.FAILED,
        "dead_lettered",
        None,
    )
    inst = instance_of(h)
    assert (inst.status, inst.remaining, inst.failed_shards) == (InstanceStatus.RUNNING, 2, 1)
    (alert,) = h.take_alerts()
    assert (alert.type, alert.instance_id, alert.status, alert.reason) == (
        "shard_dead_lettered",
        IID,
        "failed",
        "dead_lettered",
    )
    assert alert.failed_shards == [{"shard": 0, "bounds": {"n": 0}, "error": "dead_lettered"}]

    # A duplicate DLQ delivery does nothing and alerts nothing.
    before = state(h)
    assert handle_dead_letter(m0.model_dump_json(), h.services) == "already_final"
    assert state(h) == before
    assert h.take_alerts() == []
    if live is not None:
        # The worker still running attempt 1 cannot end the shard a second time.
        ended = finish(live.attempts[-1], h.clock.now(), ShardStatus.SUCCEEDED, None)
        with pytest.raises(StaleAttemptError):
            store.complete_shard(IID, 0, status=ShardStatus.SUCCEEDED, attempt=ended)
        assert state(h) == before
    # A late delivery of the shard's message runs nothing.
    assert deliver(h, m0, worker="w9") is ShardOutcome.DUPLICATE

    assert deliver(h, m1, worker="w2") is ShardOutcome.SUCCEEDED
    assert h.take_alerts() == []

    # The last shard, dead-lettered without a record, ends the instance: one more shard alert,
    # and the instance's own alert.
    assert handle_dead_letter(m2.model_dump_json(), h.services) == "dead_lettered"
    shard2 = shard_of(h, 2)
    assert (shard2.status, shard2.error, shard2.attempt) == (ShardStatus.FAILED, "dead_lettered", 0)
    assert shard2.bounds == {"n": 2}
    inst = instance_of(h)
    assert (inst.status, inst.remaining, inst.failed_shards) == (InstanceStatus.FAILED, 0, 2)
    alerts = h.take_alerts()
    assert sorted(a.type for a in alerts) == ["instance_failed", "shard_dead_lettered"]
    (instance_alert,) = [a for a in alerts if a.type == "instance_failed"]
    assert sorted(f["shard"] for f in instance_alert.failed_shards) == [0, 2]
    before = state(h)
    assert handle_dead_letter(m2.model_dump_json(), h.services) == "already_final"
    assert state(h) == before
    assert h.take_alerts() == []


def scenario_malformed_dead_letter(h: Harness) -> None:
    """A DLQ body that names no shard is alerted once and dropped."""
    body = '{"instance_id": "t@x", "shard": "not-a-number"'
    assert handle_dead_letter(body, h.services) == "malformed"
    (alert,) = h.take_alerts()
    assert (alert.type, alert.status) == ("malformed_dead_letter", "dropped")
    assert alert.reason is not None and "not-a-number" in alert.reason
    assert h.services.instances.list_instances() == []


# -- 1. fencing ---------------------------------------------------------------------------------


def test_a_stalled_attempt_is_fenced_out_after_a_takeover(h: Harness) -> None:
    scenario_fencing(h)
    store = cast("MemoryInstanceStore", h.services.instances)
    assert set(store.effect_writes) == {"effect#a", "effect#b"}  # the zombie's claim left nothing
    # The zombie's refused heartbeat did not extend its message's visibility either.
    assert cast("MemoryShardQueue", h.services.queue).visibility == {}


def test_a_zombie_that_fails_after_the_takeover_neither_releases_nor_retries(h: Harness) -> None:
    """Attempt 1 fails after attempt 2 took over: its release is refused, nothing is retried."""

    def stall(ctx: ShardContext) -> None:
        if ctx.attempt == 1:
            h.clock.advance(h.services.tuning.shard_lease_s * S)
            assert deliver(h, message, worker="w2", receipt="rh-2") is ShardOutcome.SUCCEEDED
            raise RuntimeError("zombie failure after the takeover")

    h.handlers["stall"] = stall
    (message,) = fire(h, handler="stall", timeout_s=60, retry={"max_attempts": 3})
    assert deliver(h, message, worker="w1", receipt="rh-1") is ShardOutcome.STALE
    inst = instance_of(h)
    assert (inst.status, inst.remaining, inst.failed_shards) == (InstanceStatus.SUCCEEDED, 0, 0)
    shard = shard_of(h, 0)
    assert (shard.status, shard.attempt) == (ShardStatus.SUCCEEDED, 2)
    assert [(a.worker, a.outcome) for a in shard.attempts] == [("w1", "lost"), ("w2", "succeeded")]
    assert h.take_alerts() == []


# -- 3. retries with backoff --------------------------------------------------------------------


@pytest.mark.parametrize("backoff_s", [30, 0])
def test_a_failed_attempt_hides_its_message_for_the_backoff_then_the_last_one_fails(
    h: Harness, backoff_s: int
) -> None:
    (message,) = fire(
        h, params={"fail": True}, retry={"max_attempts": 3, "backoff_s": backoff_s}, timeout_s=60
    )
    queue = cast("MemoryShardQueue", h.services.queue)
    for attempt in (1, 2):
        with pytest.raises(RetryShardError, match="noop asked to fail shard 0"):
            deliver(h, message, worker=f"w{attempt}", receipt=f"rh-{attempt}")
        assert queue.visibility[f"rh-{attempt}"] == backoff_delay_s(attempt, backoff_s)
        shard = shard_of(h, 0)
        assert (shard.status, shard.attempt, shard.lease_until) == (
            ShardStatus.PENDING,
            attempt,
            None,
        )
        assert instance_of(h).remaining == 1
    assert queue.visibility == {
        "rh-1": backoff_delay_s(1, backoff_s),
        "rh-2": backoff_delay_s(2, backoff_s),
    }
    if backoff_s:
        assert (queue.visibility["rh-1"], queue.visibility["rh-2"]) == (30, 60)  # doubling

    assert deliver(h, message, worker="w3", receipt="rh-3") is ShardOutcome.FAILED
    assert "rh-3" not in queue.visibility  # the last attempt is acknowledged, not delayed
    shard = shard_of(h, 0)
    assert (shard.status, shard.attempt) == (ShardStatus.FAILED, 3)
    assert [a.outcome for a in shard.attempts] == ["failed", "failed", "failed"]
    inst = instance_of(h)
    assert (inst.status, inst.remaining, inst.failed_shards) == (InstanceStatus.FAILED, 0, 1)
    assert [a.type for a in h.take_alerts()] == ["instance_failed"]


def test_backoff_doubles_per_attempt_and_is_capped() -> None:
    assert [backoff_delay_s(n, 30) for n in (1, 2, 3, 4)] == [30, 60, 120, 240]
    assert backoff_delay_s(30, 30) == 43_200
    assert backoff_delay_s(1, 0) == 0


# -- 4. the sweeper ----------------------------------------------------------------------------


def test_sweep_times_out_an_expired_lease_with_no_attempts_left(h: Harness) -> None:
    scenario_sweep_times_out_an_exhausted_lease(h)


def test_sweep_requeues_an_expired_lease_with_attempts_left_only_after_the_delay(
    h: Harness,
) -> None:
    scenario_sweep_requeues_a_lost_lease_only_after_the_delay(h)


def test_sweep_leaves_a_lease_renewed_between_its_read_and_its_move(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The holder renews the lease after the sweeper read it expired: no message, no move."""
    h.handlers["dies_once"] = dies_on_first_attempt
    (message,) = fire(h, handler="dies_once", retry={"max_attempts": 3}, timeout_s=60)
    with pytest.raises(Died):
        deliver(h, message, worker="w1")
    running = shard_of(h, 0)
    assert running.lease_until is not None
    h.clock.set(running.lease_until + REQUEUE_AFTER_S * S)
    store = h.services.instances
    read = store.expired_leases(h.clock.now())
    assert [s.index for s in read] == [0]
    renewed = h.clock.now() + 60 * S  # the holder was alive after all: it heartbeats
    store.extend_lease(IID, 0, attempt=1, until=renewed)
    monkeypatch.setattr(store, "expired_leases", lambda now: read)  # the sweeper's stale read

    report = do_sweep(h)

    assert report.requeued_shards == []
    assert h.take_messages() == []
    assert shard_of(h, 0).lease_until == renewed


def test_sweep_times_out_an_instance_past_its_deadline(h: Harness) -> None:
    scenario_sweep_times_out_an_instance_past_its_deadline(h)


def test_sweep_resumes_an_instance_stuck_in_planning(h: Harness) -> None:
    scenario_sweep_resumes_a_stuck_dispatch(h)


@pytest.mark.parametrize("outcome", [ShardStatus.FAILED, ShardStatus.SUCCEEDED])
def test_sweep_finalizes_an_open_instance_at_zero(h: Harness, outcome: ShardStatus) -> None:
    scenario_sweep_finalizes_an_instance_left_at_zero(h, outcome)


def test_a_sweep_of_a_quiet_store_does_nothing(h: Harness) -> None:
    assert did_nothing(do_sweep(h))
    fire(h, shards=2)
    assert did_nothing(do_sweep(h))
    assert h.take_messages() == []


# -- 5. the dead-letter handler -----------------------------------------------------------------


@pytest.mark.parametrize("first_state", ["unstarted", "pending", "running"])
def test_dead_lettered_shards_end_failed_once_and_alert_once(h: Harness, first_state: str) -> None:
    scenario_dead_letters(h, first_state)


def test_a_malformed_dead_letter_is_alerted_once(h: Harness) -> None:
    scenario_malformed_dead_letter(h)


# -- 6. cancellation ----------------------------------------------------------------------------


def test_cancel_stops_a_running_handler_and_no_unstarted_shard_runs(h: Harness) -> None:
    started, go = threading.Event(), threading.Event()
    calls: list[int] = []
    saw_cancel: list[bool] = []

    def careful(ctx: ShardContext) -> Mapping[str, Any] | None:
        calls.append(ctx.shard)
        started.set()
        if not go.wait(30):
            raise TimeoutError("never released")
        for _ in range(200):  # between units of work, as handlers should
            if ctx.cancelled():
                saw_cancel.append(True)
                return None
            threading.Event().wait(0.01)
        return None

    h.handlers["careful"] = careful
    m0, m1, m2 = fire(h, shards=3, handler="careful")
    outcome: list[ShardOutcome | BaseException] = []

    def run() -> None:
        try:
            outcome.append(deliver(h, m0, worker="w0"))
        except BaseException as exc:  # surfaced by the assertions below
            outcome.append(exc)

    thread = threading.Thread(target=run, name="shard-0")
    thread.start()
    try:
        assert started.wait(30)
        h.clock.advance(10 * S)
        ended = cancel_instance(IID, h.services, reason="operator said so")
    finally:
        go.set()
        thread.join(30)
    assert (ended.status, ended.reason, ended.finished_at) == (
        InstanceStatus.CANCELLED,
        "operator said so",
        h.clock.now(),
    )
    assert outcome == [ShardOutcome.CANCELLED]
    assert saw_cancel == [True]
    shard0 = shard_of(h, 0)
    assert (shard0.status, shard0.attempts[-1].outcome) == (ShardStatus.CANCELLED, "cancelled")

    assert deliver(h, m1, worker="w1") is ShardOutcome.NOT_STARTED
    assert deliver(h, m2, worker="w2") is ShardOutcome.NOT_STARTED
    assert calls == [0]
    assert [s.index for s in h.services.instances.list_shards(IID)] == [0]
    inst = instance_of(h)
    assert (inst.status, inst.reason) == (InstanceStatus.CANCELLED, "operator said so")
    assert h.take_alerts() == []  # an operator's cancel is not a failure

    before = state(h)
    with pytest.raises(InstanceConflictError, match=r"already ended \(cancelled\)"):
        cancel_instance(IID, h.services)
    assert state(h) == before
    assert did_nothing(do_sweep(h))


def test_cancelling_a_finished_or_unknown_instance_is_refused(h: Harness) -> None:
    (message,) = fire(h)
    assert deliver(h, message) is ShardOutcome.SUCCEEDED
    before = state(h)
    with pytest.raises(InstanceConflictError, match=r"already ended \(succeeded\)"):
        cancel_instance(IID, h.services)
    assert state(h) == before
    with pytest.raises(InstanceNotFoundError):
        cancel_instance("t@2031-01-01T00:00Z", h.services)
    with pytest.raises(InstanceNotFoundError):
        cancel_instance("no-at-sign", h.services)


# -- 2. heartbeats against the per-attempt timeout ----------------------------------------------


def test_a_heartbeating_handler_may_run_past_its_timeout(h: Harness) -> None:
    """Runs on the main thread, where the per-attempt timer applies (as in a Lambda)."""
    assert threading.current_thread() is threading.main_thread()
    (message,) = fire(
        h, params={"seconds": 2.5, "heartbeat_s": 0.2}, timeout_s=1, retry={"max_attempts": 1}
    )
    assert deliver(h, message) is ShardOutcome.SUCCEEDED
    (attempt,) = shard_of(h, 0).attempts
    assert attempt.outcome == "succeeded"
