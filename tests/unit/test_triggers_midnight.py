"""A zone whose DST transitions happen at midnight (America/Santiago), on both transitions.

Spring forward: 2026-09-06 00:00 -04 becomes 01:00 -03 (midnight does not exist).
Fall back: 2026-04-05 00:00 -03 becomes 2026-04-04 23:00 -04 (23:00-24:00 on the 4th repeats).
"""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from iotsched.core.decisions import business_date_for
from iotsched.core.task_definition import BusinessDateRule
from iotsched.core.triggers import cron_slots_after

ZONE = "America/Santiago"


def fires(expr: str, start: datetime, count: int) -> list[str]:
    it = cron_slots_after(expr, ZONE, start)
    return [next(it).astimezone(UTC).strftime("%m-%dT%H:%M") for _ in range(count)]


@pytest.mark.parametrize(
    ("expr", "start", "expected"),
    [
        # a midnight job on the night midnight does not exist: once, at the first valid instant
        (
            "0 0 * * *",
            datetime(2026, 9, 4, 12, tzinfo=UTC),
            ["09-05T04:00", "09-06T04:00", "09-07T03:00"],
        ),
        (
            "30 0 * * *",
            datetime(2026, 9, 4, 12, tzinfo=UTC),
            ["09-05T04:30", "09-06T04:00", "09-07T03:30"],
        ),
        # a fixed-time job inside the repeated hour: once, at the first occurrence
        (
            "30 23 * * *",
            datetime(2026, 4, 3, 12, tzinfo=UTC),
            ["04-04T02:30", "04-05T02:30", "04-06T03:30"],
        ),
        # the midnight job on the fall-back night: once
        (
            "0 0 * * *",
            datetime(2026, 4, 3, 12, tzinfo=UTC),
            ["04-04T03:00", "04-05T04:00", "04-06T04:00"],
        ),
        # a wildcard-hour job follows elapsed time: both 23:00s, and no 00:00 on the spring night
        (
            "0 * * * *",
            datetime(2026, 4, 5, 1, 30, tzinfo=UTC),
            ["04-05T02:00", "04-05T03:00", "04-05T04:00"],
        ),
        (
            "0 * * * *",
            datetime(2026, 9, 6, 2, 30, tzinfo=UTC),
            ["09-06T03:00", "09-06T04:00", "09-06T05:00"],
        ),
    ],
)
def test_santiago_midnight_transitions(expr: str, start: datetime, expected: list[str]) -> None:
    assert fires(expr, start, len(expected)) == expected


def test_the_moved_midnight_close_still_reports_the_day_that_ended() -> None:
    # the 00:00 close of 2026-09-06 fires at 01:00 local (04:00 UTC): yesterday is the 5th
    slot = datetime(2026, 9, 6, 4, 0, tzinfo=UTC)
    assert business_date_for(BusinessDateRule.PREVIOUS_DAY, slot, ZONE) == date(2026, 9, 5)
