"""The demo's adverse deliveries: which minutes are raced or delivered late, a racing dispatcher
whose every contested slot ends with exactly one claim refused, and the copies counted absorbed."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from iotsched import bootstrap
from iotsched.clock import ManualClock
from iotsched.core.buckets import bucket_of
from iotsched.demo.run import (
    DEMO_START,
    demo_tasks,
    tick_minutes,
)
from iotsched.demo.ticks import (
    TIMES,
    Racer,
    absorbed_copies,
    guarantee_figures,
    plan,
)
from iotsched.local.delivery import TickResult
from iotsched.ports.messaging import BucketTick
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.scheduling.report import TickReport
from iotsched.services.scheduling.tick import dispatch_bucket
from tests.support import T0, task

M = timedelta(minutes=1)
BUCKETS = 8
IDS = [f"t{n:02d}" for n in range(24)]


def test_late_copies_follow_the_next_due_minute_and_races_are_about_times_whatever_the_days() -> (
    None
):
    for days in (1, 3, 14):
        minutes = tick_minutes(demo_tasks(), DEMO_START, DEMO_START + timedelta(days=days))
        deliveries = plan(minutes)
        assert [d.at for d in deliveries] == minutes  # every due minute, in order
        late = [(n, d.late) for n, d in enumerate(deliveries) if d.late is not None]
        raced = [d.at for d in deliveries if d.race]
        # A late copy is of the due minute before: it arrives after the next minute's ticks.
        assert late and all(at == minutes[n - 1] and at < minutes[n] for n, at in late)
        assert TIMES <= len(raced) <= 3 * TIMES and TIMES <= len(late) <= 3 * TIMES
        # The late minutes are the raced ones: each raced minute's copies come back late.
        assert [at for _, at in late] == raced[: len(late)]


def test_a_racing_dispatcher_and_the_bucket_dispatchers_refuse_one_claim_per_contested_slot() -> (
    None
):
    services = bootstrap.build_memory(clock=ManualClock(T0), buckets=BUCKETS)
    apply_tasks([task(i, trigger={"rate": "1m"}) for i in IDS], services.tasks, now=T0 - M)
    racer = Racer(services, T0, buckets=BUCKETS)
    racer.start()  # reads the due tasks now, before any bucket dispatcher runs
    reports: list[TickReport] = []
    for k in range(BUCKETS):
        result = dispatch_bucket(BucketTick(T0, k), services, owner=f"d{k}", until=T0 + M)
        if result.report is not None:
            reports.append(result.report)
    racer.join(60)
    assert racer.errors == []
    slots = {f"{i}@2026-11-29T12:00Z" for i in IDS}
    by_buckets = [c for r in reports for c in r.claimed]
    # Each slot claimed once, by whichever dispatcher got there first ...
    assert sorted(by_buckets + racer.claimed) == sorted(slots)
    # ... and each contested slot's other claim refused by the store: whoever lost counted it.
    refused = racer.duplicate_claims + sum(r.duplicate_claims for r in reports)
    assert refused == len(slots)
    # The racer waited for each bucket's first claim: the bucket dispatchers won at least those.
    assert len({bucket_of(c.partition("@")[0], BUCKETS) for c in by_buckets}) == len(
        {bucket_of(i, BUCKETS) for i in IDS}
    )
    assert all(services.instances.get_instance(s) is not None for s in slots)
    figures = guarantee_figures([], [racer])
    assert figures["duplicate_claims_rejected_by"]["racer"] == racer.duplicate_claims
    assert figures["slots_claimed_twice"] == 0


def _outcome(minute: str, bucket: int, verdict: str, due: int) -> dict[str, Any]:
    return {"minute": minute, "bucket": bucket, "verdict": verdict, "due_tasks": due}


def _tick(*outcomes: dict[str, Any], claimed: list[str] | None = None) -> TickResult:
    return TickResult(at=T0, report={"outcomes": list(outcomes), "claimed": claimed or []})


def test_copies_are_absorbed_only_where_another_copy_dispatched_the_work() -> None:
    noon, later = "2026-11-29T12:00:00+00:00", "2026-11-29T12:05:00+00:00"
    ticks = [
        # The first delivery: bucket 1 had work, bucket 2 never had any.
        _tick(_outcome(noon, 1, "dispatched", 2), _outcome(noon, 2, "dispatched", 0)),
        # Its copy: bucket 1 absorbed at the lease; bucket 2 empty again (not a duplicate's).
        _tick(_outcome(noon, 1, "absorbed", 0), _outcome(noon, 2, "dispatched", 0)),
        # A late copy once the clocks moved: nothing due in bucket 1 any more.
        _tick(_outcome(noon, 1, "dispatched", 0), _outcome(noon, 2, "dispatched", 0)),
        # Another minute whose only delivery found bucket 1 empty: not a copy of anything.
        _tick(_outcome(later, 1, "dispatched", 0)),
    ]
    assert absorbed_copies(ticks) == {"at_the_lease": 1, "nothing_due": 1}
    figures = guarantee_figures(ticks, [])
    assert figures["duplicate_ticks_absorbed"] == 2


def test_a_slot_claimed_by_two_dispatchers_is_counted() -> None:
    twice = [_tick(claimed=["a@12:00Z"]), _tick(claimed=["a@12:00Z", "b@12:00Z"])]
    assert guarantee_figures(twice, [])["slots_claimed_twice"] == 1
