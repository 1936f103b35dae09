"""A tenant's waiting line (`max_concurrent_shards`), driven through the real start path on the
in-memory services and the manual clock: a backlog of hundreds of capped shards, instances
arriving minutes apart, each shard holding its slot for a fixed time once started.

What is measured: the order shards start in against the order they came, and what waiting
costs, in store requests of the slot path and queue sends per waiting shard per minute.
"""

from __future__ import annotations

import heapq
import itertools
import zlib
from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, cast

from hypothesis import given
from hypothesis import strategies as st

from iotsched import bootstrap
from iotsched.adapters.memory.queues import MemoryShardQueue
from iotsched.adapters.memory.store import MemoryStore
from iotsched.clock import ManualClock
from iotsched.core.instance_record import InstanceStatus
from iotsched.core.shard_message import ShardMessage
from iotsched.core.waiting_line import (
    FAR_WAIT_S,
    MIN_WAIT_S,
    NEAR_WAIT_S,
    STALL_S,
    LineState,
    WaitTicket,
    in_window,
    wait_s,
)
from iotsched.services.definitions.apply import apply_task_file as apply_file
from iotsched.services.execution.outcomes import ShardOutcome
from iotsched.services.execution.reads import InstanceReads
from iotsched.services.execution.start import ShardStart
from iotsched.services.execution.sweep import sweep
from iotsched.services.operations.on_demand import run_now
from iotsched.services.tenancy import slots as quotas
from iotsched.services.wiring import Wiring
from iotsched.tasklib import registry
from tests.support import T0

S = timedelta(seconds=1)
#: The store calls a waiting shard's start makes: the tenant's slots and line, its shard.
SLOT_CALLS = (
    "take_tenant_slot",
    "tenant_line",
    "join_tenant_line",
    "serve_tenant_line",
    "get_shard",  # the duplicate check of a copy the line let in
)


class CountingStore:
    """The memory store, its slot and line calls counted."""

    def __init__(self, store: MemoryStore) -> None:
        self._store = store
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if name in SLOT_CALLS:

            def counted(*args: Any, **kwargs: Any) -> Any:
                self.calls[name] += 1
                return attr(*args, **kwargs)

            return counted
        return attr


@dataclass
class Backlog:
    """The run: when each shard first came and first started, and what waiting cost."""

    came: dict[tuple[str, int], datetime] = field(default_factory=dict)
    started: list[tuple[datetime, str, int]] = field(default_factory=list)
    deferrals: int = 0
    waiting_s: float = 0.0


def _file(cap: int, shards: int) -> dict[str, Any]:
    return {
        "tenants": [{"name": "acme", "quotas": {"max_concurrent_shards": cap}}],
        "tasks": [
            {
                "id": f"sweep-{name}",
                "tenant": "acme",
                "handler": "noop",
                "trigger": {"cron": "0 0 1 1 *", "timezone": "UTC"},
                "timeout_s": 60,
                "instance_timeout_s": 86_400,
                "sharding": {
                    "strategy": "id_range",
                    "id_min": 0,
                    "id_max": shards,
                    "shards": shards,
                },
            }
            for name in ("a", "b", "c")
        ],
    }


def _drive(*, cap: int, shards: int, arrive_every_s: int, shard_s: int) -> tuple[Backlog, int]:
    """Three instances of `shards` capped shards each, `arrive_every_s` apart; each shard holds
    its slot for about `shard_s` once started. Every message is delivered when its delay has passed.
    The run, and the store's slot and line calls."""
    clock = ManualClock(T0)
    services = bootstrap.build_memory(clock=clock, handlers=registry())
    apply_file(
        _file(cap, shards),
        store=lambda: services.tasks,
        handlers=services.handlers,
        now=clock.now,
        actor="test",
    )
    counting = CountingStore(cast("MemoryStore", services.instances))
    wired = replace(services, instances=cast("Any", counting))
    queue = cast("MemoryShardQueue", services.queue)
    start = ShardStart(wired, worker="w", reads=InstanceReads(wired))
    run = Backlog()
    order = itertools.count()
    due: list[tuple[datetime, int, ShardMessage]] = []
    ends: list[tuple[datetime, int, quotas.HeldSlot]] = []
    seen = 0

    def take_sent(now: datetime) -> None:
        nonlocal seen
        for message, delay in zip(queue.sent[seen:], queue.delays[seen:], strict=True):
            heapq.heappush(due, (now + delay * S, next(order), message))
        seen = len(queue.sent)

    arrivals = [(T0 + n * arrive_every_s * S, task) for n, task in enumerate("abc")]
    while arrivals or due or ends:
        now = min(
            [t for t, _ in arrivals[:1]] + [t for t, _, _ in due[:1]] + [t for t, _, _ in ends[:1]]
        )
        clock.set(now)
        while ends and ends[0][0] <= now:
            quotas.release_slot(heapq.heappop(ends)[2], wired)
        while arrivals and arrivals[0][0] <= now:
            run_now(f"sweep-{arrivals.pop(0)[1]}", services)
            take_sent(now)
        while due and due[0][0] <= now:
            _, _, message = heapq.heappop(due)
            key = (message.instance_id, message.shard)
            run.came.setdefault(key, now)
            held: list[quotas.HeldSlot] = []
            ready = start.before_lease(message, held)
            if ready == ShardOutcome.DEFERRED:
                run.deferrals += 1
                take_sent(now)
                continue
            assert not isinstance(ready, ShardOutcome), ready
            run.started.append((now, *key))
            # Shards of one task last between half and one and a half times `shard_s`.
            length = shard_s * (0.5 + zlib.crc32(repr(key).encode()) % 1000 / 1000)
            heapq.heappush(ends, (now + length * S, next(order), held[0]))
        assert now < T0 + timedelta(days=1), "the backlog never drained"
    for when, instance_id, shard in run.started:
        run.waiting_s += (when - run.came[(instance_id, shard)]).total_seconds()
    return run, sum(counting.calls.values())


def _displacements(run: Backlog) -> list[int]:
    """How many places each shard started from its place in the order the shards came (the
    instances minutes apart; one instance's shards in their send order)."""
    came = sorted(run.came, key=lambda k: (run.came[k], k[0], k[1]))
    rank = {key: n for n, key in enumerate(came)}
    return [abs(rank[(i, s)] - n) for n, (_, i, s) in enumerate(run.started)]


def test_waiting_shards_start_first_come_first_served_within_the_cap() -> None:
    cap = 10
    run, _ = _drive(cap=cap, shards=200, arrive_every_s=60, shard_s=10)
    assert len(run.started) == 600  # every shard started once
    assert max(_displacements(run)) <= cap
    # No newer instance's shard starts before an older one's last but the cap's worth.
    place = {
        task: [n for n, (_, i, _) in enumerate(run.started) if i.startswith(f"sweep-{task}")]
        for task in "abc"
    }
    assert max(place["a"]) < min(place["b"]) + cap
    assert max(place["b"]) < min(place["c"]) + cap


def test_waiting_costs_at_most_one_request_per_waiting_shard_per_minute() -> None:
    # 600 shards of about 30 s behind a cap of 5: an hour's backlog.
    cap, shard_s = 5, 30
    run, slot_calls = _drive(cap=cap, shards=200, arrive_every_s=60, shard_s=shard_s)
    waiting_minutes = run.waiting_s / 60
    # The slot path's store calls and each deferral's send, per shard-minute spent waiting.
    assert (slot_calls + run.deferrals) / waiting_minutes <= 1.0, (
        slot_calls,
        run.deferrals,
        waiting_minutes,
    )
    # ... and the order costs little of the cap: the slots stay busy.
    drained_s = (run.started[-1][0] - run.started[0][0]).total_seconds()
    assert 600 * shard_s / cap / drained_s >= 0.85


def test_a_line_that_lost_its_tickets_moves_on_once_a_slot_stays_free() -> None:
    clock = ManualClock(T0)
    store = MemoryStore()
    # Tickets 1..5 were given and their holders died before starting: nobody serves them.
    line = store.join_tenant_line("acme", now=T0, count=5)
    assert line.issued == 5 and line.served == 0
    services = bootstrap.build_memory(clock=clock, handlers=registry())
    wired = replace(services, instances=store)
    apply_file(
        _file(cap=1, shards=1),
        store=lambda: services.tasks,
        handlers=services.handlers,
        now=clock.now,
        actor="test",
    )
    instance, _ = run_now("sweep-a", wired)
    (message,) = cast("MemoryShardQueue", services.queue).sent
    # Ticket 6 with a cap of 1: outside the window; the slot is free but the line is young.
    ticketed = message.model_copy(
        update={"ticket": WaitTicket(number=7, seen_served=0, seen_at=T0)}
    )
    store.join_tenant_line("acme", now=T0)
    store.join_tenant_line("acme", now=T0)
    assert isinstance(quotas.take_slot(instance, ticketed, wired), quotas.SlotWait)
    clock.set(T0 + STALL_S * S)
    held = quotas.take_slot(instance, ticketed, wired)
    assert isinstance(held, quotas.HeldSlot)
    assert store.tenant_line("acme").served == 7


@given(
    served=st.integers(0, 10**6),
    cap=st.integers(1, 1000),
    behind=st.lists(st.integers(-1000, 10**7), min_size=2, max_size=2),
    pace=st.floats(0.01, 10_000),
)
def test_a_ticket_further_back_never_waits_less_and_every_wait_fits_a_queue_delay(
    served: int, cap: int, behind: list[int], pace: float
) -> None:
    line = LineState(issued=max(served, served + cap + max(behind)) + 1, served=served)
    near, far = sorted(max(1, served + cap + b) for b in behind)
    assert MIN_WAIT_S <= wait_s(near, line, cap, pace) <= wait_s(far, line, cap, pace)
    assert wait_s(far, line, cap, pace) <= FAR_WAIT_S
    if in_window(far, line, cap):
        assert wait_s(far, line, cap, pace) <= NEAR_WAIT_S


def _waiting_instance(clock: ManualClock) -> tuple[Wiring, str]:
    """A capped tenant's 3-shard instance (instance timeout 60 s) whose shards all wait in the
    tenant's line behind a slot another holds."""
    services = bootstrap.build_memory(clock=clock, handlers=registry())
    task_file = _file(cap=1, shards=3)
    for task in task_file["tasks"]:
        task["instance_timeout_s"] = 60
    apply_file(
        task_file,
        store=lambda: services.tasks,
        handlers=services.handlers,
        now=clock.now,
        actor="test",
    )
    assert (
        services.instances.take_tenant_slot(
            "acme", "other", cap=1, now=clock.now(), until=clock.now() + timedelta(hours=2)
        )
        == 0
    )
    instance, _ = run_now("sweep-a", services)
    start = ShardStart(services, worker="w", reads=InstanceReads(services))
    for message in list(cast("MemoryShardQueue", services.queue).sent):
        assert start.before_lease(message, []) is ShardOutcome.DEFERRED
    assert services.instances.tenant_line("acme").waiting == 3
    return services, instance.instance_id


def test_the_wait_for_a_tenants_slots_is_not_counted_in_the_instance_deadline() -> None:
    clock = ManualClock(T0)
    services, instance_id = _waiting_instance(clock)
    before = services.instances.get_instance(instance_id)
    assert before is not None
    # Past its deadline, its shards still waiting, and the tenant's line moving (a ticket of
    # another instance was served a moment ago): the sweep moves the deadline on.
    clock.set(before.deadline + S)
    services.instances.serve_tenant_line("acme", now=clock.now() - 10 * S)
    report = sweep(services)
    after = services.instances.get_instance(instance_id)
    assert after is not None and after.status is InstanceStatus.RUNNING, after.status
    assert report.postponed == [instance_id] and report.timed_out_instances == []
    assert after.deadline > clock.now()


def test_an_instance_behind_a_line_that_stopped_still_times_out() -> None:
    clock = ManualClock(T0)
    services, instance_id = _waiting_instance(clock)
    before = services.instances.get_instance(instance_id)
    assert before is not None
    # Nobody served for longer than an attempt may live: the line is stuck, not slow.
    clock.set(before.deadline + timedelta(hours=1))
    report = sweep(services)
    after = services.instances.get_instance(instance_id)
    assert after is not None and after.status is InstanceStatus.TIMED_OUT
    assert report.postponed == []
