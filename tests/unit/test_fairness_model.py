"""The start bound of docs/design.md section 12, on a model of the scheduler's shard lanes.

The model: one FIFO queue per priority, each read by its own workers (its event source's
concurrency), every shard taking at most `D` seconds. Tenants' instances arrive at random
instants, at random priorities, with random shard counts. Properties:

* no tenant starves: every shard of every tenant starts;
* each shard starts within ceil((k + 1) / c) * D of its arrival, k being the shards of its own
  priority queued ahead of it at that instant and c its queue's workers: a bound that does not
  depend on any other priority's work;
* so a `low` backlog (a backfill), however large, moves no `high` or `normal` start: removing
  every low instance leaves every other start where it was.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

PRIORITIES = ("high", "normal", "low")
D = 10  # the longest shard, in model seconds


@dataclass(frozen=True)
class Arrival:
    at: int
    tenant: str
    priority: str
    durations: tuple[int, ...]  # one per shard, each in 1..D


@dataclass(frozen=True)
class Start:
    tenant: str
    priority: str
    arrived: int
    started: int
    ahead: int  # shards of its priority waiting ahead of it when it arrived


def simulate(arrivals: list[Arrival], workers: dict[str, int]) -> list[Start]:
    """Every shard's start: each priority's queue is FIFO (by arrival, then shard order) and
    served by its own `workers[priority]` workers; a worker takes the next shard as it frees."""
    starts: list[Start] = []
    for priority in PRIORITIES:
        queue = [
            (a.at, n, a.tenant, d)
            for n, a in enumerate(sorted(arrivals, key=lambda a: a.at))
            if a.priority == priority
            for d in a.durations
        ]
        free = [0] * workers[priority]  # when each worker is next free
        heapq.heapify(free)
        started_at: list[int] = []
        for at, _, tenant, duration in queue:
            worker_free = heapq.heappop(free)
            start = max(at, worker_free)
            heapq.heappush(free, start + duration)
            # ahead of it at its arrival: the earlier shards of its queue not started before
            ahead = sum(1 for s in started_at if s >= at)
            started_at.append(start)
            starts.append(Start(tenant, priority, at, start, ahead))
    return starts


arrival = st.builds(
    Arrival,
    at=st.integers(0, 300),
    tenant=st.sampled_from(["a", "b", "c", "d"]),
    priority=st.sampled_from(PRIORITIES),
    durations=st.lists(st.integers(1, D), min_size=1, max_size=40).map(tuple),
)
lane_workers = st.fixed_dictionaries({p: st.integers(1, 4) for p in PRIORITIES})


@settings(max_examples=120, deadline=None)
@given(st.lists(arrival, min_size=1, max_size=30), lane_workers)
def test_no_tenant_starves_and_each_start_is_within_its_queues_bound(
    arrivals: list[Arrival], workers: dict[str, int]
) -> None:
    starts = simulate(arrivals, workers)
    assert len(starts) == sum(len(a.durations) for a in arrivals)  # every shard started
    for tenant in {a.tenant for a in arrivals}:
        assert any(s.tenant == tenant for s in starts)
    for s in starts:
        bound = math.ceil((s.ahead + 1) / workers[s.priority]) * D
        assert s.arrived <= s.started <= s.arrived + bound, s


@settings(max_examples=120, deadline=None)
@given(st.lists(arrival, min_size=1, max_size=30), lane_workers, st.integers(1, 2_000))
def test_a_low_backlog_moves_no_higher_start(
    arrivals: list[Arrival], workers: dict[str, int], backfill: int
) -> None:
    """A backfill of any size at `low` (tenant z) changes no high or normal start."""
    flood = Arrival(at=0, tenant="z", priority="low", durations=(D,) * backfill)
    with_flood = simulate([flood, *arrivals], workers)
    without = simulate(arrivals, workers)

    def higher(starts: list[Start]) -> list[Start]:
        return sorted(
            (s for s in starts if s.priority != "low"),
            key=lambda s: (s.priority, s.arrived, s.started, s.tenant),
        )

    assert higher(with_flood) == higher(without)


def test_the_same_backfill_at_one_priority_delays_the_other_tenant_by_its_length() -> None:
    """The FIFO the lanes replace: on one queue, tenant B's shards wait out A's whole backlog."""
    a = Arrival(at=0, tenant="a", priority="normal", durations=(1,) * 2_000)
    b = Arrival(at=5, tenant="b", priority="normal", durations=(1,) * 10)
    one_queue = [s for s in simulate([a, b], {"high": 1, "normal": 2, "low": 1}) if s.tenant == "b"]
    assert min(s.started - s.arrived for s in one_queue) >= 2_000 // 2 - 5
    low_a = Arrival(at=0, tenant="a", priority="low", durations=(1,) * 2_000)
    lanes = [s for s in simulate([low_a, b], {"high": 1, "normal": 2, "low": 1}) if s.tenant == "b"]
    assert max(s.started - s.arrived for s in lanes) <= math.ceil(10 / 2) * 1
