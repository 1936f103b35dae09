"""Explain a cron schedule around daylight-saving changes: which fires moved, doubled or vanished.

`iotsched times` prints this so that operators can check a schedule across a DST night before
deploying it. Pure: cron evaluation plus zoneinfo arithmetic, no clock.
"""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from cronsim import CronSim

from iotsched.core.timeutil import require_aware
from iotsched.core.triggers import check_cron, cron_slots_after, load_zone
from iotsched.core.value_types import Frozen


class FireTime(Frozen):
    """One line of a schedule's timeline. `utc` is None for a wall time that never fires."""

    utc: datetime | None
    local: datetime
    note: str = ""


def _exists(naive: datetime, tz: ZoneInfo) -> bool:
    aware = naive.replace(tzinfo=tz)
    return aware.astimezone(UTC).astimezone(tz).replace(tzinfo=None) == naive


def _ambiguous(naive: datetime, tz: ZoneInfo) -> bool:
    return (
        naive.replace(tzinfo=tz, fold=0).utcoffset() != naive.replace(tzinfo=tz, fold=1).utcoffset()
    )


def explain_cron(expr: str, zone: str, start: datetime, end: datetime) -> list[FireTime]:
    """Fire instants of `expr` in `zone` within `(start, end]`, with DST notes.

    Notes: `moved: HH:MM does not exist (spring forward)` for a fixed-time fire shifted past the
    gap; `skipped: ... does not exist` for a wall time that does not fire at all;
    `repeated hour, first|second occurrence` for fires inside the fall-back hour.
    """
    expr = check_cron(expr)
    tz = load_zone(zone)
    start, end = require_aware(start), require_aware(end)
    fires = []
    for slot in cron_slots_after(expr, zone, start):
        if slot > end:
            break
        fires.append(slot)
    local_start = start.astimezone(tz).replace(tzinfo=None)
    local_end = end.astimezone(tz).replace(tzinfo=None)
    wall_times = []
    for naive in CronSim(expr, local_start):
        if naive > local_end:
            break
        wall_times.append(naive)
    gaps = [t for t in wall_times if not _exists(t, tz)]
    wall_set = set(wall_times)
    lines: list[FireTime] = []
    moved_from: set[datetime] = set()
    for slot in fires:
        local = slot.astimezone(tz)
        naive = local.replace(tzinfo=None, fold=0)
        note = ""
        if naive not in wall_set:
            origin = max((g for g in gaps if g < naive), default=None)
            if origin is not None:
                moved_from.add(origin)
                note = f"moved: {origin:%H:%M} does not exist (spring forward)"
        elif _ambiguous(naive, tz):
            note = f"repeated hour, {'second' if local.fold else 'first'} occurrence"
        lines.append(FireTime(utc=slot, local=local, note=note))
    for gap in gaps:
        if gap not in moved_from:
            lines.append(
                FireTime(
                    utc=None,
                    local=gap.replace(tzinfo=tz),
                    note=f"skipped: {gap:%H:%M} does not exist (spring forward)",
                )
            )
    lines.sort(key=lambda f: f.utc if f.utc is not None else f.local.astimezone(UTC))
    return lines
