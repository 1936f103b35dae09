"""The overview's figures on known records: hours by status (edges, empty window), duration
percentiles per task, the tasks failing now, missed runs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from iotsched.core.alert_message import Alert
from iotsched.core.instance_record import (
    InstanceRecord,
    InstanceStatus,
)
from iotsched.core.overview import (
    durations,
    failing,
    hourly,
    missed_runs,
    percentile,
    window,
)
from tests.support import instance

NOW = datetime(2026, 11, 29, 12, 34, 56, tzinfo=UTC)
S = InstanceStatus


def ended(
    task_id: str,
    slot: datetime,
    status: InstanceStatus,
    seconds: float | None = 10.0,
    *,
    tenant: str | None = None,
    reason: str | None = None,
) -> InstanceRecord:
    inst = instance(task_id, slot, tenant=tenant)
    finished = slot + timedelta(seconds=seconds) if seconds is not None else None
    return inst.model_copy(update={"status": status, "finished_at": finished, "reason": reason})


def test_the_window_is_whole_hours_up_to_the_current_one() -> None:
    start, end = window(NOW, 24)
    assert end == datetime(2026, 11, 29, 13, tzinfo=UTC)
    assert start == datetime(2026, 11, 28, 13, tzinfo=UTC)
    assert window(datetime(2026, 11, 29, 12, tzinfo=UTC), 168)[0] == datetime(
        2026, 11, 22, 13, tzinfo=UTC
    )


def test_hours_count_instances_by_status_in_the_hour_of_their_slot() -> None:
    start, end = window(NOW, 24)
    records = [
        ended("a", start, S.SUCCEEDED),  # first instant of the window: first hour
        ended("a", start - timedelta(minutes=1), S.SUCCEEDED),  # just before: left out
        ended("b", start + timedelta(minutes=59), S.FAILED),  # still the first hour
        ended("b", start + timedelta(hours=1), S.FAILED),  # second hour
        ended("a", end - timedelta(minutes=1), S.SUCCEEDED),  # last hour
        instance("c", end - timedelta(minutes=1), status=S.RUNNING),
        ended("a", end, S.SUCCEEDED),  # the next hour (a future slot): left out
    ]
    hours = hourly(records, start, end)
    assert len(hours) == 24
    assert [h.hour for h in hours[:2]] == [start, start + timedelta(hours=1)]
    assert hours[0].counts == {"failed": 1, "succeeded": 1}
    assert hours[1].counts == {"failed": 1}
    assert hours[-1].counts == {"running": 1, "succeeded": 1}
    assert all(h.counts == {} and h.total == 0 for h in hours[2:-1])
    assert sum(h.total for h in hours) == 5


def test_an_empty_window_has_every_hour_at_zero_and_no_other_figure() -> None:
    start, end = window(NOW, 168)
    hours = hourly([], start, end)
    assert len(hours) == 168 and all(h.total == 0 for h in hours)
    assert hours[-1].hour == end - timedelta(hours=1)
    assert durations([]) == [] and failing([]) == [] and missed_runs([], start, end) == []


def test_percentiles_are_nearest_rank() -> None:
    values = [float(n) for n in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 95) == 95.0
    assert percentile([7.0], 95) == 7.0
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([1.0, 2.0, 3.0, 100.0], 95) == 100.0


def test_durations_per_task_over_outcomes_only() -> None:
    t0 = datetime(2026, 11, 29, 1, tzinfo=UTC)
    records = [ended("a", t0 + timedelta(minutes=n), S.SUCCEEDED, float(n + 1)) for n in range(20)]
    records += [
        ended("b", t0, S.FAILED, 30.0, tenant="acme"),
        ended("b", t0 + timedelta(minutes=1), S.TIMED_OUT, 90.0, tenant="acme"),
        ended("b", t0 + timedelta(minutes=2), S.CANCELLED, 1000.0, tenant="acme"),
        ended("b", t0 + timedelta(minutes=3), S.SKIPPED, 0.0, tenant="acme"),
        instance("b", t0 + timedelta(minutes=4), status=S.RUNNING, tenant="acme"),
    ]
    got = {d.task_id: d for d in durations(records)}
    assert list(got) == ["a", "b"]
    assert (got["a"].count, got["a"].p50_s, got["a"].p95_s, got["a"].max_s) == (20, 10, 19, 20)
    assert (got["b"].count, got["b"].p50_s, got["b"].p95_s, got["b"].max_s) == (2, 30, 90, 90)
    assert got["b"].tenant == "acme"


def test_a_task_fails_now_while_its_latest_outcome_is_a_failure() -> None:
    t0 = datetime(2026, 11, 29, 1, tzinfo=UTC)
    records = [
        # recovered: failed, then succeeded
        ended("ok", t0, S.FAILED),
        ended("ok", t0 + timedelta(hours=1), S.SUCCEEDED),
        # failing: a success, then three failures in a row; a later cancel and a running
        # instance do not clear it
        ended("bad", t0, S.SUCCEEDED),
        ended("bad", t0 + timedelta(hours=1), S.FAILED),
        ended("bad", t0 + timedelta(hours=2), S.TIMED_OUT),
        ended("bad", t0 + timedelta(hours=3), S.ABORTED, reason="3 of 4 shards failed"),
        ended("bad", t0 + timedelta(hours=4), S.CANCELLED),
        instance("bad", t0 + timedelta(hours=5), status=S.RUNNING),
        # the latest by end time: an earlier slot that ended last
        ended("late", t0 + timedelta(hours=2), S.SUCCEEDED, 10.0),
        ended("late", t0, S.FAILED, 3 * 3600.0 + 60),
    ]
    found = failing(records)
    assert [f.task_id for f in found] == ["late", "bad"]
    bad = found[1]
    assert (bad.status, bad.failures, bad.reason) == ("aborted", 3, "3 of 4 shards failed")
    assert bad.instance_id == records[5].instance_id
    assert found[0].failures == 1


def alert(alert_id: str, kind: str, raised_at: datetime | None) -> Alert:
    return Alert(
        type=kind,
        severity="high",
        task_id="t",
        tenant=None,
        instance_id=alert_id.split("#")[0],
        status="missed",
        alert_id=alert_id,
        raised_at=raised_at,
    )


def test_missed_runs_are_the_window_s_missed_run_alerts() -> None:
    start, end = window(NOW, 24)
    alerts = [
        alert("t@2026-11-29T12:00Z#missed_run", "missed_run", NOW),
        alert("t@2026-11-29T12:00Z#missed_run", "missed_run", NOW),  # read twice: once
        alert("t@2026-11-28T12:00Z#missed_run", "missed_run", start - timedelta(seconds=1)),
        alert("t@2026-11-29T11:00Z#failed", "failed", NOW),
        alert("t@2026-11-29T11:00Z#missed_run", "missed_run", start),
    ]
    got = missed_runs(alerts, start, end)
    assert [a.alert_id for a in got] == [
        "t@2026-11-29T12:00Z#missed_run",
        "t@2026-11-29T11:00Z#missed_run",
    ]
