"""The fanned-out tick on the fakes: one message per bucket, a bucket dispatcher that works its
bucket alone, overlapping minutes of a bucket never side by side, duplicates on the claims."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from iotsched import bootstrap
from iotsched.adapters.memory.queues import MemoryDispatchQueue
from iotsched.clock import ManualClock
from iotsched.core.buckets import bucket_of
from iotsched.ports.messaging import BucketTick
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.operations.on_demand import submit
from iotsched.services.scheduling.tick import (
    BucketVerdict,
    dispatch_bucket,
    fan_out_tick,
)
from iotsched.services.wiring import Wiring
from tests.support import T0, task

M = timedelta(minutes=1)
BUCKETS = 8
IDS = [f"t{n:02d}" for n in range(30)]


def _services(clock: ManualClock) -> Wiring:
    services = bootstrap.build_memory(clock=clock, buckets=BUCKETS)
    apply_tasks([task(i, trigger={"rate": "1m"}) for i in IDS], services.tasks, now=T0 - M)
    return services


def test_the_tick_sends_one_message_per_bucket_for_its_minute() -> None:
    queue = MemoryDispatchQueue()
    fan_out = fan_out_tick(T0 + timedelta(seconds=42), queue, buckets=32)
    assert queue.sent == [BucketTick(minute=T0, bucket=k) for k in range(32)]
    assert fan_out.now == T0 and len(fan_out.message_ids) == 32


def test_a_bucket_dispatcher_dispatches_its_bucket_alone() -> None:
    clock = ManualClock(T0)
    services = _services(clock)
    submission = submit("t00", services, at=T0)
    mine = bucket_of(IDS[0], BUCKETS)
    result = dispatch_bucket(BucketTick(T0, mine), services, owner="a", until=T0 + M)
    assert result.verdict is BucketVerdict.DISPATCHED and result.report is not None
    expected = sorted(f"{i}@2026-11-29T12:00Z" for i in IDS if bucket_of(i, BUCKETS) == mine)
    fired = sorted(i for i in result.report.claimed if i != submission.instance_id)
    assert fired == expected and len(expected) < len(IDS)
    # The other buckets' tasks are still due, untouched; the submission went with its bucket.
    others = {t.task_id for t in services.tasks.due_tasks(T0)}
    assert others == {i for i in IDS if bucket_of(i, BUCKETS) != mine}
    in_mine = bucket_of(submission.instance_id, BUCKETS) == mine
    assert (submission.instance_id in result.report.claimed) is in_mine


class _Overlap:
    """A task store whose due read, inside minute 12:00's dispatch of a bucket (its second: the
    first finds the bucket not empty), first lets the 12:01 message of the same bucket arrive
    (the 12:00 dispatch overran its minute)."""

    def __init__(self, services: Wiring, arrive: Any) -> None:
        self._store = services.tasks
        self._arrive = arrive
        self._reads = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def due_tasks(self, now: Any, **options: Any) -> Any:
        self._reads += 1
        if self._reads == 2 and self._arrive is not None:
            arrive, self._arrive = self._arrive, None
            arrive()
        return self._store.due_tasks(now, **options)


def test_an_overrunning_minute_makes_the_next_one_wait_not_run_beside_it() -> None:
    clock = ManualClock(T0 + timedelta(seconds=5))
    base = _services(clock)
    k = bucket_of(IDS[0], BUCKETS)
    seen: list[Any] = []

    def next_minute_arrives() -> None:
        clock.set(T0 + M + timedelta(seconds=2))  # 12:00's dispatch still runs at 12:01:02
        seen.append(dispatch_bucket(BucketTick(T0 + M, k), services, owner="b", until=T0 + 3 * M))

    services = Wiring(**{**vars(base), "tasks": _Overlap(base, next_minute_arrives)})
    first = dispatch_bucket(
        BucketTick(T0, k), services, owner="a", until=T0 + 2 * M + timedelta(seconds=5)
    )
    (waiting,) = seen
    assert waiting.verdict is BucketVerdict.WAIT and waiting.report is None
    # It comes back when the running dispatch's lease ends (its invocation's end), not before.
    assert waiting.wait_s == 64  # 12:01:02 -> 12:02:05, and a second
    assert first.verdict is BucketVerdict.DISPATCHED and first.report is not None
    assert first.report.duplicate_claims == 0
    # Back after the wait: the lease is free, 12:01 runs its own slots, nothing twice.
    clock.set(T0 + 2 * M + timedelta(seconds=6))
    second = dispatch_bucket(BucketTick(T0 + M, k), base, owner="b", until=T0 + 3 * M)
    assert second.verdict is BucketVerdict.DISPATCHED and second.report is not None
    assert second.report.duplicate_claims == 0
    assert all(i.endswith("12:01Z") for i in second.report.claimed)
    assert len(second.report.claimed) == len(first.report.claimed)


def test_duplicates_are_absorbed_while_covered_and_collide_on_the_claims_otherwise() -> None:
    clock = ManualClock(T0)
    services = _services(clock)
    k = bucket_of(IDS[0], BUCKETS)
    mine = [i for i in IDS if bucket_of(i, BUCKETS) == k]
    seen_due = services.tasks.due_tasks(T0, bucket=k)

    # The first delivery dies after its claims: no release, its lease runs out at its end.
    release = services.tasks.release_tick
    services.tasks.release_tick = lambda *a, **kw: True  # type: ignore[method-assign]
    first = dispatch_bucket(BucketTick(T0, k), services, owner="a", until=T0 + M)
    services.tasks.release_tick = release  # type: ignore[method-assign]
    assert first.report is not None and len(first.report.claimed) == len(mine)
    # A copy while it holds the bucket (read while the holder's tasks were still due): it
    # reaches the lease and is absorbed, the holder runs that very minute.
    stale = Wiring(**{**vars(services), "tasks": _Stale(services, seen_due)})
    copy = dispatch_bucket(BucketTick(T0, k), stale, owner="b", until=T0 + M)
    assert copy.verdict is BucketVerdict.ABSORBED
    # A late copy once the lease ended, having read the due index before the advances:
    # it runs, and every claim collides; nothing is claimed or sent twice.
    clock.set(T0 + M)
    late = dispatch_bucket(BucketTick(T0, k), stale, owner="c", until=T0 + 2 * M)
    assert late.verdict is BucketVerdict.DISPATCHED and late.report is not None
    assert late.report.claimed == [] and late.report.messages_sent == 0
    assert late.report.duplicate_claims == len(mine)
    # Done now: a copy of that minute is absorbed, even one that still sees the tasks due.
    again = dispatch_bucket(BucketTick(T0, k), stale, owner="d", until=T0 + 2 * M)
    assert again.verdict is BucketVerdict.ABSORBED
    # One reading the index as it is finds the bucket empty: two reads, nothing else.
    empty = dispatch_bucket(BucketTick(T0, k), services, owner="e", until=T0 + 2 * M)
    assert empty.report is not None and empty.report.due_tasks == 0


class _Stale:
    def __init__(self, services: Wiring, due: Any) -> None:
        self._store = services.tasks
        self._due = due

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def due_tasks(self, now: Any, **options: Any) -> Any:
        return self._due


def test_a_replayed_earlier_minute_is_dispatched_not_absorbed() -> None:
    """Only a copy of the same minute is absorbed: a manual clock (`local tick --at`) may go
    back in time, and a task applied since is due at the earlier minute."""
    clock = ManualClock(T0)
    services = _services(clock)
    k = bucket_of(IDS[0], BUCKETS)
    later = dispatch_bucket(BucketTick(T0 + 60 * M, k), services, owner="a", until=T0 + M)
    assert later.verdict is BucketVerdict.DISPATCHED
    fresh = next(i for i in (f"new-{n}" for n in range(100)) if bucket_of(i, BUCKETS) == k)
    apply_tasks([task(fresh, trigger={"rate": "1h"})], services.tasks, now=T0 - M)
    earlier = dispatch_bucket(BucketTick(T0, k), services, owner="b", until=T0 + M)
    assert earlier.verdict is BucketVerdict.DISPATCHED and earlier.report is not None
    assert earlier.report.claimed == [f"{fresh}@2026-11-29T12:00Z"]
