"""The tick's batched path (services/scheduling/tick.py) on the in-memory services.

A tick with many due tasks claims them in batches, sends their messages in shared batches and
marks and advances them in batches. It must come to exactly what the one-by-one path comes to:
the same instances, messages, alerts and task clocks, and the same crash and duplicate
semantics (docs/guarantees.md, "One tick"); only the number of requests differs.
"""

from __future__ import annotations

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
from iotsched.core.instance_record import InstanceStatus
from iotsched.core.shard_message import ShardMessage
from iotsched.core.task_definition import TaskDefinition
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.scheduling.report import TickReport
from iotsched.services.scheduling.tick import (
    PAGE_TASKS,
    dispatch_tick,
)
from iotsched.services.wiring import Wiring
from tests.support import T0, task

M = timedelta(minutes=1)
ONE_BY_ONE = 10**9  # `batch_from` that keeps every tick on the one-by-one path


def services_at(clock: ManualClock) -> Wiring:
    return bootstrap.build_memory(clock=clock)


def sent(services: Wiring) -> list[ShardMessage]:
    return cast("MemoryShardQueue", services.queue).sent


def mixed_tasks() -> list[TaskDefinition]:
    """Tasks applied at T0 - 10 min, ticked at T0: every kind of firing a tick can make."""
    tasks = [task(f"one-{n:02d}", trigger={"rate": "5m"}) for n in range(12)]
    tasks += [
        task(
            "static3",
            trigger={"rate": "5m"},
            sharding={"strategy": "static", "shards": [{"r": "a"}, {"r": "b"}, {"r": "c"}]},
        ),
        task(
            "catchup",
            trigger={"rate": "1m"},
            misfire={"policy": "catch_up", "max_catch_up": 2, "grace_s": 30},
        ),
        task("skipper", trigger={"rate": "1m"}, misfire={"policy": "skip", "grace_s": 30}),
        task("fireonce", trigger={"rate": "1m"}, misfire={"policy": "fire_once", "grace_s": 30}),
        task("discard", trigger={"rate": "5m"}, blocking={"policy": "discard"}),
        task("serial", trigger={"rate": "5m"}, blocking={"policy": "serial", "max_queued": 1}),
        task("groups", trigger={"rate": "5m"}, sharding={"strategy": "groups"}),  # no directory
        task("big", trigger={"rate": "5m"}, params={"blob": "x" * 1_100_000}),  # too large
    ]
    return tasks


def tick_mixed(batch_from: int) -> tuple[Wiring, TickReport]:
    clock = ManualClock(T0 - 10 * M)
    services = services_at(clock)
    apply_tasks(mixed_tasks(), services.tasks, now=clock.now())
    clock.set(T0 + timedelta(seconds=4))
    return services, dispatch_tick(T0 + timedelta(seconds=2), services, batch_from=batch_from)


def outcome(services: Wiring, report: TickReport) -> dict[str, Any]:
    store = cast("MemoryStore", services.instances)
    return {
        "instances": sorted(store.list_instances(limit=1000), key=lambda i: i.instance_id),
        "messages": sorted(sent(services), key=lambda m: (m.instance_id, m.shard)),
        "alerts": sorted(
            cast("MemoryAlertSink", services.alerts).published, key=lambda a: a.alert_id
        ),
        "clocks": {t.task_id: (t.next_fire, t.last_slot) for t in services.tasks.list_tasks()},
        "claimed": sorted(report.claimed),
        "skipped": sorted(report.skipped),
        "failed": sorted(report.failed),
        "counts": (report.due_tasks, report.duplicate_claims, report.messages_sent),
    }


def test_a_batched_tick_comes_to_what_the_one_by_one_tick_comes_to() -> None:
    batched_services, batched = tick_mixed(batch_from=1)
    single_services, single = tick_mixed(batch_from=ONE_BY_ONE)

    assert outcome(batched_services, batched) == outcome(single_services, single)
    # ... and the tick did fire every kind: a check that the scenario covers what it claims.
    # 12 one-shard, static3, catchup's two catch-ups and its on-time slot, skipper's and
    # fireonce's on-time slot, discard, serial, and big (claimed, then failed to send).
    assert len(batched.claimed) == 12 + 1 + 3 + 1 + 1 + 1 + 1 + 1
    assert "groups@2026-11-29T12:00Z" in batched.failed
    assert "big@2026-11-29T12:00Z" in batched.failed
    assert any(i.startswith("skipper@") for i in batched.skipped)
    assert any(i.startswith("catchup@") for i in batched.skipped)
    alerts = cast("MemoryAlertSink", batched_services.alerts).published
    assert {a.type for a in alerts} >= {"catch_up_dropped"}
    statuses = {i.instance_id: i.status for i in batched_services.instances.list_instances()}
    assert statuses["one-00@2026-11-29T12:00Z"] is InstanceStatus.RUNNING
    assert statuses["big@2026-11-29T12:00Z"] is InstanceStatus.FAILED
    # The message too large for the queue was refused before anything went out; the page
    # then sent instance by instance, as the one-by-one tick does.
    assert batched.send_requests == single.send_requests


def apply_due(services: Wiring, clock: ManualClock, count: int, **fields: Any) -> list[str]:
    ids = [f"t{n:04d}" for n in range(count)]
    fields.setdefault("trigger", {"rate": "15m"})
    apply_tasks([task(i, **fields) for i in ids], services.tasks, now=T0 - 7 * M)
    clock.set(T0 + timedelta(seconds=3))
    return [f"{i}@2026-11-29T12:00Z" for i in ids]


def test_one_shard_instances_share_send_requests_and_end_running_and_advanced() -> None:
    clock = ManualClock(T0)
    services = services_at(clock)
    ids = apply_due(services, clock, 25)

    report = dispatch_tick(T0, services)

    assert sorted(report.claimed) == ids
    assert (report.messages_sent, report.send_requests) == (25, 3)
    assert {i.status for i in services.instances.list_instances(limit=100)} == {
        InstanceStatus.RUNNING
    }
    assert {t.next_fire for t in services.tasks.list_tasks()} == {T0 + 15 * M}
    assert dispatch_tick(T0 + timedelta(seconds=30), services).due_tasks == 0


def test_pages_in_flight_together_make_one_report() -> None:
    clock = ManualClock(T0)
    services = services_at(clock)
    count = 2 * PAGE_TASKS + 37
    ids = apply_due(services, clock, count)

    report = dispatch_tick(T0, services, workers=3)

    assert report.due_tasks == count
    assert sorted(report.claimed) == ids  # each once, whatever page it was in
    assert report.messages_sent == count
    assert sorted(m.instance_id for m in sent(services)) == ids
    assert services.tasks.due_tasks(T0) == []


class StaleIndex:
    """A TaskStore whose due index answers with what it returned first (eventual consistency)."""

    def __init__(self, services: Wiring) -> None:
        self._store = services.tasks
        self._due: Any = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def due_tasks(self, now: Any, *, bucket: Any = None, **_: Any) -> Any:
        if self._due is None:
            self._due = self._store.due_tasks(now, bucket=bucket)
        return self._due


def test_a_redelivered_batched_tick_claims_nothing_twice_and_sends_nothing_twice() -> None:
    clock = ManualClock(T0)
    plain = services_at(clock)
    services = bootstrap.Wiring(  # the same stores, a due index that lags
        **{**plain.__dict__, "tasks": cast("Any", StaleIndex(plain))}
    )
    ids = apply_due(services, clock, 20, sharding={"strategy": "static", "shards": [{}, {}]})

    first = dispatch_tick(T0 + timedelta(seconds=5), services)
    second = dispatch_tick(T0 + timedelta(seconds=5), services)

    assert sorted(first.claimed) == ids
    assert (second.claimed, second.duplicate_claims, second.resumed) == ([], 20, [])
    assert second.messages_sent == 0
    assert len(sent(services)) == 40


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


def test_a_batched_tick_that_dies_after_its_claims_is_resumed_by_a_later_delivery(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = ManualClock(T0)
    services = services_at(clock)
    ids = apply_due(services, clock, 12)
    die_once_on_send(services, monkeypatch)

    with pytest.raises(ConnectionError):
        dispatch_tick(T0, services)
    instances = services.instances.list_instances(limit=100)
    assert sorted(i.instance_id for i in instances) == ids
    assert {i.status for i in instances} == {InstanceStatus.PLANNING}
    assert len(services.tasks.due_tasks(T0)) == 12  # not advanced: the tasks stay due
    lease_until = instances[0].dispatch_lease_until
    assert lease_until is not None

    clock.set(lease_until - timedelta(seconds=1))  # the claimer may only be slow: wait
    early = dispatch_tick(T0, services)
    assert (early.duplicate_claims, early.resumed, early.messages_sent) == (12, [], 0)
    assert len(services.tasks.due_tasks(T0)) == 12

    clock.set(lease_until + timedelta(seconds=1))
    late = dispatch_tick(T0, services)
    assert (late.claimed, sorted(late.resumed)) == ([], ids)
    assert sorted(m.instance_id for m in sent(services)) == ids
    assert {i.status for i in services.instances.list_instances(limit=100)} == {
        InstanceStatus.RUNNING
    }
    assert services.tasks.due_tasks(T0) == []


@pytest.mark.parametrize("workers", [1, 3])
def test_a_page_that_fails_fails_the_tick_and_leaves_the_other_pages_done(
    monkeypatch: pytest.MonkeyPatch, workers: int
) -> None:
    clock = ManualClock(T0)
    services = services_at(clock)
    apply_due(services, clock, PAGE_TASKS + 10)
    die_once_on_send(services, monkeypatch)  # whichever page sends first dies

    with pytest.raises(ConnectionError):
        dispatch_tick(T0, services, workers=workers)

    statuses = [i.status for i in services.instances.list_instances(limit=1000)]
    stranded = statuses.count(InstanceStatus.PLANNING)
    assert stranded in (PAGE_TASKS, 10)  # one page's claims, unsent
    assert statuses.count(InstanceStatus.RUNNING) == PAGE_TASKS + 10 - stranded
    assert len(services.tasks.due_tasks(T0)) == stranded  # exactly those stay due
