"""When a trigger fires: the grid of slots of cron, rate and one-time triggers, as UTC instants
on whole minutes.

Cron is 5-field cron in an IANA timezone, evaluated by `cronsim` with the Debian/Vixie
daylight-saving rule (docs/design.md, section 1). Rates are anchored to a stated epoch
(1970-01-01T00:00Z unless the task names another), so every dispatcher computes the same grid.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from iotsched.core.timeutil import floor_minute, require_aware

RATE_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MAX_RATE_MINUTES = 366 * 24 * 60
_RATE = re.compile(r"^\s*(\d+)\s*(m|min|minute|minutes|h|hour|hours|d|day|days)\s*$")
_UNIT_MINUTES = {"m": 1, "min": 1, "minute": 1, "minutes": 1, "h": 60, "hour": 60, "hours": 60}


class TriggerError(ValueError):
    """A trigger expression that cannot be evaluated."""


def load_zone(name: str) -> ZoneInfo:
    """The IANA zone `name`; raises TriggerError for an unknown zone."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise TriggerError(f"unknown timezone {name!r}") from exc


def check_cron(expr: str) -> str:
    """Validate a 5-field cron expression and return it normalised; raises TriggerError."""
    fields = expr.split()
    if len(fields) != 5:
        raise TriggerError(
            f"cron {expr!r} must have 5 fields (minute hour day-of-month month day-of-week); "
            "AWS 6-field cron is not accepted"
        )
    try:
        CronSim(" ".join(fields), datetime(2000, 1, 1, tzinfo=UTC))
    except CronSimError as exc:
        raise TriggerError(f"invalid cron {expr!r}: {exc}") from exc
    return " ".join(fields)


def parse_rate(text: str) -> timedelta:
    """`15m`, `1h`, `2d` (or `rate(1 hour)`-like words) as a period of whole minutes."""
    inner = text.strip()
    if inner.startswith("rate(") and inner.endswith(")"):
        inner = inner[5:-1]
    match = _RATE.match(inner)
    if not match:
        raise TriggerError(f"invalid rate {text!r}: use a number and m, h or d, e.g. 15m")
    value, unit = int(match.group(1)), match.group(2)
    minutes = value * _UNIT_MINUTES.get(unit, 24 * 60)
    if minutes < 1:
        raise TriggerError(f"invalid rate {text!r}: the period must be at least one minute")
    if minutes > MAX_RATE_MINUTES:
        raise TriggerError(f"invalid rate {text!r}: the period must be at most 366 days")
    return timedelta(minutes=minutes)


def cron_slots_after(expr: str, zone: str, after: datetime) -> Iterator[datetime]:
    """Fire instants of `expr` in `zone` strictly after `after`, in UTC, ascending."""
    tz = load_zone(zone)
    start = require_aware(after).astimezone(tz)
    try:
        for local in CronSim(expr, start):
            yield local.astimezone(UTC)
    except CronSimError as exc:  # pragma: no cover - validated at load time
        raise TriggerError(str(exc)) from exc


def rate_slots_after(
    period: timedelta, after: datetime, anchor: datetime = RATE_EPOCH
) -> Iterator[datetime]:
    """Grid instants `anchor + k * period` strictly after `after`, ascending."""
    after = require_aware(after)
    anchor = require_aware(anchor)
    steps = (after - anchor) // period + 1
    slot = anchor + steps * period
    while True:
        yield floor_minute(slot)
        slot += period
