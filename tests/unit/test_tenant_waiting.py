"""Waiting for a tenant's `max_concurrent_shards`, driven through the real start and commit paths
on the in-memory services and the manual clock: instances of hundreds of capped shards arriving
a minute apart, each shard holding its slot for a while once started, every message delivered
when its delay has passed (some twice), the sweeper each minute.

What is measured: that every shard runs once, what waiting costs (store and queue requests per
waiting shard per minute), how many shards wait on the queue, and the order shards start in.
"""

from __future__ import annotations

import heapq
import itertools
import zlib
from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, cast

from iotsched import bootstrap
from iotsched.adapters.memory.queues import MemoryShardQueue
from iotsched.adapters.memory.store import MemoryStore
from iotsched.clock import ManualClock
from iotsched.core.attempt_record import Attempt, AttemptOutcome
from iotsched.core.instance_record import InstanceStatus
from iotsched.core.shard_message import ShardMessage
from iotsched.core.shard_record import ShardStatus
from iotsched.ports.shards import ShardCompletion
from iotsched.services.definitions.apply import apply_task_file as apply_file
from iotsched.services.execution.buffer import CompletionBuffer
from iotsched.services.execution.outcomes import Delivery, PendingShard, ShardOutcome, ShardReport
from iotsched.services.execution.reads import InstanceReads
from iotsched.services.execution.start import ShardStart
from iotsched.services.execution.sweep import sweep
from iotsched.services.operations.actions import cancel_instance, rerun_instance
from iotsched.services.operations.on_demand import run_now
from iotsched.services.scheduling.tick import dispatch_tick
from iotsched.services.tenancy import pacing
from iotsched.services.tenancy import slots as quotas
from iotsched.services.wiring import Wiring
from iotsched.tasklib import registry
from tests.support import T0

S = timedelta(seconds=1)
#: The store calls of a commit that every shard makes, waiting or not (its final write and the
#: instance read after it); any other call of a commit is a refill's.
COMMIT_CALLS = ("complete_shards",)


class CountingStore:
    """The memory store, each call counted under the driver's current phase."""

    def __init__(self, store: MemoryStore) -> None:
        self._store = store
        self.phase = "other"
        self.calls: Counter[tuple[str, str]] = Counter()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if not callable(attr):
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[(self.phase, name)] += 1
            return attr(*args, **kwargs)

        return counted

    def count(self, phase: str, names: tuple[str, ...] = ()) -> int:
        return sum(n for (p, name), n in self.calls.items() if p == phase and name not in names)


@dataclass
class Run:
    """What happened: when each instance came, each shard's starts, what waiting cost."""

    came: dict[str, datetime] = field(default_factory=dict)
    started: list[tuple[datetime, str, int]] = field(default_factory=list)
    deferrals: int = 0
    duplicates: int = 0
    waiting_requests: int = 0
    most_on_queue: int = 0
    seats: int = 0  # seats taken on gates (the tenant's instances per minute, a rollout's)
    statuses: dict[str, InstanceStatus] = field(default_factory=dict)

    def waiting_minutes(self) -> float:
        """Shard-minutes spent waiting: each shard from its instance's arrival to its start."""
        return sum((at - self.came[i]).total_seconds() for at, i, _ in self.started) / 60


def _file(
    cap: int,
    shards: int,
    tasks: str,
    instance_timeout_s: int,
    priorities: dict[str, str] | None = None,
    rate: int | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    quotas: dict[str, int] = {"max_concurrent_shards": cap}
    if rate is not None:
        quotas["max_instances_per_minute"] = rate
    return {
        "tenants": [{"name": "acme", "quotas": quotas}],
        "tasks": [
            {
                "id": f"sweep-{name}",
                "tenant": "acme",
                "handler": "noop",
                "trigger": {"cron": "0 0 1 1 *", "timezone": "UTC"},
                "timeout_s": 60,
                "instance_timeout_s": instance_timeout_s,
                "priority": (priorities or {}).get(name, "normal"),
                "sharding": {
                    "strategy": "id_range",
                    "id_min": 0,
                    "id_max": shards,
                    "shards": shards,
                },
                **(extra or {}),
            }
            for name in tasks
        ],
    }


def _services(clock: ManualClock, task_file: dict[str, Any]) -> Wiring:
    """The in-memory services on `clock`, `task_file` applied."""
    services = bootstrap.build_memory(clock=clock, handlers=registry())
    apply_file(
        task_file,
        store=lambda: services.tasks,
        handlers=services.handlers,
        now=clock.now,
        actor="test",
    )
    return services


def _length_s(shard_s: int, message: ShardMessage) -> float:
    """Shards last between half and one and a half times `shard_s`, by shard."""
    key = f"{message.instance_id}#{message.shard}".encode()
    return shard_s * (0.5 + zlib.crc32(key) % 1000 / 1000)


def _drive(
    *,
    cap: int,
    shards: int,
    shard_s: int,
    tasks: str = "abc",
    arrive_every_s: int = 60,
    duplicate_every: int = 0,
    instance_timeout_s: int = 3600,
    priorities: dict[str, str] | None = None,
    rate: int | None = None,
    extra: dict[str, Any] | None = None,
) -> Run:
    """Instances of `shards` capped shards, one per task in `tasks`, `arrive_every_s` apart;
    every `duplicate_every`-th message sent is delivered twice (0: none)."""
    clock = ManualClock(T0)
    services = _services(
        clock, _file(cap, shards, tasks, instance_timeout_s, priorities, rate, extra)
    )
    store = CountingStore(cast("MemoryStore", services.instances))
    wired: Wiring = replace(services, instances=cast("Any", store))
    queue = cast("MemoryShardQueue", services.queue)
    buffer = CompletionBuffer(
        wired,
        reads=InstanceReads(wired),
        timer=lambda delay_s, fn: cast("Any", None),
        invocation_end=lambda: None,
        release=lambda receipt: True,
    )
    run = Run()
    order = itertools.count()
    due: list[tuple[datetime, int, ShardMessage]] = []
    ends: list[tuple[datetime, int, ShardMessage, quotas.HeldSlot | None, Attempt]] = []
    seen = 0

    def take_sent(now: datetime) -> int:
        """Queue what was sent since the last look; the requests it took."""
        nonlocal seen
        fresh = list(zip(queue.sent[seen:], queue.delays[seen:], strict=True))
        for n, (message, delay) in enumerate(fresh, start=seen):
            heapq.heappush(due, (now + delay * S, next(order), message))
            if duplicate_every and n % duplicate_every == duplicate_every - 1:
                heapq.heappush(due, (now + (delay + 1) * S, next(order), message))
        seen = len(queue.sent)
        return (len(fresh) + 9) // 10  # SendMessageBatch calls

    arrivals = [(T0 + n * arrive_every_s * S, task) for n, task in enumerate(tasks)]
    next_sweep = T0 + 60 * S
    while arrivals or due or ends:
        now = min(
            [t for t, _ in arrivals[:1]]
            + [t for t, _, _ in due[:1]]
            + [t for t, *_ in ends[:1]]
            + [next_sweep]
        )
        clock.set(now)
        while ends and ends[0][0] <= now:
            _, _, message, held, attempt = heapq.heappop(ends)
            if held is not None:
                quotas.release_slot(held, wired)
            done = attempt.model_copy(update={"ended_at": now, "outcome": AttemptOutcome.SUCCEEDED})
            buffer.add(
                PendingShard(
                    delivery=Delivery(body="", receipt_handle="r"),
                    completion=ShardCompletion(
                        message.instance_id, message.shard, ShardStatus.SUCCEEDED, done
                    ),
                    report=ShardReport(),
                    lease_until=now + 300 * S,
                )
            )
            store.phase = "commit"
            commits_before = store.count("commit")
            buffer.commit()
            # A commit reads each instance once; anything more is its refill's.
            refill = store.count("commit") - commits_before - 2
            run.waiting_requests += max(0, refill) + take_sent(now)
        while arrivals and arrivals[0][0] <= now:
            instance, _ = run_now(f"sweep-{arrivals.pop(0)[1]}", wired)
            run.came[instance.instance_id] = now
            take_sent(now)
        if now >= next_sweep:
            store.phase = "sweep"
            before = store.count("sweep")
            sweep(wired)
            run.waiting_requests += store.count("sweep") - before + take_sent(now)
            next_sweep += 60 * S
        run.most_on_queue = max(run.most_on_queue, len(due))
        while due and due[0][0] <= now:
            _, _, message = heapq.heappop(due)
            store.phase = "deliver"
            before = store.count("deliver")
            start = ShardStart(wired, worker="w", reads=InstanceReads(wired))
            held: list[quotas.HeldSlot] = []
            ready = start.before_lease(message, held)
            if ready == ShardOutcome.DEFERRED:
                run.deferrals += 1
                run.waiting_requests += store.count("deliver") - before + take_sent(now)
                continue
            if isinstance(ready, ShardOutcome):
                run.duplicates += 1
                continue
            _, message = ready
            lease = start.take_lease(message, now, 300)
            if not lease.taken:
                run.duplicates += 1
                for slot in held:
                    quotas.release_slot(slot, wired)
                continue
            run.started.append((now, message.instance_id, message.shard))
            attempt = lease.shard.attempts[-1]
            end = now + _length_s(shard_s, message) * S
            heapq.heappush(ends, (end, next(order), message, held[0] if held else None, attempt))
        assert now < T0 + timedelta(days=2), "the backlog never drained"
    for instance_id in run.came:
        record = services.instances.get_instance(instance_id)
        assert record is not None
        run.statuses[instance_id] = record.status
    run.seats = sum(n for (_, name), n in store.calls.items() if name == "take_seat")
    return run


def test_every_shard_of_a_capped_backlog_runs_once_and_few_wait_on_the_queue() -> None:
    cap, shards = 10, 200
    run = _drive(cap=cap, shards=shards, shard_s=10, duplicate_every=7)
    started = Counter((i, s) for _, i, s in run.started)
    assert len(started) == 3 * shards and set(started.values()) == {1}
    assert run.duplicates > 0  # the duplicates were delivered, and acknowledged
    assert set(run.statuses.values()) == {InstanceStatus.SUCCEEDED}
    # Unsent shards wait in their instance's record: the queue holds a window per instance
    # (and the duplicates of this run), never the backlog.
    # (The tenant's line lets one instance send at a time: its window, and the last of the one
    # before it.)
    assert run.most_on_queue <= 2 * pacing.window_of(cap) * 8 // 7 + 3, run.most_on_queue


def test_waiting_costs_at_most_one_request_per_waiting_shard_per_minute() -> None:
    # 600 shards of about 30 s behind a cap of 5: an hour's backlog.
    cap, shard_s = 5, 30
    run = _drive(cap=cap, shards=200, shard_s=shard_s)
    assert set(run.statuses.values()) == {InstanceStatus.SUCCEEDED}
    per_minute = run.waiting_requests / run.waiting_minutes()
    assert per_minute <= 1.0, (run.waiting_requests, run.deferrals, run.waiting_minutes())
    # ... and the cap stays busy: the backlog drains at nearly the rate the cap allows.
    drained_s = (run.started[-1][0] - run.started[0][0]).total_seconds()
    assert 600 * shard_s / cap / drained_s >= 0.9, drained_s


def test_the_wait_for_a_tenants_slots_is_not_counted_in_the_instance_deadline() -> None:
    # Two hours of shards behind a cap of 5, with an instance timeout of 10 minutes.
    run = _drive(cap=5, shards=1200, shard_s=30, tasks="a", instance_timeout_s=600)
    assert set(run.statuses.values()) == {InstanceStatus.SUCCEEDED}
    drained = run.started[-1][0] - run.started[0][0]
    assert drained > timedelta(hours=1)
    # ... and behind an older instance in the tenant's line for longer than that.
    run = _drive(cap=5, shards=200, shard_s=30, tasks="ab", instance_timeout_s=600)
    assert set(run.statuses.values()) == {InstanceStatus.SUCCEEDED}
    b = min(at for at, i, _ in run.started if i.startswith("sweep-b"))
    assert b - T0 > timedelta(minutes=10)


def _places(run: Run, tasks: str) -> dict[str, list[int]]:
    """Where each task's shards stand in the order shards started."""
    return {
        task: [n for n, (_, i, _) in enumerate(run.started) if i.startswith(f"sweep-{task}@")]
        for task in tasks
    }


def test_a_tenants_instances_start_their_shards_in_the_order_they_came() -> None:
    cap = 10
    run = _drive(cap=cap, shards=200, shard_s=10, duplicate_every=7)
    place = _places(run, "abc")
    # A newer instance starts only once the one before it sent its last shards (a window).
    assert max(place["a"]) < min(place["b"]) + pacing.window_of(cap)
    assert max(place["b"]) < min(place["c"]) + pacing.window_of(cap)


def test_a_tenants_high_priority_instance_goes_before_its_normal_ones() -> None:
    cap = 10
    run = _drive(cap=cap, shards=200, shard_s=10, priorities={"c": "high"})
    place = _places(run, "abc")
    # c came last, at high priority: it takes the line's head at a's next refill.
    assert max(place["c"]) < min(place["b"])
    assert max(place["c"]) < max(place["a"])


def test_an_instance_whose_shards_stop_ending_still_times_out() -> None:
    clock = ManualClock(T0)
    services = _services(clock, _file(cap=1, shards=10, tasks="a", instance_timeout_s=600))
    instance, _ = run_now("sweep-a", services)
    queue = cast("MemoryShardQueue", services.queue)
    assert len(queue.sent) == 2  # a window sent; the rest wait unsent
    # Nothing ever ends (every worker died, no message comes back): the sweeper resumes the
    # send each minute but its window is full, and the deadline is not moved on.
    for minute in range(1, 12):
        clock.set(T0 + minute * 60 * S)
        sweep(services)
    record = services.instances.get_instance(instance.instance_id)
    assert record is not None and record.status is InstanceStatus.TIMED_OUT
    assert len(queue.sent) == 2


def test_an_instance_behind_one_that_ended_sends_at_the_next_sweep() -> None:
    clock = ManualClock(T0)
    services = _services(clock, _file(cap=1, shards=10, tasks="ab", instance_timeout_s=600))
    a, _ = run_now("sweep-a", services)
    b, _ = run_now("sweep-b", services)
    queue = cast("MemoryShardQueue", services.queue)
    assert [m.instance_id for m in queue.sent] == [a.instance_id] * 2  # b waits in line
    waiting = services.instances.get_instance(b.instance_id)
    assert waiting is not None and waiting.sent == 0
    assert waiting.waiting == pacing.LINE_WAIT.format(tenant="acme")
    # a ends (cancelled) while first in line, and never leaves it: the next reader takes its
    # place out, and b sends its window.
    cancel_instance(a.instance_id, services)
    clock.set(T0 + 60 * S)
    sweep(services)
    assert [m.instance_id for m in queue.sent[2:]] == [b.instance_id] * 2
    sending = services.instances.get_instance(b.instance_id)
    assert sending is not None and sending.sent == 2 and sending.waiting is None
    assert services.instances.tenant_line_head("acme") == pacing.line_place(sending)


def test_the_last_shards_of_an_instance_are_not_starved_by_the_next_in_line() -> None:
    # Six instances of 30 s shards behind a cap of 5, each timed out 10 minutes after its
    # last send: the next instance sends only once the one before has its last shards in its
    # cap, so none of those waits for the next instance's fresh sends.
    run = _drive(
        cap=5, shards=100, shard_s=30, tasks="abcdef", arrive_every_s=5, instance_timeout_s=600
    )
    assert set(run.statuses.values()) == {InstanceStatus.SUCCEEDED}, run.statuses


def test_instances_waiting_in_line_take_one_seat_each_of_the_tenants_instances_per_minute() -> None:
    run = _drive(cap=2, shards=20, shard_s=10, tasks="abcdef", arrive_every_s=10, rate=2)
    assert set(run.statuses.values()) == {InstanceStatus.SUCCEEDED}, run.statuses
    assert run.seats == 6


def test_a_capped_rollout_refills_as_its_shards_end_not_once_a_minute() -> None:
    # 200 shards of 10 s behind a cap of 10 and a rate of 100 a minute: the rate allows the
    # cap's pace (60 a minute), so the cap alone holds the backlog back: about 200 s.
    run = _drive(
        cap=10, shards=200, shard_s=10, tasks="a", extra={"rollout": {"max_shards_per_minute": 100}}
    )
    assert set(run.statuses.values()) == {InstanceStatus.SUCCEEDED}
    assert (run.started[-1][0] - run.started[0][0]).total_seconds() < 400


def test_a_refills_shards_keep_their_spread_from_the_claim() -> None:
    # Spread over 300 s: the first window's shards wait their share, later ones do not again.
    run = _drive(cap=10, shards=200, shard_s=10, tasks="a", extra={"shard_spread_s": 300})
    assert set(run.statuses.values()) == {InstanceStatus.SUCCEEDED}
    assert (run.started[-1][0] - run.started[0][0]).total_seconds() < 600


def test_a_rerun_of_a_capped_instance_has_its_own_timeout_not_the_moved_deadline() -> None:
    clock = ManualClock(T0)
    services = _services(clock, _file(cap=1, shards=3, tasks="a", instance_timeout_s=600))
    instance, _ = run_now("sweep-a", services)
    # Its sends went on for two hours: each moved its deadline.
    clock.set(T0 + 7200 * S)
    assert services.instances.take_dispatch(
        instance.instance_id, now=clock.now(), until=clock.now()
    )
    assert services.instances.advance_dispatch(
        instance.instance_id, sent=2, held=clock.now(), until=clock.now(), deadline=clock.now()
    )
    cancel_instance(instance.instance_id, services)
    clock.set(T0 + 7300 * S)
    rerun = rerun_instance(instance.instance_id, services)
    assert rerun.deadline == clock.now() + 600 * S


def test_the_first_in_line_keeps_its_place_while_its_last_shards_may_still_start() -> None:
    clock = ManualClock(T0)
    services = _services(clock, _file(cap=1, shards=3, tasks="a", instance_timeout_s=600))
    instance, _ = run_now("sweep-a", services)
    sending = services.instances.get_instance(instance.instance_id)
    assert sending is not None and pacing.holds_its_place(sending, T0 + 7200 * S)  # planning
    # Everything sent at T0: its last shards start within an attempt's time, and its tail
    # retries; a shard not ended past that waits out a backoff, and the line moves on.
    sent = sending.model_copy(update={"status": InstanceStatus.RUNNING, "sent": 3})
    hold = sent.timeout_s + pacing.TAIL_HOLD_S
    assert pacing.holds_its_place(sent, T0 + (hold - 1) * S)
    assert not pacing.holds_its_place(sent, T0 + hold * S)
    assert not pacing.holds_its_place(
        sent.model_copy(update={"status": InstanceStatus.SUCCEEDED}), T0
    )
    assert not pacing.holds_its_place(None, T0)


def test_an_instance_covered_while_first_in_line_hands_the_line_over_at_once() -> None:
    clock = ManualClock(T0 - 60 * S)
    task_file = _file(cap=1, shards=10, tasks="ab", instance_timeout_s=600)
    # a fires every minute and a newer firing covers the one still running
    task_file["tasks"][0] |= {"trigger": {"rate": "1m"}, "blocking": {"policy": "cover"}}
    services = _services(clock, task_file)
    clock.set(T0)
    dispatch_tick(T0, services)
    a = "sweep-a@2026-11-29T12:00Z"
    b, _ = run_now("sweep-b", services)
    queue = cast("MemoryShardQueue", services.queue)
    assert [m.instance_id for m in queue.sent] == [a] * 2  # b waits in line
    # a's next firing covers a (cancelled): b, next in line, sends now, not at the next sweep
    clock.set(T0 + 60 * S)
    dispatch_tick(T0 + 60 * S, services)
    covered = services.instances.get_instance(a)
    assert covered is not None and covered.status is InstanceStatus.CANCELLED
    assert covered.reason == "covered by sweep-a@2026-11-29T12:01Z"
    assert [m.instance_id for m in queue.sent[2:4]] == [b.instance_id] * 2
