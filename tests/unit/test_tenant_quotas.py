"""Tenant quotas on the in-memory services: a tenant over `max_concurrent_shards` has its extra
shards deferred (delayed fresh copies, on the manual clock) and every shard still succeeds,
never more than the cap running at once; tenants without quotas pay nothing."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any, cast

import pytest

from iotsched import bootstrap
from iotsched.adapters.memory.queues import (
    MemoryAlertSink,
    MemoryShardQueue,
)
from iotsched.adapters.memory.store import MemoryStore
from iotsched.clock import ManualClock
from iotsched.context import ShardContext
from iotsched.core.alert_message import Alert
from iotsched.core.instance_record import InstanceStatus
from iotsched.core.shard_message import ShardMessage
from iotsched.services.definitions.apply import apply_task_file as apply_file
from iotsched.services.execution.batch import run_shard
from iotsched.services.execution.outcomes import (
    Delivery,
    ShardOutcome,
)
from iotsched.services.execution.sweep import sweep
from iotsched.services.operations.on_demand import run_now
from iotsched.services.scheduling.tick import dispatch_tick
from iotsched.services.tenancy import pacing
from iotsched.services.tenancy.slots import SLOT_RETRY_S, seat_of
from iotsched.services.wiring import Wiring
from iotsched.tasklib import registry
from tests.support import T0

M = timedelta(minutes=1)
S = timedelta(seconds=1)


class Running:
    """A handler that counts how many of its shards run at once and holds each until let go."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = 0
        self.most = 0
        self.entered = threading.Semaphore(0)
        self.go = threading.Event()

    def __call__(self, ctx: ShardContext) -> Mapping[str, Any] | None:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
        self.entered.release()
        self.go.wait(timeout=30)
        with self.lock:
            self.now -= 1
        return None


def _file(cap: int | None) -> dict[str, Any]:
    tenant: dict[str, Any] = {"name": "acme"}
    if cap is not None:
        tenant["quotas"] = {"max_concurrent_shards": cap}
    return {
        "tenants": [tenant],
        "tasks": [
            {
                "id": "sweep-acme",
                "tenant": "acme",
                "handler": "hold",
                "trigger": {"cron": "0 * * * *", "timezone": "UTC"},
                "sharding": {"strategy": "id_range", "id_min": 0, "id_max": 60, "shards": 6},
            },
            {
                "id": "sweep-globex",
                "tenant": "globex",
                "handler": "hold",
                "trigger": {"cron": "0 * * * *", "timezone": "UTC"},
                "sharding": {"strategy": "id_range", "id_min": 0, "id_max": 60, "shards": 3},
            },
        ],
    }


def _services(cap: int | None) -> tuple[Wiring, ManualClock, Running]:
    clock = ManualClock(T0 - M)
    running = Running()
    services = bootstrap.build_memory(clock=clock, handlers={**registry(), "hold": running})
    apply_file(
        _file(cap),
        store=lambda: services.tasks,
        handlers=services.handlers,
        now=clock.now,
        actor="test",
    )
    return services, clock, running


def _deliver_all(
    services: Wiring, messages: list[ShardMessage], outcomes: list[ShardOutcome] | None = None
) -> list[ShardOutcome]:
    """Each message to a worker of its own, all at once; each outcome added to `outcomes` as
    its worker returns."""
    outcomes = [] if outcomes is None else outcomes
    lock = threading.Lock()

    def worker(n: int, message: ShardMessage) -> None:
        outcome = run_shard(
            Delivery(body=message.model_dump_json(), receipt_handle=f"r{n}"),
            services,
            worker=f"w{n}",
        )
        with lock:
            outcomes.append(outcome)

    threads = [threading.Thread(target=worker, args=(n, m)) for n, m in enumerate(messages)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return outcomes


def _wait_for(condition: Callable[[], bool]) -> None:
    """Until `condition` holds (threads progressing), at most 30 s."""
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, "no progress"
        time.sleep(0.005)


def test_a_tenant_over_its_cap_has_its_extra_shards_deferred_and_all_succeed() -> None:
    services, clock, running = _services(cap=2)
    queue = cast("MemoryShardQueue", services.queue)
    store = cast("MemoryStore", services.instances)
    dispatch_tick(T0, services)
    clock.set(T0)
    # A window is sent (the cap and a spare); the other three wait unsent in the instance.
    acme = [m for m in queue.sent if m.instance_id.startswith("sweep-acme")]
    assert len(acme) == pacing.window_of(2) == 3
    # Two run and hold their slots; the third finds the cap held and is deferred.
    outcomes: list[ShardOutcome] = []
    done = threading.Thread(target=_deliver_all, args=(services, acme, outcomes))
    done.start()
    for _ in range(2):
        assert running.entered.acquire(timeout=30)
    _wait_for(lambda: len(outcomes) == 1)  # the third returned while two hold the slots
    assert outcomes == [ShardOutcome.DEFERRED]
    assert len(store.tenant_slots("acme", clock.now())) == 2
    deferred = queue.sent[-1]  # its copy, delayed
    assert deferred.instance_id == acme[0].instance_id
    assert SLOT_RETRY_S <= queue.delays[-1] <= 2 * SLOT_RETRY_S
    sent = len(queue.sent)
    running.go.set()
    done.join(timeout=60)
    assert Counter(outcomes) == Counter({ShardOutcome.SUCCEEDED: 2, ShardOutcome.DEFERRED: 1})
    assert store.tenant_slots("acme", clock.now()) == {}  # released at the attempts' end
    # Their commits refilled the window: two more sent, the deferred one still out.
    refilled = queue.sent[sent:]
    assert len(refilled) == 2 and deferred.shard not in {m.shard for m in refilled}
    # Every copy is delivered once its delay passed, one at a time; the rest follow as the
    # shards end, and every shard succeeds.
    undelivered = sent - 1
    while (instance := store.get_instance(deferred.instance_id)) and not instance.status.final:
        clock.advance(2 * SLOT_RETRY_S * S)
        fresh, undelivered = queue.sent[undelivered:], len(queue.sent)
        assert fresh, "no message left to deliver"
        assert set(_deliver_all(services, fresh)) <= {ShardOutcome.SUCCEEDED, ShardOutcome.DEFERRED}
    assert running.most == 2
    assert instance is not None and instance.status is InstanceStatus.SUCCEEDED
    assert instance.tenant_cap == 2


def test_a_shard_deferred_while_the_cap_is_held_waits_for_a_free_slot() -> None:
    services, clock, running = _services(cap=1)
    queue = cast("MemoryShardQueue", services.queue)
    dispatch_tick(T0, services)
    clock.set(T0)
    first, second = [m for m in queue.sent if m.instance_id.startswith("sweep-acme")][:2]
    holder = threading.Thread(target=lambda: _deliver_all(services, [first]))
    holder.start()
    assert running.entered.acquire(timeout=30)
    sent = len(queue.sent)
    assert _deliver_all(services, [second]) == [ShardOutcome.DEFERRED]
    # Again and again while the slot is held: each a fresh copy, none toward the DLQ.
    clock.advance(2 * SLOT_RETRY_S * S)
    assert _deliver_all(services, [queue.sent[sent]]) == [ShardOutcome.DEFERRED]
    running.go.set()
    holder.join(timeout=60)
    clock.advance(2 * SLOT_RETRY_S * S)
    assert _deliver_all(services, [queue.sent[-1]]) == [ShardOutcome.SUCCEEDED]
    assert running.most == 1


def test_the_quota_alert_is_raised_once_per_tenant_and_window() -> None:
    services, clock, running = _services(cap=1)
    sink = cast("MemoryAlertSink", services.alerts)
    published: list[str] = []
    real = sink.publish

    def spy(alert: Alert) -> None:
        published.append(alert.alert_id)
        real(alert)

    sink.publish = spy  # type: ignore[method-assign]
    queue = cast("MemoryShardQueue", services.queue)
    dispatch_tick(T0, services)
    clock.set(T0)
    first, *rest = [m for m in queue.sent if m.instance_id.startswith("sweep-acme")]
    holder = threading.Thread(target=lambda: _deliver_all(services, [first]))
    holder.start()
    assert running.entered.acquire(timeout=30)
    for message in rest:  # five deferrals, one after the other
        assert _deliver_all(services, [message]) == [ShardOutcome.DEFERRED]
    (alert,) = [a for a in sink.published if a.type == "quota_exceeded"]
    assert published == [alert.alert_id]  # one record written, not one per deferral
    assert alert.tenant == "acme" and alert.quota == "max_concurrent_shards"
    assert alert.limit == 1 and alert.window_start == T0 and alert.window_s == 3600
    assert "acme" in (alert.reason or "") and alert.instance_id == first.instance_id
    # The next window raises the next one (the slot held by then: the first holder's lease has
    # ended, so another holds it).
    clock.set(T0 + timedelta(hours=1))
    store = cast("MemoryStore", services.instances)
    assert store.take_tenant_slot("acme", "x", cap=1, now=clock.now(), until=clock.now() + M) == 0
    assert _deliver_all(services, [rest[0]]) == [ShardOutcome.DEFERRED]
    assert len([a for a in sink.published if a.type == "quota_exceeded"]) == 2
    running.go.set()
    holder.join(timeout=60)


def test_a_dead_workers_slot_comes_back_after_its_lease() -> None:
    services, clock, running = _services(cap=1)
    store = cast("MemoryStore", services.instances)
    dispatch_tick(T0, services)
    clock.set(T0)
    # A worker took the slot and died (never released): the slot's lease is the attempt's
    # longest life without a heartbeat.
    assert store.take_tenant_slot("acme", "dead", cap=1, now=T0, until=T0 + 330 * S) == 0
    queue = cast("MemoryShardQueue", services.queue)
    message = next(m for m in queue.sent if m.instance_id.startswith("sweep-acme"))
    running.go.set()
    assert _deliver_all(services, [message]) == [ShardOutcome.DEFERRED]
    clock.set(T0 + 330 * S)
    assert _deliver_all(services, [message]) == [ShardOutcome.SUCCEEDED]


def test_a_heartbeating_shard_keeps_its_slot_past_its_first_lease() -> None:
    clock = ManualClock(T0 - M)
    beats = threading.Event()
    beaten = threading.Event()

    def long(ctx: ShardContext) -> Mapping[str, Any] | None:
        beats.wait(timeout=30)
        ctx.heartbeat()
        beaten.set()
        ctx_done.wait(timeout=30)
        return None

    ctx_done = threading.Event()
    services = bootstrap.build_memory(clock=clock, handlers={**registry(), "long": long})
    file = _file(1)
    file["tasks"] = [{**file["tasks"][0], "handler": "long", "timeout_s": 60}]
    apply_file(file, store=lambda: services.tasks, handlers=services.handlers, now=clock.now)
    store = cast("MemoryStore", services.instances)
    queue = cast("MemoryShardQueue", services.queue)
    dispatch_tick(T0, services)
    clock.set(T0)
    first, second = [m for m in queue.sent if m.instance_id.startswith("sweep-acme")][:2]
    holder = threading.Thread(target=lambda: _deliver_all(services, [first]))
    holder.start()
    _wait_for(lambda: len(store.tenant_slots("acme", clock.now())) == 1)
    # Past the slot's first lease (timeout 60 s and the margin), after a heartbeat: still held.
    clock.set(T0 + 80 * S)
    beats.set()
    assert beaten.wait(timeout=30)
    clock.set(T0 + 100 * S)
    assert store.tenant_slots("acme", clock.now()) != {}
    assert _deliver_all(services, [second]) == [ShardOutcome.DEFERRED]
    ctx_done.set()
    holder.join(timeout=60)
    assert store.tenant_slots("acme", clock.now()) == {}


@pytest.mark.parametrize("cap", [None, 3])
def test_a_tenant_without_the_cap_touches_no_slot(cap: int | None) -> None:
    services, clock, running = _services(cap=cap)
    queue = cast("MemoryShardQueue", services.queue)
    store = cast("MemoryStore", services.instances)
    taken: list[str] = []
    real = store.take_tenant_slot

    def spy(tenant: str, holder: str, **kw: Any) -> int | None:
        taken.append(tenant)
        return real(tenant, holder, **kw)

    store.take_tenant_slot = spy  # type: ignore[method-assign]
    dispatch_tick(T0, services)
    clock.set(T0)
    running.go.set()
    globex = [m for m in queue.sent if m.instance_id.startswith("sweep-globex")]
    assert Counter(_deliver_all(services, globex)) == Counter({ShardOutcome.SUCCEEDED: 3})
    instance = services.instances.get_instance("sweep-globex@2026-11-29T12:00Z")
    assert instance is not None and instance.tenant_cap is None
    assert "globex" not in taken
    acme = [m for m in queue.sent if m.instance_id.startswith("sweep-acme")]
    _deliver_all(services, acme[:1])
    assert taken == ([] if cap is None else ["acme"])


def test_quotas_are_stamped_on_the_tenants_tasks_and_kept_by_a_file_without_them() -> None:
    services, clock, _running = _services(cap=4)
    task = services.tasks.get_task("sweep-acme")
    assert task is not None and task.quotas is not None
    assert task.quotas.max_concurrent_shards == 4
    other = services.tasks.get_task("sweep-globex")
    assert other is not None and other.quotas is None
    # The same tasks in a file with no `tenants:`: the stored quotas stay.
    file = _file(None)
    del file["tenants"]
    apply_file(
        file, store=lambda: services.tasks, handlers=services.handlers, now=clock.now, actor="t"
    )
    kept = services.tasks.get_task("sweep-acme")
    assert kept is not None and kept.quotas == task.quotas
    # A changed cap is a new version of the task, its audit naming the change.
    file = _file(2)
    apply_file(
        file, store=lambda: services.tasks, handlers=services.handlers, now=clock.now, actor="t"
    )
    changed = services.tasks.get_task("sweep-acme")
    assert changed is not None and changed.quotas is not None
    assert changed.quotas.max_concurrent_shards == 2
    assert changed.version == task.version + 1


def _rate_services(rate: int) -> tuple[Wiring, ManualClock]:
    clock = ManualClock(T0)
    services = bootstrap.build_memory(clock=clock)
    apply_file(
        {
            "tenants": [{"name": "acme", "quotas": {"max_instances_per_minute": rate}}],
            "tasks": [
                {"id": "probe", "tenant": "acme", "handler": "noop", "trigger": {"rate": "1h"}},
                {"id": "other", "tenant": "globex", "handler": "noop", "trigger": {"rate": "1h"}},
            ],
        },
        store=lambda: services.tasks,
        handlers=services.handlers,
        now=clock.now,
        actor="test",
    )
    return services, clock


def test_an_instance_over_the_tenants_minute_waits_with_a_record_and_starts_later() -> None:
    services, clock = _rate_services(2)
    queue = cast("MemoryShardQueue", services.queue)
    sink = cast("MemoryAlertSink", services.alerts)
    runs = [run_now("probe", services, request_id=f"r{n}")[0] for n in range(5)]
    sent = {m.instance_id for m in queue.sent}
    assert len(sent) == 2  # the minute's two
    waiting = [services.instances.get_instance(r.instance_id) for r in runs]
    held = [i for i in waiting if i is not None and i.instance_id not in sent]
    assert len(held) == 3
    for instance in held:
        assert instance.status is InstanceStatus.PLANNING and instance.sent == 0
        assert instance.waiting is not None
        assert "max_instances_per_minute" in instance.waiting and "acme" in instance.waiting
        assert instance.dispatch_lease_until is not None
        assert instance.dispatch_lease_until > T0 + M - S
    # Another tenant is not held by acme's minute.
    other, _ = run_now("other", services)
    assert other.waiting is None and other.instance_id in {m.instance_id for m in queue.sent}
    (alert,) = [a for a in sink.published if a.type == "quota_exceeded"]
    assert alert.quota == "max_instances_per_minute" and alert.limit == 2
    # The sweeper resumes the waiting dispatches in the minutes that allow them: two, then one.
    clock.set(T0 + 2 * M)
    sweep(services)
    assert len({m.instance_id for m in queue.sent} - {other.instance_id}) == 4
    clock.set(T0 + 3 * M + 59 * S)  # the last one's lease: the next minute and its own second
    sweep(services)
    assert {m.instance_id for m in queue.sent} >= {r.instance_id for r in runs}
    for run in runs:
        stored = services.instances.get_instance(run.instance_id)
        assert stored is not None and stored.waiting is None  # the record cleared once sent
        assert stored.status is InstanceStatus.RUNNING
    assert len([a for a in sink.published if a.type == "quota_exceeded"]) == 1  # one window


def test_a_waiting_instance_starves_behind_no_newer_one() -> None:
    """Rate 2 a minute, 3 new runs at the start of every minute: the backlog grows by one a
    minute, and the tenant's instances are sent in the minutes of the order they were claimed
    in, waiters first: after 8 minutes, exactly the first 16 were sent, two a minute (the
    newest wait, not the oldest)."""
    services, clock = _rate_services(2)
    queue = cast("MemoryShardQueue", services.queue)
    runs: list[str] = []
    sent_in: dict[str, int] = {}  # instance id: the minute its messages were sent

    def note(minute: int) -> None:
        for message in queue.sent:
            sent_in.setdefault(message.instance_id, minute)

    for minute in range(8):
        clock.set(T0 + minute * M)
        for n in range(3):
            runs.append(run_now("probe", services, request_id=f"m{minute}r{n}")[0].instance_id)
            note(minute)
        for second in range(0, 60, 5):  # the sweeper resumes due dispatches as it runs
            clock.set(T0 + minute * M + second * S)
            sweep(services)
            note(minute)
    assert set(sent_in) == set(runs[:16])
    assert [sent_in[r] for r in runs[:16]] == [n // 2 for n in range(16)]


def test_an_instance_with_no_seat_before_its_deadline_sells_none() -> None:
    """Rate 1, instances timing out after 2 minutes: the fourth claimed at once has no seat
    before its deadline; it waits for its deadline without taking one, so an instance claimed
    later is not queued behind a seat nobody will use."""
    clock = ManualClock(T0)
    services = bootstrap.build_memory(clock=clock)
    apply_file(
        {
            "tenants": [{"name": "acme", "quotas": {"max_instances_per_minute": 1}}],
            "tasks": [
                {
                    "id": "probe",
                    "tenant": "acme",
                    "handler": "noop",
                    "trigger": {"rate": "1h"},
                    "instance_timeout_s": 120,
                }
            ],
        },
        store=lambda: services.tasks,
        handlers=services.handlers,
        now=clock.now,
        actor="test",
    )
    runs = [run_now("probe", services, request_id=f"r{n}")[0] for n in range(4)]
    late = services.instances.get_instance(runs[3].instance_id)
    assert late is not None and late.waiting is not None and "deadline" in late.waiting
    assert late.dispatch_lease_until == late.deadline
    seats = [
        seat_of(i.waiting)
        for i in (services.instances.get_instance(r.instance_id) for r in runs[1:3])
        if i
    ]
    assert seats == [T0 + M, T0 + 2 * M]
    # the gate sold T0..T0+2 only: a claim in T0+3 is sent at once
    clock.set(T0 + 3 * M)
    later, _ = run_now("probe", services, request_id="later")
    assert later.waiting is None
    assert later.instance_id in {
        m.instance_id for m in cast("MemoryShardQueue", services.queue).sent
    }
