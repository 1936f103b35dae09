"""The overview (design.md, section 17): the figures of a window of hours, read from the
records the indexes already hold, with bounded work and nothing written.

Instances come from the listing every status shares (`InstanceStore.list_instances`, newest
slot first: a keys-only index query per status and bucket, then the items by key), page after
page until a slot before the window or the cap; missed runs from the alert log's newest
alerts; queue depths from the queue gauge. No item is written for statistics: every figure is
counted at read time.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, Protocol, runtime_checkable

from iotsched.core import overview as figures
from iotsched.core.instance_record import (
    InstanceRecord,
    InstanceStatus,
)
from iotsched.core.timeutil import iso
from iotsched.ports.clock import Clock
from iotsched.ports.instances import InstanceStore
from iotsched.ports.messaging import (
    AlertLog,
    QueueGauge,
)

#: Instances one overview reads at most (of every tenant, as the index lists them); past it
#: the answer says from which slot on its hours are complete.
MAX_INSTANCES = 5000
#: Instances per listing request.
PAGE = 500
#: Alerts read for the missed runs, newest first.
MAX_ALERTS = 1000
#: Missed-run alerts listed (all are counted).
LISTED_MISSED = 50


@runtime_checkable
class OverviewPorts(Protocol):
    """What the overview reads: instances, the alert log, the queue gauge, the time."""

    @property
    def instances(self) -> InstanceStore: ...

    @property
    def alert_log(self) -> AlertLog: ...

    @property
    def gauge(self) -> QueueGauge | None: ...

    @property
    def clock(self) -> Clock: ...


def _read_window(
    store: InstanceStore,
    start: datetime,
    end: datetime,
    keep: Callable[[str | None], bool],
    cap: int,
) -> tuple[list[InstanceRecord], int, datetime | None]:
    """The kept instances with a slot in `[start, end)`, how many were read, and, when the
    cap stopped the reading first, the slot of the last one read (its hour and older ones may
    miss instances)."""
    kept: list[InstanceRecord] = []
    read = 0
    cursor: str | None = None
    while True:
        want = min(PAGE, cap - read)
        page = store.list_instances(limit=want, before=cursor)
        for inst in page:
            read += 1
            if inst.slot < start:  # newest first: the rest is older still
                return kept, read, None
            if inst.slot < end and keep(inst.tenant):
                kept.append(inst)
        if len(page) < want:
            return kept, read, None
        if read >= cap:
            return kept, read, page[-1].slot
        cursor = page[-1].instance_id


def overview(
    ports: OverviewPorts,
    *,
    hours: int,
    keep: Callable[[str | None], bool],
    operator: bool,
    cap: int = MAX_INSTANCES,
) -> dict[str, Any]:
    """The figures of the last `hours` hours (the current one included) over the instances and
    alerts whose tenant `keep` accepts. Figures of every tenant's work are an operator's: the
    queue depths, and how many instances were read to count the kept ones (to a tenant, its
    own count, so that it learns nothing of the others' volume)."""
    now = ports.clock.now()
    start, end = figures.window(now, hours)
    instances, read, partial_before = _read_window(ports.instances, start, end, keep, cap)
    hourly = figures.hourly(instances, start, end)
    seen = {status for h in hourly for status in h.counts}
    alerts = ports.alert_log.recent(limit=MAX_ALERTS)
    missed = figures.missed_runs((a for a in alerts if keep(a.tenant)), start, end)
    oldest_alert = alerts[-1].raised_at if alerts else None
    depths = ports.gauge.depths() if operator and ports.gauge is not None else None
    return {
        "now": iso(now),
        "hours": hours,
        "start": iso(start),
        "end": iso(end),
        "statuses": [s.value for s in InstanceStatus if s.value in seen],
        "hourly": [{"hour": iso(h.hour), "total": h.total, "counts": h.counts} for h in hourly],
        "instances": len(instances),
        "read": read if operator else len(instances),
        "capped": partial_before is not None,
        # the first hour all of whose instances were read
        "complete_from": iso(figures.floor_hour(partial_before) + timedelta(hours=1))
        if partial_before
        else None,
        "durations": [
            {
                "task_id": d.task_id,
                "tenant": d.tenant,
                "count": d.count,
                "p50_s": d.p50_s,
                "p95_s": d.p95_s,
                "max_s": d.max_s,
            }
            for d in figures.durations(instances)
        ],
        "failing": [
            {
                "task_id": f.task_id,
                "tenant": f.tenant,
                "instance_id": f.instance_id,
                "status": f.status,
                "reason": f.reason,
                "finished_at": iso(f.finished_at),
                "failures": f.failures,
            }
            for f in figures.failing(instances)
        ],
        "missed_runs": {
            "count": len(missed),
            # the log's newest alerts did not reach back to the window's start
            "capped": len(alerts) >= MAX_ALERTS
            and oldest_alert is not None
            and oldest_alert >= start,
            "alerts": [
                {
                    "alert_id": a.alert_id,
                    "task_id": a.task_id,
                    "tenant": a.tenant,
                    "instance_id": a.instance_id,
                    "raised_at": iso(a.raised_at) if a.raised_at else None,
                    "reason": a.reason,
                }
                for a in missed[:LISTED_MISSED]
            ],
        },
        "queues": None
        if depths is None
        else [
            {
                "queue": d.queue,
                "visible": d.visible,
                "in_flight": d.in_flight,
                "delayed": d.delayed,
            }
            for d in depths
        ],
    }
