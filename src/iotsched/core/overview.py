"""The overview's figures, from instance records and alerts (design.md, section 17).

Pure: the caller reads the records of a window (newest slot first, as the index lists them)
and hands them here with the window's bounds. An instance counts in the hour of its slot (the
instant it was scheduled for), so a tick's firings land in the hour they were due whatever
their latency; hours are UTC and end-exclusive.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from iotsched.core.alert_message import Alert
from iotsched.core.instance_record import InstanceRecord, InstanceStatus

#: The windows the overview answers, in hours: the last day and the last week.
WINDOW_HOURS = (24, 168)

#: Ends that say how a task is doing: a cancel or a skip says nothing about its health.
OUTCOMES = frozenset(
    {
        InstanceStatus.SUCCEEDED,
        InstanceStatus.FAILED,
        InstanceStatus.TIMED_OUT,
        InstanceStatus.ABORTED,
    }
)
#: The outcomes that count as the task failing.
FAILURES = frozenset({InstanceStatus.FAILED, InstanceStatus.TIMED_OUT, InstanceStatus.ABORTED})


def floor_hour(t: datetime) -> datetime:
    """`t` down to its hour."""
    return t.replace(minute=0, second=0, microsecond=0)


def window(now: datetime, hours: int) -> tuple[datetime, datetime]:
    """The `hours` whole hours up to and including the current one: `[start, end)`, the
    current hour last (partly in the future)."""
    end = floor_hour(now) + timedelta(hours=1)
    return end - timedelta(hours=hours), end


@dataclass(frozen=True)
class HourCounts:
    """Instances whose slot is in `[hour, hour + 1h)`, by status."""

    hour: datetime
    counts: dict[str, int]

    @property
    def total(self) -> int:
        """Every instance of the hour."""
        return sum(self.counts.values())


def hourly(instances: Iterable[InstanceRecord], start: datetime, end: datetime) -> list[HourCounts]:
    """One entry per hour of `[start, end)`, oldest first, each with its instances counted by
    status (only the statuses seen); instances whose slot is outside the window are left out."""
    hours = int((end - start).total_seconds() // 3600)
    counts: list[Counter[str]] = [Counter() for _ in range(hours)]
    for inst in instances:
        if start <= inst.slot < end:
            counts[int((inst.slot - start).total_seconds() // 3600)][inst.status.value] += 1
    return [
        HourCounts(start + timedelta(hours=n), dict(sorted(c.items())))
        for n, c in enumerate(counts)
    ]


def percentile(values: Sequence[float], p: float) -> float:
    """The nearest-rank `p`th percentile of `values` (not empty): the smallest value with at
    least p% of the values at or below it, always one of the values."""
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass(frozen=True)
class Durations:
    """A task's instance durations (claim to end) over the window's ended outcomes."""

    task_id: str
    tenant: str | None
    count: int
    p50_s: float
    p95_s: float
    max_s: float


def durations(instances: Iterable[InstanceRecord]) -> list[Durations]:
    """Per task, by task id: p50, p95 and max of the durations of its instances that ended
    with an outcome (succeeded, failed, timed out, aborted); cancels and skips never ran to
    an end and would pull the figures down."""
    by_task: dict[str, list[float]] = {}
    tenants: dict[str, str | None] = {}
    for inst in instances:
        if inst.status in OUTCOMES and inst.finished_at is not None:
            seconds = max((inst.finished_at - inst.created_at).total_seconds(), 0.0)
            by_task.setdefault(inst.task_id, []).append(seconds)
            tenants[inst.task_id] = inst.tenant
    return [
        Durations(
            task_id=task,
            tenant=tenants[task],
            count=len(values),
            p50_s=percentile(values, 50),
            p95_s=percentile(values, 95),
            max_s=max(values),
        )
        for task, values in sorted(by_task.items())
    ]


@dataclass(frozen=True)
class Failing:
    """A task whose latest outcome in the window is a failure."""

    task_id: str
    tenant: str | None
    instance_id: str
    status: str
    reason: str | None
    finished_at: datetime
    failures: int  # failed outcomes in a row up to the latest, within the window


def failing(instances: Iterable[InstanceRecord]) -> list[Failing]:
    """The tasks failing now: those whose latest outcome (by end time, then slot) is failed,
    timed out or aborted, with how many failures in a row led to it, the most recent first.
    A later cancel, skip or open instance does not clear it: only a success does."""
    ended: dict[str, list[InstanceRecord]] = {}
    for inst in instances:
        if inst.status in OUTCOMES and inst.finished_at is not None:
            ended.setdefault(inst.task_id, []).append(inst)
    found = []
    for task, runs in ended.items():
        runs.sort(key=lambda i: (i.finished_at or i.created_at, i.slot, i.instance_id))
        latest = runs[-1]
        if latest.status not in FAILURES:
            continue
        streak = 0
        for run in reversed(runs):
            if run.status not in FAILURES:
                break
            streak += 1
        assert latest.finished_at is not None
        found.append(
            Failing(
                task_id=task,
                tenant=latest.tenant,
                instance_id=latest.instance_id,
                status=latest.status.value,
                reason=latest.reason,
                finished_at=latest.finished_at,
                failures=streak,
            )
        )
    return sorted(found, key=lambda f: (f.finished_at, f.task_id), reverse=True)


MISSED_RUN = "missed_run"


def missed_runs(alerts: Iterable[Alert], start: datetime, end: datetime) -> list[Alert]:
    """The `missed_run` alerts raised in `[start, end)`, newest first (one per task and missed
    fire time: the alert's id names both, so a repeated sweep adds none)."""
    kept = {
        a.alert_id: a
        for a in alerts
        if a.type == MISSED_RUN and a.raised_at is not None and start <= a.raised_at < end
    }
    return sorted(kept.values(), key=lambda a: (a.raised_at or start, a.alert_id), reverse=True)
