"""Per-tenant in-flight caps (`max_concurrent_shards`, docs/design.md section 12, "Quotas") on a
model of the shard lanes.

The model extends test_fairness_model's: one FIFO queue per priority, each read by its own
workers, every shard taking at most `D` seconds; and now each tenant may have a cap on its
shards running at once, across every priority. A worker that takes a shard whose tenant holds
its cap runs nothing: the shard goes back to the end of its queue, visible again `R` seconds
later (the delayed fresh copy), and the worker takes the next message. Properties:

* no tenant starves: every shard of every tenant starts, capped or not;
* a capped tenant never has more than its cap running;
* a tenant's backlog holds at most its cap of a priority's workers: with the other tenants of
  a priority capped at S together (fewer than its c workers), a shard of an uncapped tenant
  starts within ceil((k + 1) / (c - S)) * D of its arrival, k being its own tenant's shards of
  that priority waiting ahead of it, whatever the others' backlogs.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

PRIORITIES = ("high", "normal", "low")
D = 10  # the longest shard, in model seconds
R = 3  # how long a deferred shard stays away


@dataclass(frozen=True)
class Arrival:
    at: int
    tenant: str
    priority: str
    durations: tuple[int, ...]  # one per shard, each in 1..D


@dataclass
class Shard:
    tenant: str
    priority: str
    arrived: int
    duration: int
    visible: int
    started: int | None = None
    ahead: int = 0  # its tenant's shards of its priority waiting ahead of it at its arrival
    deferred: int = 0


@dataclass
class Run:
    starts: list[Shard]
    most: dict[str, int]  # per tenant, the most shards it ever had running at once


def simulate(
    arrivals: list[Arrival], workers: dict[str, int], caps: dict[str, int], *, limit: int = 200_000
) -> Run:
    shards = [
        Shard(a.tenant, a.priority, a.at, d, a.at)
        for a in sorted(arrivals, key=lambda a: a.at)
        for d in a.durations
    ]
    queues: dict[str, deque[Shard]] = {p: deque() for p in PRIORITIES}
    busy: dict[str, list[int]] = {p: [] for p in PRIORITIES}  # ends of the running shards
    running: dict[str, list[tuple[int, Shard]]] = {}
    most: dict[str, int] = {}
    pending = deque(shards)
    t = 0
    while pending or any(queues.values()) or any(busy.values()):
        assert t < limit, "the model did not finish"
        for p in PRIORITIES:
            busy[p] = [end for end in busy[p] if end > t]
        for tenant, runs in running.items():
            running[tenant] = [(end, s) for end, s in runs if end > t]
        while pending and pending[0].arrived <= t:
            shard = pending.popleft()
            shard.ahead = sum(
                1 for s in queues[shard.priority] if s.tenant == shard.tenant and s.started is None
            )
            queues[shard.priority].append(shard)
        for p in PRIORITIES:
            queue = queues[p]
            seen = 0
            while len(busy[p]) < workers[p] and seen < len(queue):
                shard = queue.popleft()
                if shard.visible > t:  # a deferred copy not back yet
                    queue.append(shard)
                    seen += 1
                    continue
                mine = running.setdefault(shard.tenant, [])
                cap = caps.get(shard.tenant)
                if cap is not None and len(mine) >= cap:
                    shard.visible, shard.deferred = t + R, shard.deferred + 1
                    queue.append(shard)
                    seen += 1
                    continue
                shard.started = t
                mine.append((t + shard.duration, shard))
                busy[p].append(t + shard.duration)
                most[shard.tenant] = max(most.get(shard.tenant, 0), len(mine))
                seen = 0
        t += 1
    return Run(shards, most)


tenants = st.sampled_from(["a", "b", "c", "d"])
arrival = st.builds(
    Arrival,
    at=st.integers(0, 300),
    tenant=tenants,
    priority=st.sampled_from(PRIORITIES),
    durations=st.lists(st.integers(1, D), min_size=1, max_size=40).map(tuple),
)
lane_workers = st.fixed_dictionaries({p: st.integers(1, 6) for p in PRIORITIES})
tenant_caps = st.dictionaries(tenants, st.integers(1, 4), max_size=4)


@settings(max_examples=120, deadline=None)
@given(st.lists(arrival, min_size=1, max_size=25), lane_workers, tenant_caps)
def test_no_tenant_starves_and_a_capped_tenant_never_runs_past_its_cap(
    arrivals: list[Arrival], workers: dict[str, int], caps: dict[str, int]
) -> None:
    run = simulate(arrivals, workers, caps)
    assert all(s.started is not None for s in run.starts)  # every shard started
    assert len(run.starts) == sum(len(a.durations) for a in arrivals)
    for tenant, cap in caps.items():
        assert run.most.get(tenant, 0) <= cap
    for s in run.starts:
        assert s.started is not None and s.started >= s.arrived


@settings(max_examples=60, deadline=None)
@given(
    st.lists(arrival, min_size=1, max_size=25),
    st.integers(2, 8),
    st.dictionaries(st.sampled_from(["a", "c", "d"]), st.integers(1, 3), min_size=3, max_size=3),
    st.integers(0, 300),
)
def test_an_uncapped_tenant_keeps_the_workers_the_others_caps_leave(
    arrivals: list[Arrival], c: int, caps: dict[str, int], flood: int
) -> None:
    """Tenant b (uncapped) at `normal` beside a, c, d capped at S together: each b shard starts
    within ceil((k + 1) / (c - S)) * D, however large their backlog (a flood of a)."""
    total = sum(caps.values())
    if total >= c:
        c = total + 1
    workers = {"high": 1, "normal": c, "low": 1}
    normal = [Arrival(x.at, x.tenant, "normal", x.durations) for x in arrivals] + [
        Arrival(0, "a", "normal", (D,) * flood)
    ]
    run = simulate(normal, workers, caps)
    assert all(s.started is not None for s in run.starts)
    for s in run.starts:
        if s.tenant == "b":
            assert s.started is not None
            bound = math.ceil((s.ahead + 1) / (c - total)) * D
            assert s.started - s.arrived <= bound, s


def test_a_capped_backlog_leaves_the_other_tenant_its_workers() -> None:
    """A's 2,000-shard backlog at normal, capped at 2 of 4 workers: B's 10 shards, 5 s later,
    start within ceil(10 / 2) shards' time, as on a queue of their own with 2 workers; without
    the cap they wait out A's backlog."""
    a = Arrival(at=0, tenant="a", priority="normal", durations=(1,) * 2_000)
    b = Arrival(at=5, tenant="b", priority="normal", durations=(1,) * 10)
    workers = {"high": 1, "normal": 4, "low": 1}
    capped = [s for s in simulate([a, b], workers, {"a": 2}).starts if s.tenant == "b"]
    assert max(s.started - s.arrived for s in capped if s.started is not None) <= 5
    uncapped = [s for s in simulate([a, b], workers, {}).starts if s.tenant == "b"]
    assert min(s.started - s.arrived for s in uncapped if s.started is not None) >= 2_000 // 4 - 5
