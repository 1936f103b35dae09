"""Failover at the template's defaults: a short lease renewed while the attempt lives, an expired
lease taken over through a fresh message the sweeper sends, on the memory fakes and a manual
clock (renewals are held and stepped by hand, as the worker's thread would run them)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, cast

import pytest

from iotsched import bootstrap
from iotsched.adapters.memory.queues import MemoryShardQueue
from iotsched.clock import ManualClock
from iotsched.context import ShardContext
from iotsched.core.attempt_record import AttemptOutcome
from iotsched.core.shard_message import ShardMessage
from iotsched.core.shard_record import (
    ShardRecord,
    ShardStatus,
)
from iotsched.ports.shards import StaleAttemptError
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.execution.batch import run_shard
from iotsched.services.execution.outcomes import (
    Delivery,
    ShardOutcome,
)
from iotsched.services.execution.schedules import HeldRenewals
from iotsched.services.execution.sweep import sweep
from iotsched.services.scheduling.tick import dispatch_tick
from iotsched.services.wiring import Tuning, Wiring
from tests.support import T0, task

S = timedelta(seconds=1)
LEASE_S = 20  # the default


class Died(BaseException):
    """The worker process died here: nothing after this point runs."""


def setup(
    handler: Callable[[ShardContext], Any], **fields: Any
) -> tuple[Wiring, ManualClock, ShardMessage]:
    clock = ManualClock(T0 + S)
    services = bootstrap.build_memory(clock=clock, handlers={"h": handler})
    fields.setdefault("timeout_s", 300)  # the template's worker timeout
    apply_tasks([task("t", handler="h", **fields)], services.tasks, now=T0 - timedelta(hours=1))
    dispatch_tick(T0, services)
    (message,) = queue(services).sent
    return services, clock, message


def queue(services: Wiring) -> MemoryShardQueue:
    return cast("MemoryShardQueue", services.queue)


def held(services: Wiring) -> HeldRenewals:
    return cast("HeldRenewals", services.renewals)


def shard(services: Wiring, message: ShardMessage) -> ShardRecord:
    (found,) = services.instances.list_shards(message.instance_id)
    return found


def deliver(
    services: Wiring, message: ShardMessage, receipt: str, worker: str, count: int = 1
) -> ShardOutcome:
    return run_shard(
        Delivery(message.model_dump_json(), receipt, receive_count=count),
        services,
        worker=worker,
    )


def test_the_lease_is_short_and_renewal_keeps_a_long_shard_s_lease() -> None:
    """A 200 s shard that never heartbeats keeps a 20 s lease by its renewals: no duplicate
    takes it, no sweep sends anything, it ends as attempt 1."""
    seen: list[tuple[ShardOutcome, dict[str, Any]]] = []

    def long(ctx: ShardContext) -> None:
        first = shard(services, message)
        assert first.lease_until == clock.now() + LEASE_S * S  # not timeout_s + margin
        for _ in range(30):  # 30 x 7 s = 210 s, a renewal every third of the lease or so
            clock.advance(7 * S)
            held(services).step()
            assert deliver(services, message, "copy", "w2") is ShardOutcome.DUPLICATE
            report = sweep(services)
            seen.append((ShardOutcome.DUPLICATE, report.as_dict()))

    services, clock, message = setup(long)
    assert deliver(services, message, "rh-1", "w1") is ShardOutcome.SUCCEEDED
    assert all(not r["requeued_shards"] for _, r in seen)
    assert len(queue(services).sent) == 1  # the dispatcher's only
    record = shard(services, message)
    assert (record.status, record.attempt) == (ShardStatus.SUCCEEDED, 1)
    assert held(services).live() == []  # renewing stopped with the attempt
    assert queue(services).visibility == {}  # the message's visibility was never touched


def test_a_dead_worker_s_shard_is_taken_over_through_the_sweeper_s_fresh_message() -> None:
    """The worker dies; its lease ends 20 s after its last renewal; the next sweep sends a fresh
    message at once (not a visibility timeout later) whose worker takes over as attempt 2; the
    original message, shown again after its visibility timeout, is acknowledged and runs
    nothing."""
    runs: list[int] = []

    def dies_first(ctx: ShardContext) -> None:
        runs.append(ctx.attempt)
        if ctx.attempt == 1:
            clock.advance(5 * S)
            held(services).step()  # one renewal, then the process dies
            raise Died("SIGKILL")

    services, clock, message = setup(dies_first, retry={"max_attempts": 3})
    with pytest.raises(Died):
        deliver(services, message, "rh-1", "w1")
    died = clock.now()
    lease_end = shard(services, message).lease_until
    assert lease_end == died + LEASE_S * S  # the renewal just before the death

    clock.set(lease_end - S)  # a live lease: nothing
    assert sweep(services).requeued_shards == []
    clock.set(lease_end + 30 * S)  # the next minute's sweep
    report = sweep(services)
    assert report.requeued_shards == [f"{message.instance_id}#0"]
    fresh = queue(services).sent[-1]
    assert fresh == message
    # the lease's end moved to the sweep (still expired), fenced on what it read: a sweep
    # overlapping this one, having read the old end, sends nothing
    assert shard(services, message).lease_until == clock.now()

    clock.advance(S)
    assert deliver(services, fresh, "fresh-1", "w2") is ShardOutcome.SUCCEEDED
    record = shard(services, message)
    assert (record.status, record.attempt) == (ShardStatus.SUCCEEDED, 2)
    assert [(a.worker, a.outcome) for a in record.attempts] == [
        ("w1", AttemptOutcome.LOST),
        ("w2", AttemptOutcome.SUCCEEDED),
    ]
    # failover: from the death to attempt 2's start, a lease and part of a sweep period
    assert record.attempts[1].started_at - died == (LEASE_S + 30 + 1) * S

    clock.advance(1800 * S)  # the original reappears (receive count 2): acknowledged, no run
    # (the instance has ended with its only shard: nothing starts)
    assert deliver(services, message, "rh-1b", "w3", count=2) is ShardOutcome.NOT_STARTED
    assert runs == [1, 2]
    assert len(queue(services).sent) == 2


def test_the_original_message_finds_the_taken_over_attempt_running_and_is_acknowledged() -> None:
    """Attempt 2 (the sweeper's message) still runs when the original comes back: acknowledged
    without running or waiting (if attempt 2 dies, the sweeper sends again)."""
    state: dict[str, Any] = {}

    def handler(ctx: ShardContext) -> None:
        if ctx.attempt == 1:
            ctx.heartbeat()  # a renewal (the lease in the index), then the process dies
            raise Died("SIGKILL")
        for _ in range(9):  # a long attempt 2, heartbeating
            clock.advance(200 * S)
            ctx.heartbeat()
        state["original"] = deliver(services, message, "rh-1b", "w3", count=2)

    services, clock, message = setup(handler)
    with pytest.raises(Died):
        deliver(services, message, "rh-1", "w1")
    clock.advance((LEASE_S + 1) * S)
    sweep(services)
    assert deliver(services, queue(services).sent[-1], "fresh", "w2") is ShardOutcome.SUCCEEDED
    assert state["original"] is ShardOutcome.DUPLICATE
    assert queue(services).visibility == {}  # neither hidden again nor failed: deleted


def test_a_takeover_by_the_sweeper_counts_as_an_attempt_up_to_max_attempts() -> None:
    """Each fresh message's worker is the next attempt; when the last one dies too, the sweep
    ends the shard timed_out and sends nothing more. Fresh messages are new messages (receive
    count 1), so the DLQ's count never grows with takeovers."""

    def always_dies(ctx: ShardContext) -> None:
        ctx.heartbeat()  # a renewal (the lease in the index), then the process dies
        raise Died("SIGKILL")

    services, clock, message = setup(always_dies, retry={"max_attempts": 2})
    with pytest.raises(Died):
        deliver(services, message, "rh-1", "w1")
    clock.advance((LEASE_S + 1) * S)
    assert len(sweep(services).requeued_shards) == 1
    with pytest.raises(Died):
        deliver(services, queue(services).sent[-1], "fresh", "w2", count=1)
    assert shard(services, message).attempt == 2
    clock.advance((LEASE_S + 1) * S)
    assert sweep(services).timed_out_shards == []  # a last attempt gets one more lease period
    clock.advance(LEASE_S * S)
    report = sweep(services)
    assert (report.requeued_shards, report.timed_out_shards) == ([], [f"{message.instance_id}#0"])
    record = shard(services, message)
    assert (record.status, record.attempt) == (ShardStatus.TIMED_OUT, 2)
    assert len(queue(services).sent) == 2


def test_a_last_attempt_renewing_late_keeps_its_lease() -> None:
    """A worker on its last attempt that is alive but could not renew for longer than a lease
    (DynamoDB throttled, the process paused) is not given up at once: no takeover can follow a
    last attempt, so the sweep waits one more lease period, and a renewal in that time keeps it."""
    reports: list[dict[str, Any]] = []

    def late(ctx: ShardContext) -> None:
        first = shard(services, message)
        assert first.lease_until is not None
        clock.set(first.lease_until + (LEASE_S - 1) * S)  # no renewal for almost two leases
        reports.append(sweep(services).as_dict())
        held(services).step()  # the late renewal lands
        assert shard(services, message).status is ShardStatus.RUNNING
        clock.advance(2 * S)
        reports.append(sweep(services).as_dict())

    services, clock, message = setup(late, retry={"max_attempts": 1})
    assert deliver(services, message, "rh-1", "w1") is ShardOutcome.SUCCEEDED
    assert [r["timed_out_shards"] for r in reports] == [[], []]
    record = shard(services, message)
    assert (record.status, record.attempt) == (ShardStatus.SUCCEEDED, 1)


def test_a_zombie_s_renewal_is_refused_and_stops_its_handler() -> None:
    """Attempt 1 hangs past its lease (no renewal ran); attempt 2 takes over; attempt 1's next
    renewal is refused: its handler (on the main thread, as on Lambda) is interrupted at once,
    and its delivery ends stale, writing nothing."""
    state: dict[str, Any] = {}

    def hangs(ctx: ShardContext) -> None:
        if ctx.attempt == 2:
            return
        clock.advance((LEASE_S + 1) * S)  # hung: the lease ended
        state["takeover"] = deliver(services, message, "rh-2", "w2")
        (renewal,) = held(services).live()
        held(services).step()  # the renewal thread wakes up: refused
        state["lost"] = renewal.lost
        deadline = time.monotonic() + 5
        try:
            while time.monotonic() < deadline:  # a handler busy in its own loop
                time.sleep(0.01)
        except StaleAttemptError:
            state["interrupted"] = True
            raise
        state["interrupted"] = False

    assert threading.current_thread() is threading.main_thread()
    services, clock, message = setup(hangs)
    assert deliver(services, message, "rh-1", "w1") is ShardOutcome.STALE
    assert state == {"takeover": ShardOutcome.SUCCEEDED, "lost": True, "interrupted": True}
    record = shard(services, message)
    assert (record.status, record.attempt, record.owner) == (ShardStatus.SUCCEEDED, 2, "w2")


def test_off_the_main_thread_a_zombie_sees_cancelled_and_its_heartbeat_is_refused() -> None:
    state: dict[str, Any] = {}

    def hangs(ctx: ShardContext) -> None:
        if ctx.attempt == 2:
            return
        clock.advance((LEASE_S + 1) * S)
        taken = services.instances.take_lease(  # attempt 2's worker (still running)
            message.instance_id,
            0,
            bounds=message.bounds,
            worker="w2",
            now=clock.now(),
            lease_until=clock.now() + LEASE_S * S,
            max_attempts=3,
        )
        assert taken.taken
        state["before"] = ctx.cancelled()
        held(services).step()
        state["after"] = ctx.cancelled()
        try:
            ctx.heartbeat()
        except StaleAttemptError:
            state["heartbeat"] = "refused"

    services, clock, message = setup(hangs)
    outcome: list[ShardOutcome] = []
    worker = threading.Thread(target=lambda: outcome.append(deliver(services, message, "r", "w1")))
    worker.start()
    worker.join(10)
    assert outcome == [ShardOutcome.STALE]
    assert state == {"before": False, "after": True, "heartbeat": "refused"}
    record = shard(services, message)
    assert (record.status, record.attempt, record.owner) == (ShardStatus.RUNNING, 2, "w2")


class FlakyExtend:
    """Wraps the store: `extend_lease` fails (or hangs) for the next `fail` calls."""

    def __init__(self, store: Any, fail: int, how: str) -> None:
        self._store = store
        self.fail = fail
        self.how = how
        self.release = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def extend_lease(self, *args: Any, **kwargs: Any) -> None:
        if self.fail > 0:
            self.fail -= 1
            if self.how == "hang":
                self.release.wait(10)
            raise ConnectionError("throttled")
        self._store.extend_lease(*args, **kwargs)


@pytest.mark.parametrize("how", ["raise", "hang"])
def test_a_renewal_that_fails_transiently_is_retried_within_the_lease(how: str) -> None:
    """A throttled or hung renewal does not lose an alive worker's lease: the renewal gives up
    within its own timeout and tries again a tenth of the lease later."""
    state: dict[str, Any] = {}

    def slow(ctx: ShardContext) -> None:
        (renewal,) = held(services).live()
        assert (renewal.interval_s, renewal.retry_s, renewal.call_timeout_s) == (
            LEASE_S / 3,
            LEASE_S / 10,
            LEASE_S / 4,
        )
        renewal.call_timeout_s = 0.2  # keep the hung call's wait short here
        clock.advance(7 * S)
        flaky = FlakyExtend(services.instances, fail=2, how=how)
        object.__setattr__(services, "instances", flaky)
        try:
            delays = [renewal.step() for _ in range(3)]
        finally:
            flaky.release.set()
            object.__setattr__(services, "instances", flaky._store)
        state["delays"] = delays
        state["until"] = renewal.until
        state["failures"] = renewal.failures

    services, clock, message = setup(slow)
    assert deliver(services, message, "rh-1", "w1") is ShardOutcome.SUCCEEDED
    assert state["delays"] == [LEASE_S / 10, LEASE_S / 10, LEASE_S / 3]
    assert state["failures"] == 2
    assert state["until"] == T0 + S + (7 + LEASE_S) * S


def test_renewals_stop_extending_a_hung_handler_past_its_timeout_and_margin() -> None:
    """A handler that the timer cannot interrupt and that never heartbeats keeps its lease only
    up to timeout_s + lease_margin_s after its start, as a hung worker must lose it."""
    state: dict[str, datetime | None] = {}

    def hung(ctx: ShardContext) -> None:
        started = clock.now()
        for _ in range(20):
            clock.advance(6 * S)
            held(services).step()
        state["until"] = shard(services, message).lease_until
        state["cap"] = started + (60 + services.tuning.lease_margin_s) * S

    services, clock, message = setup(hung, timeout_s=60)
    outcome: list[ShardOutcome] = []
    worker = threading.Thread(target=lambda: outcome.append(deliver(services, message, "r", "w1")))
    worker.start()
    worker.join(10)
    assert state["until"] == state["cap"]


def test_a_sweep_whose_move_landed_but_whose_answer_was_lost_still_sends() -> None:
    """The lease's move is a conditional write on the end read: its retry after a lost answer
    is refused (the end moved: by itself). The sweep reads the shard back and sends."""

    def dies(ctx: ShardContext) -> None:
        ctx.heartbeat()  # a renewal (the lease in the index), then the process dies
        raise Died("SIGKILL")

    services, clock, message = setup(dies)
    with pytest.raises(Died):
        deliver(services, message, "rh-1", "w1")
    clock.advance((LEASE_S + 1) * S)
    store = services.instances

    class LostAnswer:
        def __getattr__(self, name: str) -> Any:
            return getattr(store, name)

        def extend_lease(self, *args: Any, **kwargs: Any) -> None:
            store.extend_lease(*args, **kwargs)  # landed
            raise StaleAttemptError("the retry found the end moved")

    object.__setattr__(services, "instances", LostAnswer())
    assert len(sweep(services).requeued_shards) == 1
    # a sweep that lost the race to another writer (a renewal) sends nothing
    object.__setattr__(services, "instances", store)
    clock.advance(S)

    class Renewed:
        def __getattr__(self, name: str) -> Any:
            return getattr(store, name)

        def extend_lease(self, *args: Any, **kwargs: Any) -> None:
            store.extend_lease(
                message.instance_id, 0, attempt=1, until=clock.now() + LEASE_S * S
            )  # the holder renewed meanwhile
            raise StaleAttemptError("renewed")

    object.__setattr__(services, "instances", Renewed())
    assert sweep(services).requeued_shards == []
    assert len(queue(services).sent) == 2


def test_the_shard_lease_is_a_setting_with_a_default() -> None:
    from iotsched.settings import Settings, SettingsError

    env = {
        "IOTSCHED_TABLE": "t",
        "IOTSCHED_SHARD_QUEUE_URL": "q",
        "IOTSCHED_ALERT_TOPIC_ARN": "a",
    }
    assert Settings.from_env(env).shard_lease_s == LEASE_S
    assert Settings.from_env({**env, "IOTSCHED_SHARD_LEASE_S": "6"}).shard_lease_s == 6
    with pytest.raises(SettingsError, match="IOTSCHED_SHARD_LEASE_S must be at least 1"):
        Settings.from_env({**env, "IOTSCHED_SHARD_LEASE_S": "0"})
    with pytest.raises(SettingsError, match="IOTSCHED_SHARD_LEASE_S must be an integer"):
        Settings.from_env({**env, "IOTSCHED_SHARD_LEASE_S": "x"})
    assert Tuning().shard_lease_s == LEASE_S
    built = bootstrap.build(
        Settings(table="t", shard_queue_url="q", alert_topic_arn="a", shard_lease_s=6),
        handlers={},
    )
    assert built.tuning.shard_lease_s == 6
