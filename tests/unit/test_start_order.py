"""The order of a shard's start steps (docs/design.md, section 11, the start path): the tenant's
slot before the rollout's count, so a start refused a slot never uses the minute; a copy of a
running shard met at a full cap is acknowledged, not deferred into a second live copy."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from iotsched import bootstrap
from iotsched.clock import ManualClock
from iotsched.core.quotas import TenantQuotas
from iotsched.core.shard_message import ShardMessage
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.execution.batch import ShardBatch
from iotsched.services.execution.outcomes import Delivery, PendingShard, ShardOutcome
from iotsched.services.scheduling.send import shard_messages
from iotsched.services.scheduling.tick import dispatch_tick
from iotsched.services.wiring import Wiring
from tests.support import T0, Timers, task

S = timedelta(seconds=1)
M = timedelta(minutes=1)
ID = "fleet@2026-11-29T12:00Z"


def fleet(clock: ManualClock, *, shards: int, **fields: Any) -> tuple[Wiring, list[ShardMessage]]:
    services = bootstrap.build_memory(clock=clock)
    apply_tasks(
        [
            task(
                "fleet",
                tenant="acme",
                sharding={"strategy": "static", "shards": [{"n": i} for i in range(shards)]},
                **fields,
            )
        ],
        services.tasks,
        now=T0 - timedelta(hours=1),
    )
    assert services.tasks.set_task_quotas("fleet", TenantQuotas(max_concurrent_shards=1))
    assert dispatch_tick(T0, services).claimed == [ID]
    instance = services.instances.get_instance(ID)
    assert instance is not None
    return services, shard_messages(instance)


def deliver(services: Wiring, message: ShardMessage, worker: str = "w") -> object:
    batch = ShardBatch(services, worker=worker, timer=Timers())
    outcome = batch.run(Delivery(message.model_dump_json(), f"rh-{worker}-{message.shard}"))
    batch.commit()
    return outcome


def hold_the_only_slot(services: Wiring, clock: ManualClock) -> int:
    now = clock.now()
    slot = services.instances.take_tenant_slot(
        "acme", "someone-else", cap=1, now=now, until=now + timedelta(minutes=10)
    )
    assert slot is not None
    return slot


def test_a_start_refused_a_slot_is_not_counted_against_the_rollout_minute() -> None:
    """Rate 3 a minute, cap 1: two shards meet a full cap and wait; once the slot is free, all
    three start in the same minute (the refused starts used none of it)."""
    clock = ManualClock(T0 + 5 * S)
    services, messages = fleet(clock, shards=3, rollout={"max_shards_per_minute": 3})
    assert len(messages) == 3  # the minute's whole rate is sent at once
    slot = hold_the_only_slot(services, clock)
    assert deliver(services, messages[1]) is ShardOutcome.DEFERRED
    assert deliver(services, messages[2]) is ShardOutcome.DEFERRED
    services.instances.release_tenant_slot("acme", slot, "someone-else")
    clock.advance(10 * S)  # the same minute
    started = [deliver(services, m) for m in messages]
    assert all(isinstance(o, PendingShard) for o in started), started


def test_a_duplicate_of_a_running_shard_is_acknowledged_while_its_tenant_is_at_its_cap() -> None:
    """Shard 0 runs under a live lease holding the tenant's only slot; a copy of its message
    (a visibility timeout's redelivery) is acknowledged, and no second copy is sent."""
    clock = ManualClock(T0 + 5 * S)
    services, messages = fleet(clock, shards=2)
    hold_the_only_slot(services, clock)  # the running attempt's slot
    now = clock.now()
    lease = services.instances.take_lease(
        ID,
        0,
        bounds=messages[0].bounds,
        worker="runner",
        now=now,
        lease_until=now + timedelta(minutes=1),
        max_attempts=3,
    )
    assert lease.taken
    queue = services.queue
    sent_before = len(queue.sent)  # type: ignore[attr-defined]
    assert deliver(services, messages[0], worker="copy") is ShardOutcome.DUPLICATE
    assert len(queue.sent) == sent_before  # type: ignore[attr-defined]
    # a shard that never started still waits for the slot
    assert deliver(services, messages[1], worker="copy") is ShardOutcome.DEFERRED
    assert len(queue.sent) == sent_before + 1  # type: ignore[attr-defined]


def test_a_finished_shard_met_at_a_full_cap_is_acknowledged() -> None:
    clock = ManualClock(T0 + 5 * S)
    services, messages = fleet(clock, shards=2)
    assert isinstance(deliver(services, messages[0]), PendingShard)
    hold_the_only_slot(services, clock)
    assert deliver(services, messages[0], worker="copy") is ShardOutcome.DUPLICATE


def test_a_copy_whose_seat_passed_takes_a_new_one() -> None:
    """A deferred copy holds its seat's minute only: one that comes back after it (late, or a
    retry's body) takes a new seat, so no minute is ever spent twice."""
    clock = ManualClock(T0 + 5 * S)
    services, messages = fleet(clock, shards=2, rollout={"max_shards_per_minute": 1})
    services.tasks.set_task_quotas("fleet", None)
    stale = messages[1].model_copy(update={"seat": T0})  # its minute, T0, long passed
    clock.set(T0 + 3 * M)
    assert isinstance(deliver(services, stale), PendingShard)  # a new seat: T0+3
    gate = f"instance#{ID}"
    assert services.instances.take_seat(gate, minute=T0 + 3 * M, limit=1) == T0 + 4 * M
