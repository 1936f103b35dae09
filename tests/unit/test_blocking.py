"""Blocking policies end to end on the in-memory services: a long instance overlaps the next slots."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, cast

from iotsched import bootstrap
from iotsched.adapters.memory.queues import (
    MemoryAlertSink,
    MemoryShardQueue,
)
from iotsched.clock import ManualClock
from iotsched.core.instance_record import InstanceStatus
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.execution.batch import run_shard
from iotsched.services.execution.outcomes import (
    Delivery,
    ShardOutcome,
)
from iotsched.services.scheduling.tick import dispatch_tick
from iotsched.services.wiring import Wiring
from tests.support import T0, task

M = timedelta(minutes=1)
SLOTS = [T0 + n * M for n in range(4)]  # a task every minute; the first instance runs long


def setup(policy: str, **blocking: Any) -> tuple[Wiring, ManualClock]:
    clock = ManualClock(T0)
    services = bootstrap.build_memory(clock=clock)
    definition = task(
        "t",
        trigger={"rate": "1m"},
        blocking={"policy": policy, **blocking},
        misfire={"grace_s": 30},
    )
    apply_tasks([definition], services.tasks, now=T0 - M)
    return services, clock


def tick_all(services: Wiring, clock: ManualClock, slots: list[Any]) -> dict[str, list[str]]:
    """Tick each slot in turn; nothing runs a shard in between (the first instance is long)."""
    merged: dict[str, list[str]] = {"claimed": [], "skipped": [], "queued": [], "covered": []}
    for slot in slots:
        clock.set(slot + timedelta(seconds=5))
        report = dispatch_tick(slot, services)
        for key in merged:
            merged[key] += getattr(report, key)
    return merged


def run_pending(services: Wiring) -> list[ShardOutcome]:
    queue = cast("MemoryShardQueue", services.queue)
    outcomes = []
    while queue.sent:
        message = queue.sent.pop(0)
        outcomes.append(
            run_shard(
                Delivery(body=message.model_dump_json(), receipt_handle="rh"), services, worker="w"
            )
        )
    return outcomes


def status(services: Wiring, slot: Any) -> InstanceStatus:
    found = services.instances.get_instance(f"t@{slot:%Y-%m-%dT%H:%MZ}")
    assert found is not None
    return found.status


def test_discard_records_the_blocked_firings_skipped_naming_the_holder() -> None:
    services, clock = setup("discard")
    merged = tick_all(services, clock, SLOTS[:3])
    first = "t@2026-11-29T12:00Z"
    assert merged["claimed"] == [first]
    assert len(merged["skipped"]) == 2
    skipped = services.instances.get_instance(merged["skipped"][0])
    assert skipped is not None and skipped.reason == f"blocked by {first}"
    run_pending(services)
    assert status(services, SLOTS[0]) is InstanceStatus.SUCCEEDED
    # the hold is released: the next slot runs
    assert tick_all(services, clock, [SLOTS[3]])["claimed"] == ["t@2026-11-29T12:03Z"]


def test_serial_with_max_queued_one_queues_one_and_skips_one_then_runs_it() -> None:
    services, clock = setup("serial", max_queued=1)
    merged = tick_all(services, clock, SLOTS[:3])
    assert merged["claimed"] == ["t@2026-11-29T12:00Z"]
    assert merged["queued"] == ["t@2026-11-29T12:01Z"]
    assert merged["skipped"] == ["t@2026-11-29T12:02Z"]
    assert status(services, SLOTS[1]) is InstanceStatus.QUEUED
    overflow = services.instances.get_instance("t@2026-11-29T12:02Z")
    assert overflow is not None and overflow.reason is not None
    assert overflow.reason.startswith("queue_full")
    alerts = cast("MemoryAlertSink", services.alerts).published
    assert [(a.type, a.instance_id) for a in alerts] == [("queue_overflow", overflow.instance_id)]
    # the queued instance sends nothing while the holder runs: never two at once ...
    queue = cast("MemoryShardQueue", services.queue)
    assert [m.instance_id for m in queue.sent] == ["t@2026-11-29T12:00Z"]
    message = queue.sent.pop(0)
    delivery = Delivery(body=message.model_dump_json(), receipt_handle="rh")
    assert run_shard(delivery, services, worker="w") is ShardOutcome.SUCCEEDED
    # ... and the holder's end starts it, in order
    assert [m.instance_id for m in queue.sent] == ["t@2026-11-29T12:01Z"]
    run_pending(services)
    assert status(services, SLOTS[0]) is InstanceStatus.SUCCEEDED
    assert status(services, SLOTS[1]) is InstanceStatus.SUCCEEDED
    held = services.tasks.get_task("t")
    assert held is not None and (held.active, held.queue) == (None, [])


def test_cover_cancels_the_running_instance_and_starts_the_new_one() -> None:
    services, clock = setup("cover")
    tick_all(services, clock, SLOTS[:1])
    merged = tick_all(services, clock, SLOTS[1:2])
    assert merged["covered"] == ["t@2026-11-29T12:00Z"]
    assert merged["claimed"] == ["t@2026-11-29T12:01Z"]
    old = services.instances.get_instance("t@2026-11-29T12:00Z")
    assert old is not None and old.status is InstanceStatus.CANCELLED
    assert old.reason == "covered by t@2026-11-29T12:01Z"
    outcomes = run_pending(services)
    assert outcomes == [ShardOutcome.NOT_STARTED, ShardOutcome.SUCCEEDED]
    assert status(services, SLOTS[1]) is InstanceStatus.SUCCEEDED


def test_parallel_runs_every_firing() -> None:
    services, clock = setup("parallel")
    merged = tick_all(services, clock, SLOTS[:3])
    assert len(merged["claimed"]) == 3 and merged["skipped"] == []
    run_pending(services)
    assert all(status(services, s) is InstanceStatus.SUCCEEDED for s in SLOTS[:3])


def test_a_queued_instance_cancelled_while_waiting_passes_the_hold_on() -> None:
    from iotsched.services.operations.actions import cancel_instance

    services, clock = setup("serial", max_queued=2)
    tick_all(services, clock, SLOTS[:3])
    cancel_instance("t@2026-11-29T12:01Z", services)
    run_pending(services)
    assert status(services, SLOTS[0]) is InstanceStatus.SUCCEEDED
    assert status(services, SLOTS[1]) is InstanceStatus.CANCELLED
    assert status(services, SLOTS[2]) is InstanceStatus.SUCCEEDED
