"""Use-cases end to end on the in-memory fakes with a manual clock: tick, claim, lease, finalize."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from datetime import UTC, date, datetime, timedelta
from typing import Any, cast

import pytest
from pydantic import ValidationError

from iotsched import bootstrap
from iotsched.adapters.memory.queues import (
    MemoryAlertSink,
    MemoryShardQueue,
)
from iotsched.adapters.memory.tasks import MemoryTaskStore
from iotsched.clock import ManualClock
from iotsched.context import Handler, ShardContext
from iotsched.core.decisions import Firing
from iotsched.core.instance_record import (
    InstanceRecord,
    InstanceStatus,
    TriggerKind,
)
from iotsched.core.shard_message import ShardMessage
from iotsched.core.shard_record import ShardStatus
from iotsched.core.task_record import TaskRecord
from iotsched.ports.shards import StaleAttemptError
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.execution.batch import run_shard
from iotsched.services.execution.completion import finalize
from iotsched.services.execution.outcomes import (
    Delivery,
    RetryShardError,
    ShardOutcome,
)
from iotsched.services.scheduling.build import build_instance
from iotsched.services.scheduling.tick import dispatch_tick
from iotsched.services.wiring import Wiring
from iotsched.tasklib import registry
from tests.support import T0, task

SLOT = T0  # 12:00Z, on the grid of every rate used below
SLOT_ID = "t@2026-11-29T12:00Z"


# -- helpers ------------------------------------------------------------------------------------


def make_services(
    clock: ManualClock, handlers: Mapping[str, Handler] | None = None, **tuning: int
) -> Wiring:
    services = bootstrap.build_memory(clock=clock, handlers={**registry(), **(handlers or {})})
    if tuning:
        services = dataclasses.replace(
            services, tuning=dataclasses.replace(services.tuning, **tuning)
        )
    return services


def sent(services: Wiring) -> list[ShardMessage]:
    return cast("MemoryShardQueue", services.queue).sent


def alerts(services: Wiring) -> list[Any]:
    return cast("MemoryAlertSink", services.alerts).published


def setup_task(services: Wiring, clock: ManualClock, **fields: Any) -> None:
    """Apply task `t` a few minutes before SLOT, so that SLOT is its next fire time."""
    fields.setdefault("trigger", {"rate": "15m"})
    apply_tasks([task("t", **fields)], services.tasks, now=SLOT - timedelta(minutes=7))
    record = services.tasks.get_task("t")
    assert record is not None
    assert record.next_fire == SLOT
    clock.set(SLOT + timedelta(seconds=3))


def deliver(
    services: Wiring, message: ShardMessage, *, worker: str = "w1", receipt: str = "rh"
) -> ShardOutcome:
    return run_shard(
        Delivery(body=message.model_dump_json(), receipt_handle=receipt), services, worker=worker
    )


def instance_of(services: Wiring, instance_id: str = SLOT_ID) -> InstanceRecord:
    found = services.instances.get_instance(instance_id)
    assert found is not None
    return found


class Counting:
    """A handler that counts its calls and runs `then(ctx)` inside each one."""

    def __init__(self, then: Callable[[ShardContext], None] | None = None) -> None:
        self.calls: list[tuple[int, int]] = []
        self.then = then

    def __call__(self, ctx: ShardContext) -> Mapping[str, Any] | None:
        self.calls.append((ctx.shard, ctx.attempt))
        if self.then is not None:
            self.then(ctx)
        return None


# -- the happy path -----------------------------------------------------------------------------


def test_tick_claims_plans_and_every_shard_succeeds(clock: ManualClock) -> None:
    def work(ctx: ShardContext) -> None:
        clock.advance(timedelta(seconds=2))

    services = make_services(clock, {"work": Counting(work)})
    setup_task(
        services,
        clock,
        handler="work",
        tenant="acme",
        sharding={"strategy": "id_range", "shards": 4, "id_max": 1000},
    )

    report = dispatch_tick(SLOT + timedelta(seconds=20), services)

    assert report.now == SLOT
    assert (report.due_tasks, report.claimed, report.duplicate_claims) == (1, [SLOT_ID], 0)
    assert (report.messages_sent, report.send_requests) == (4, 1)
    inst = instance_of(services)
    assert (inst.status, inst.remaining, inst.trigger_kind) == (
        InstanceStatus.RUNNING,
        4,
        TriggerKind.SCHEDULED,
    )
    assert [m.bounds for m in sent(services)] == list(inst.plan.all_bounds())
    advanced = services.tasks.get_task("t")
    assert advanced is not None
    assert (advanced.last_slot, advanced.next_fire) == (SLOT, SLOT + timedelta(minutes=15))

    for n, message in enumerate(sent(services)):
        assert deliver(services, message, worker=f"w{n}") is ShardOutcome.SUCCEEDED

    inst = instance_of(services)
    assert (inst.status, inst.remaining, inst.failed_shards) == (InstanceStatus.SUCCEEDED, 0, 0)
    assert inst.finished_at == clock.now()
    shards = services.instances.list_shards(SLOT_ID)
    assert [s.index for s in shards] == [0, 1, 2, 3]
    for n, shard in enumerate(shards):
        assert shard.status is ShardStatus.SUCCEEDED
        assert shard.bounds == inst.plan.bounds(n)
        (attempt,) = shard.attempts
        assert attempt.number == 1
        assert attempt.worker == f"w{n}"
        assert attempt.ended_at is not None
        assert attempt.ended_at - attempt.started_at == timedelta(seconds=2)
        assert attempt.duration_ms == 2000
        assert attempt.outcome == ShardStatus.SUCCEEDED.value
        assert attempt.error is None
    assert alerts(services) == []


def test_handler_context_carries_the_instance_not_now(clock: ManualClock) -> None:
    seen: list[ShardContext] = []
    services = make_services(clock, {"look": Counting(seen.append)})
    setup_task(
        services,
        clock,
        handler="look",
        tenant="acme",
        params={"x": 1},
        trigger={"cron": "0 * * * *", "timezone": "Asia/Shanghai"},
        sharding={"strategy": "static", "shards": [{"tenant": "acme"}]},
    )
    dispatch_tick(SLOT, services)
    deliver(services, sent(services)[0])
    (ctx,) = seen
    # 12:00Z is 20:00 in Shanghai; previous_day is the 28th there.
    assert (ctx.instance_id, ctx.task_id, ctx.tenant, ctx.shard) == (SLOT_ID, "t", "acme", 0)
    assert ctx.bounds == {"tenant": "acme"}
    assert ctx.params == {"x": 1}
    assert str(ctx.business_date) == "2026-11-28"
    assert ctx.data_interval_start == datetime.fromisoformat("2026-11-27T16:00:00+00:00")
    assert ctx.data_interval_end == datetime.fromisoformat("2026-11-28T16:00:00+00:00")
    assert ctx.attempt == 1
    # the instant its timeout interrupts it unless it heartbeats (the lease is renewed apart)
    assert ctx.deadline == clock.now() + timedelta(seconds=300)


def test_a_midnight_job_in_shanghai_fires_at_16_utc_for_the_previous_day(
    clock: ManualClock,
) -> None:
    services = make_services(clock)
    apply_tasks(
        [task("sh", trigger={"cron": "0 0 * * *", "timezone": "Asia/Shanghai"})],
        services.tasks,
        now=datetime(2026, 4, 10, 12, 0, tzinfo=UTC),
    )
    found = services.tasks.get_task("sh")
    assert found is not None and found.next_fire == datetime(2026, 4, 10, 16, 0, tzinfo=UTC)
    clock.set(datetime(2026, 4, 10, 16, 0, 30, tzinfo=UTC))
    assert dispatch_tick(clock.now(), services).claimed == ["sh@2026-04-10T16:00Z"]
    instance = services.instances.get_instance("sh@2026-04-10T16:00Z")
    assert instance is not None
    # 16:00 UTC is midnight of the 11th in Shanghai: the business date is the 10th
    assert instance.business_date == date(2026, 4, 10)
    assert instance.data_interval_start == datetime(2026, 4, 9, 16, 0, tzinfo=UTC)
    assert instance.data_interval_end == datetime(2026, 4, 10, 16, 0, tzinfo=UTC)
    (message,) = sent(services)
    assert deliver(services, message) is ShardOutcome.SUCCEEDED
    done = services.instances.get_instance(instance.instance_id)
    assert done is not None and done.status is InstanceStatus.SUCCEEDED


def test_ticks_that_come_late_claim_the_slot_once_and_advance_the_task(
    clock: ManualClock,
) -> None:
    services = make_services(clock)
    setup_task(services, clock, trigger={"rate": "1h"})
    # the slot's tick arrives 30 s late, and another 40 s after that
    clock.set(SLOT + timedelta(seconds=30))
    first = dispatch_tick(clock.now(), services)
    clock.set(SLOT + timedelta(seconds=70))
    second = dispatch_tick(clock.now(), services)
    assert (first.claimed, second.claimed) == ([SLOT_ID], [])
    (message,) = sent(services)
    assert deliver(services, message) is ShardOutcome.SUCCEEDED
    assert [i.instance_id for i in services.instances.list_instances(task_id="t")] == [SLOT_ID]
    advanced = services.tasks.get_task("t")
    assert advanced is not None
    assert (advanced.last_slot, advanced.next_fire) == (SLOT, SLOT + timedelta(hours=1))


# -- the claim ----------------------------------------------------------------------------------


class StaleIndex:
    """A TaskStore whose due-index answers with what it returned first (eventual consistency)."""

    def __init__(self, store: MemoryTaskStore) -> None:
        self._store = store
        self._due: list[TaskRecord] | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def due_tasks(self, now: datetime, *, bucket: int | None = None, **_: Any) -> list[TaskRecord]:
        if self._due is None:
            self._due = self._store.due_tasks(now, bucket=bucket)
        return self._due


def test_the_same_tick_delivered_twice_claims_once(clock: ManualClock) -> None:
    services = make_services(clock)
    services = dataclasses.replace(
        services, tasks=StaleIndex(cast("MemoryTaskStore", services.tasks))
    )
    setup_task(services, clock, sharding={"strategy": "static", "shards": [{}, {}]})

    first = dispatch_tick(SLOT + timedelta(seconds=5), services)
    second = dispatch_tick(SLOT + timedelta(seconds=5), services)

    assert (first.claimed, first.duplicate_claims) == ([SLOT_ID], 0)
    assert (second.claimed, second.duplicate_claims, second.resumed) == ([], 1, [])
    assert second.messages_sent == 0
    assert len(services.instances.list_instances(task_id="t")) == 1
    assert len(sent(services)) == 2


def test_a_redelivered_tick_after_the_task_advanced_does_nothing(
    memory_services: Wiring, clock: ManualClock
) -> None:
    services = memory_services  # the shared fixture: built-in handlers, the `clock` fixture
    setup_task(services, clock)
    dispatch_tick(SLOT, services)
    again = dispatch_tick(SLOT + timedelta(seconds=59), services)
    assert (again.due_tasks, again.claimed, again.duplicate_claims) == (0, [], 0)
    assert len(sent(services)) == 1


def die_once_on_send(services: Wiring, monkeypatch: pytest.MonkeyPatch) -> None:
    """The next `queue.send` raises, as if the dispatcher died between claim and send."""
    queue = cast("MemoryShardQueue", services.queue)
    real_send = queue.send
    failures = iter([ConnectionError("dispatcher died mid-send")])

    def send_or_die(messages: Any) -> int:
        for failure in failures:
            raise failure
        return real_send(messages)

    monkeypatch.setattr(queue, "send", send_or_die)


def test_a_dispatcher_that_dies_after_the_claim_is_resumed_by_a_later_delivery(
    clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    services = make_services(clock)
    setup_task(services, clock, sharding={"strategy": "static", "shards": [{}, {}, {}]})
    die_once_on_send(services, monkeypatch)
    with pytest.raises(ConnectionError):
        dispatch_tick(SLOT, services)
    inst = instance_of(services)
    assert inst.status is InstanceStatus.PLANNING
    assert inst.dispatch_lease_until == clock.now() + timedelta(
        seconds=services.tuning.dispatch_lease_s
    )
    record = services.tasks.get_task("t")
    assert record is not None
    assert record.next_fire == SLOT  # not advanced: the task stays due
    assert sent(services) == []

    clock.set(inst.dispatch_lease_until + timedelta(seconds=1))
    report = dispatch_tick(SLOT, services)
    assert (report.claimed, report.duplicate_claims, report.resumed) == ([], 1, [SLOT_ID])
    assert [m.shard for m in sent(services)] == [0, 1, 2]
    assert [m.bounds for m in sent(services)] == list(inst.plan.all_bounds())
    assert instance_of(services).status is InstanceStatus.RUNNING
    record = services.tasks.get_task("t")
    assert record is not None
    assert record.next_fire == SLOT + timedelta(minutes=15)

    again = dispatch_tick(SLOT, services)
    assert (again.due_tasks, again.resumed) == (0, [])
    assert len(sent(services)) == 3


def test_a_delivery_inside_the_dispatch_lease_neither_resumes_nor_strands_the_instance(
    clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Claimer dies; a duplicate arrives inside its dispatch lease, another one after it.

    The first duplicate must leave the instance alone (the claimer may only be slow). It must
    not advance the task either: that would hide the instance from every later delivery, and
    only a sweeper could then finish it, not the next delivery (docs/guarantees.md, "When things fail").
    """
    services = make_services(clock)
    setup_task(services, clock, sharding={"strategy": "static", "shards": [{}, {}]})
    die_once_on_send(services, monkeypatch)
    with pytest.raises(ConnectionError):
        dispatch_tick(SLOT, services)
    lease_until = instance_of(services).dispatch_lease_until
    assert lease_until is not None

    clock.set(lease_until - timedelta(seconds=1))
    early = dispatch_tick(SLOT, services)
    assert (early.duplicate_claims, early.resumed, early.messages_sent) == (1, [], 0)
    assert instance_of(services).status is InstanceStatus.PLANNING
    assert sent(services) == []

    clock.set(lease_until + timedelta(seconds=1))
    late = dispatch_tick(SLOT, services)
    assert late.resumed == [SLOT_ID]
    assert [m.shard for m in sent(services)] == [0, 1]
    assert instance_of(services).status is InstanceStatus.RUNNING


def test_an_instance_claimed_by_another_dispatcher_is_resumed_after_its_lease(
    clock: ManualClock,
) -> None:
    services = make_services(clock)
    setup_task(services, clock)
    record = services.tasks.get_task("t")
    assert record is not None
    other = build_instance(
        record,
        Firing(slot=SLOT, kind=TriggerKind.SCHEDULED, status=InstanceStatus.PLANNING),
        claimed_at=clock.now(),
        dispatch_lease_s=services.tuning.dispatch_lease_s,
    )
    assert services.instances.claim_instance(other) is None
    assert (
        services.instances.take_dispatch(
            SLOT_ID, now=clock.now(), until=clock.now() + timedelta(seconds=1)
        )
        is False
    )  # the claim itself holds the dispatch lease

    clock.advance(timedelta(seconds=services.tuning.dispatch_lease_s))
    report = dispatch_tick(SLOT, services)
    assert (report.duplicate_claims, report.resumed) == (1, [SLOT_ID])
    assert len(sent(services)) == 1
    assert instance_of(services).status is InstanceStatus.RUNNING


def test_an_unplannable_instance_is_recorded_failed_and_alerted(clock: ManualClock) -> None:
    services = make_services(clock)
    setup_task(services, clock, sharding={"strategy": "groups"})
    report = dispatch_tick(SLOT, services)
    assert (report.claimed, report.failed) == ([], [SLOT_ID])
    inst = instance_of(services)
    assert inst.status is InstanceStatus.FAILED
    assert inst.reason is not None
    assert inst.reason.startswith("planning_failed")
    assert sent(services) == []
    (alert,) = alerts(services)
    assert (alert.type, alert.instance_id) == ("instance_failed", SLOT_ID)


def test_an_instance_whose_messages_cannot_be_sent_ends_failed_not_stuck(
    clock: ManualClock,
) -> None:
    # given params so large that a shard message exceeds what SQS accepts
    services = make_services(clock)
    setup_task(services, clock, params={"blob": "x" * (1024 * 1024)})
    # when the tick claims it
    report = dispatch_tick(SLOT, services)
    # then the instance ends failed with the reason, alerts once, and the tick goes on
    assert report.failed == [SLOT_ID]
    inst = instance_of(services)
    assert inst.status is InstanceStatus.FAILED
    assert inst.reason is not None and inst.reason.startswith("enqueue_failed")
    assert sent(services) == []
    (alert,) = alerts(services)
    assert alert.reason == inst.reason
    assert services.tasks.get_task("t").next_fire > SLOT  # type: ignore[union-attr]


def test_missed_slots_are_recorded_skipped(clock: ManualClock) -> None:
    services = make_services(clock)
    setup_task(services, clock, misfire={"policy": "skip", "grace_s": 60})
    report = dispatch_tick(SLOT + timedelta(minutes=31), services)
    assert report.skipped == [SLOT_ID, "t@2026-11-29T12:15Z"]
    assert report.claimed == ["t@2026-11-29T12:30Z"]
    statuses = {i.instance_id: i.status for i in services.instances.list_instances(task_id="t")}
    assert statuses == {
        SLOT_ID: InstanceStatus.SKIPPED,
        "t@2026-11-29T12:15Z": InstanceStatus.SKIPPED,
        "t@2026-11-29T12:30Z": InstanceStatus.RUNNING,
    }
    assert len(sent(services)) == 1


# -- duplicate shard messages -------------------------------------------------------------------


def test_a_duplicate_message_for_a_finished_shard_runs_nothing(clock: ManualClock) -> None:
    handler = Counting()
    services = make_services(clock, {"count": handler})
    setup_task(
        services, clock, handler="count", sharding={"strategy": "static", "shards": [{}, {}]}
    )
    dispatch_tick(SLOT, services)
    message = sent(services)[0]

    assert deliver(services, message) is ShardOutcome.SUCCEEDED
    assert deliver(services, message, worker="w2") is ShardOutcome.DUPLICATE
    assert handler.calls == [(0, 1)]
    (shard, *_) = services.instances.list_shards(SLOT_ID)
    assert len(shard.attempts) == 1
    assert instance_of(services).remaining == 1


def test_a_duplicate_message_under_a_live_lease_runs_nothing(clock: ManualClock) -> None:
    outcomes: list[ShardOutcome] = []

    def redeliver(ctx: ShardContext) -> None:
        if ctx.attempt == 1:  # SQS hands the same message to a second worker meanwhile
            clock.advance(timedelta(seconds=services.tuning.shard_lease_s - 1))
            outcomes.append(deliver(services, sent(services)[0], worker="w2"))

    handler = Counting(redeliver)
    services = make_services(clock, {"count": handler})
    setup_task(services, clock, handler="count")
    dispatch_tick(SLOT, services)

    assert deliver(services, sent(services)[0]) is ShardOutcome.SUCCEEDED
    assert outcomes == [ShardOutcome.DUPLICATE]
    assert handler.calls == [(0, 1)]
    (shard,) = services.instances.list_shards(SLOT_ID)
    assert [a.worker for a in shard.attempts] == ["w1"]
    assert instance_of(services).status is InstanceStatus.SUCCEEDED


# -- failures and retries -----------------------------------------------------------------------


def test_a_failing_shard_is_retried_then_ends_failed_with_one_alert(clock: ManualClock) -> None:
    services = make_services(clock)
    setup_task(
        services,
        clock,
        tenant="acme",
        params={"fail": [1]},
        retry={"max_attempts": 3, "backoff_s": 5},
        alerts={"severity": "critical"},
        sharding={"strategy": "static", "shards": [{"r": "eu"}, {"r": "us"}]},
    )
    dispatch_tick(SLOT, services)
    ok, bad = sent(services)
    assert deliver(services, ok) is ShardOutcome.SUCCEEDED

    for attempt in (1, 2):
        with pytest.raises(RetryShardError, match="noop asked to fail shard 1"):
            deliver(services, bad, worker=f"w{attempt}")
        shard = services.instances.list_shards(SLOT_ID)[1]
        assert (shard.status, shard.attempt, shard.owner, shard.lease_until) == (
            ShardStatus.PENDING,
            attempt,
            None,
            None,
        )
        assert shard.attempts[-1].outcome == "failed"
        assert shard.attempts[-1].error == "NoopFailure: noop asked to fail shard 1"
        assert instance_of(services).remaining == 1
        assert alerts(services) == []

    assert deliver(services, bad, worker="w3") is ShardOutcome.FAILED
    shard = services.instances.list_shards(SLOT_ID)[1]
    assert shard.status is ShardStatus.FAILED
    assert [a.outcome for a in shard.attempts] == ["failed", "failed", "failed"]
    assert [a.worker for a in shard.attempts] == ["w1", "w2", "w3"]
    inst = instance_of(services)
    assert (inst.status, inst.remaining, inst.failed_shards) == (InstanceStatus.FAILED, 0, 1)

    (alert,) = alerts(services)
    assert (alert.type, alert.status, alert.severity) == ("instance_failed", "failed", "critical")
    assert (alert.task_id, alert.tenant, alert.instance_id) == ("t", "acme", SLOT_ID)
    assert alert.business_date == inst.business_date
    assert alert.failed_shards == [
        {
            "shard": 1,
            "status": "failed",
            "bounds": {"r": "us"},
            "attempts": 3,
            "error": "NoopFailure: noop asked to fail shard 1",
        }
    ]
    assert alert.attributes() == {
        "type": "instance_failed",
        "severity": "critical",
        "tenant": "acme",
        "task": "t",
        "silenced": "no",
    }

    # Finalizing again (a racing worker, a sweeper) and a late duplicate send nothing more.
    assert finalize(SLOT_ID, services) is None
    # (the instance has ended, so the late duplicate does not even take a lease)
    assert deliver(services, bad, worker="w4") is ShardOutcome.NOT_STARTED
    assert len(alerts(services)) == 1


def test_an_unknown_handler_fails_the_attempt(clock: ManualClock) -> None:
    services = make_services(clock)
    setup_task(services, clock, handler="noop", retry={"max_attempts": 1})
    dispatch_tick(SLOT, services)
    message = sent(services)[0].model_copy(update={"handler": "gone"})
    assert deliver(services, message) is ShardOutcome.FAILED
    (shard,) = services.instances.list_shards(SLOT_ID)
    assert shard.error is not None
    assert "no handler named 'gone'" in shard.error


def test_a_malformed_message_raises_so_the_batch_reports_it(clock: ManualClock) -> None:
    services = make_services(clock)
    with pytest.raises(ValidationError):
        run_shard(Delivery(body='{"instance_id": 1}', receipt_handle="rh"), services, worker="w")


def test_an_expired_last_attempt_is_ended_timed_out(clock: ManualClock) -> None:
    handler = Counting()
    services = make_services(clock, {"count": handler})
    setup_task(services, clock, handler="count", retry={"max_attempts": 1}, timeout_s=60)
    dispatch_tick(SLOT, services)
    message = sent(services)[0]
    # The only attempt's worker dies holding the lease.
    lease = services.instances.take_lease(
        SLOT_ID,
        0,
        bounds={},
        worker="dead",
        now=clock.now(),
        lease_until=clock.now() + timedelta(seconds=90),
        max_attempts=1,
    )
    assert lease.taken
    clock.advance(timedelta(seconds=91))

    assert deliver(services, message) is ShardOutcome.TIMED_OUT
    assert handler.calls == []
    (shard,) = services.instances.list_shards(SLOT_ID)
    assert shard.status is ShardStatus.TIMED_OUT
    (attempt,) = shard.attempts
    assert (attempt.worker, attempt.outcome, attempt.duration_ms) == ("dead", "lost", 91_000)
    assert instance_of(services).status is InstanceStatus.FAILED
    (alert,) = alerts(services)
    assert alert.failed_shards[0]["status"] == "timed_out"
    assert deliver(services, message) is ShardOutcome.NOT_STARTED  # the instance has ended


# -- zombies ------------------------------------------------------------------------------------


@pytest.mark.parametrize("zombie_fails", [False, True], ids=["zombie-succeeds", "zombie-fails"])
def test_a_zombie_attempt_cannot_end_the_shard(clock: ManualClock, zombie_fails: bool) -> None:
    """Attempt 1 stalls past its lease; attempt 2 takes over and finishes; attempt 1 wakes up."""
    takeover: list[ShardOutcome] = []

    def stall(ctx: ShardContext) -> None:
        if ctx.attempt == 1:
            clock.advance(timedelta(seconds=61 + services.tuning.lease_margin_s))
            takeover.append(deliver(services, sent(services)[0], worker="w2"))
            if zombie_fails:
                raise RuntimeError("zombie failure after the takeover")

    handler = Counting(stall)
    services = make_services(clock, {"stall": handler})
    setup_task(
        services,
        clock,
        handler="stall",
        timeout_s=60,
        sharding={"strategy": "static", "shards": [{}, {}]},
    )
    dispatch_tick(SLOT, services)

    assert deliver(services, sent(services)[0], worker="w1") is ShardOutcome.STALE
    assert takeover == [ShardOutcome.SUCCEEDED]
    assert handler.calls == [(0, 1), (0, 2)]
    shard = services.instances.list_shards(SLOT_ID)[0]
    assert (shard.status, shard.attempt, shard.owner) == (ShardStatus.SUCCEEDED, 2, "w2")
    first, second = shard.attempts
    # closed by the takeover: lost, ended when attempt 2 started
    assert (first.worker, first.ended_at, first.outcome) == ("w1", second.started_at, "lost")
    assert (second.worker, second.outcome) == ("w2", "succeeded")
    inst = instance_of(services)
    assert (inst.remaining, inst.failed_shards, inst.status) == (1, 0, InstanceStatus.RUNNING)


def test_a_zombie_heartbeat_stops_the_handler(clock: ManualClock) -> None:
    stopped: list[bool] = []

    def beat(ctx: ShardContext) -> None:
        if ctx.attempt == 1:
            clock.advance(timedelta(seconds=200))
            deliver(services, sent(services)[0], worker="w2")
            try:
                ctx.heartbeat()
            except StaleAttemptError:
                stopped.append(True)
                raise

    services = make_services(clock, {"beat": Counting(beat)})
    setup_task(services, clock, handler="beat", timeout_s=60)
    dispatch_tick(SLOT, services)
    assert deliver(services, sent(services)[0]) is ShardOutcome.STALE
    assert stopped == [True]
    assert instance_of(services).status is InstanceStatus.SUCCEEDED


def test_a_heartbeat_renews_the_lease_and_leaves_the_message_alone(clock: ManualClock) -> None:
    deadlines: list[datetime] = []

    def beat(ctx: ShardContext) -> None:
        clock.advance(timedelta(seconds=15))
        ctx.heartbeat()
        deadlines.append(ctx.deadline)
        clock.advance(timedelta(seconds=15))  # past the first lease, inside the renewed one
        assert deliver(services, sent(services)[0], worker="w2") is ShardOutcome.DUPLICATE

    services = make_services(clock, {"beat": Counting(beat)}, lease_margin_s=10)
    setup_task(services, clock, handler="beat", timeout_s=60)
    dispatch_tick(SLOT, services)
    started = clock.now()
    assert deliver(services, sent(services)[0], receipt="rh-1") is ShardOutcome.SUCCEEDED
    # the timeout counts again from the heartbeat
    assert deadlines == [started + timedelta(seconds=15 + 60)]
    # the function's timeout is a sixth of the visibility timeout: its message cannot come
    # back while it runs, and is not touched
    assert cast("MemoryShardQueue", services.queue).visibility == {}


def test_an_effect_is_applied_once_across_attempts(clock: ManualClock) -> None:
    applied: list[str] = []
    key = "bill#acct-7#2026-11-28"

    def bill(ctx: ShardContext) -> None:
        if ctx.once(key):
            applied.append(key)
        if ctx.attempt == 1:
            raise RuntimeError("crashed after billing")

    services = make_services(clock, {"bill": Counting(bill)})
    setup_task(services, clock, handler="bill")
    dispatch_tick(SLOT, services)
    with pytest.raises(RetryShardError):
        deliver(services, sent(services)[0])
    assert deliver(services, sent(services)[0]) is ShardOutcome.SUCCEEDED
    assert applied == [key]
    (shard,) = services.instances.list_shards(SLOT_ID)
    assert [a.keys for a in shard.attempts] == [[key], []]
    assert shard.keys_written == [key]
