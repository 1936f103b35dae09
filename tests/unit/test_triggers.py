"""Cron and rate grids (iotsched.core.triggers), including the Debian/Vixie DST rule."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from itertools import islice, pairwise, takewhile
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iotsched.core import triggers
from iotsched.core.task_triggers import (
    CronTrigger,
    RateTrigger,
)
from iotsched.core.triggers import TriggerError


def utc(text: str) -> datetime:
    """`2026-03-29T01:00` read as UTC."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def first(expr: str, zone: str, after: str, n: int) -> list[datetime]:
    return list(islice(triggers.cron_slots_after(expr, zone, utc(after)), n))


def between(expr: str, zone: str, start: str, end: str) -> list[datetime]:
    """Every slot in (start, end]."""
    slots = triggers.cron_slots_after(expr, zone, utc(start))
    return list(takewhile(lambda s: s <= utc(end), slots))


# (id, cron, zone, after (UTC), expected first slots (UTC))
CRON_TABLE = [
    (
        "utc-every-15-min",
        "*/15 * * * *",
        "UTC",
        "2026-11-29T12:07",
        ["2026-11-29T12:15", "2026-11-29T12:30", "2026-11-29T12:45"],
    ),
    (
        "strictly-after-a-slot",
        "0 * * * *",
        "UTC",
        "2026-11-29T12:00",
        ["2026-11-29T13:00", "2026-11-29T14:00"],
    ),
    (
        "zone-offset-applied",
        "5 0 * * *",
        "Asia/Shanghai",
        "2026-11-29T00:00",
        ["2026-11-29T16:05", "2026-11-30T16:05"],
    ),
    # Europe/Berlin, 2026-03-29: 02:00 CET -> 03:00 CEST. 02:30 does not exist: a fixed-time job
    # fires once, at the first valid instant after the gap (03:00 CEST = 01:00Z).
    (
        "berlin-gap-fixed-time",
        "30 2 * * *",
        "Europe/Berlin",
        "2026-03-28T12:00",
        ["2026-03-29T01:00", "2026-03-30T00:30"],
    ),
    (
        "berlin-gap-fixed-time-on-the-hour",
        "0 2 * * *",
        "Europe/Berlin",
        "2026-03-28T12:00",
        ["2026-03-29T01:00", "2026-03-30T00:00"],
    ),
    # Europe/Berlin, 2026-10-25: 03:00 CEST -> 02:00 CET. 02:30 happens twice: fixed-time fires
    # once, at the first occurrence (02:30 CEST = 00:30Z), not again at 02:30 CET (01:30Z).
    (
        "berlin-fold-fixed-time",
        "30 2 * * *",
        "Europe/Berlin",
        "2026-10-24T12:00",
        ["2026-10-25T00:30", "2026-10-26T01:30"],
    ),
    # Wildcard/step in the minute or hour field follows elapsed time: 02:00 and 02:30 local do
    # not exist on 2026-03-29 and are skipped ...
    (
        "berlin-gap-wildcard",
        "*/30 * * * *",
        "Europe/Berlin",
        "2026-03-29T00:00",
        ["2026-03-29T00:30", "2026-03-29T01:00", "2026-03-29T01:30"],
    ),
    # ... and the repeated hour fires in both occurrences on 2026-10-25.
    (
        "berlin-fold-wildcard",
        "*/30 * * * *",
        "Europe/Berlin",
        "2026-10-24T23:30",
        [
            "2026-10-25T00:00",  # 02:00 CEST
            "2026-10-25T00:30",  # 02:30 CEST
            "2026-10-25T01:00",  # 02:00 CET
            "2026-10-25T01:30",  # 02:30 CET
            "2026-10-25T02:00",  # 03:00 CET
        ],
    ),
    # America/New_York, 2026-03-08: 02:00 EST -> 03:00 EDT.
    (
        "new-york-gap-fixed-time",
        "30 2 * * *",
        "America/New_York",
        "2026-03-08T00:00",
        ["2026-03-08T07:00", "2026-03-09T06:30"],
    ),
    (
        "new-york-gap-wildcard",
        "*/30 * * * *",
        "America/New_York",
        "2026-03-08T06:00",
        ["2026-03-08T06:30", "2026-03-08T07:00", "2026-03-08T07:30"],
    ),
    # America/New_York, 2026-11-01: 02:00 EDT -> 01:00 EST; 01:30 happens twice.
    (
        "new-york-fold-fixed-time",
        "30 1 * * *",
        "America/New_York",
        "2026-11-01T00:00",
        ["2026-11-01T05:30", "2026-11-02T06:30"],
    ),
    (
        "new-york-fold-wildcard-hour",
        "15 * * * *",
        "America/New_York",
        "2026-11-01T04:00",
        ["2026-11-01T04:15", "2026-11-01T05:15", "2026-11-01T06:15", "2026-11-01T07:15"],
    ),
    (
        "feb-29-next-leap-year",
        "0 0 29 2 *",
        "UTC",
        "2026-03-01T00:00",
        ["2028-02-29T00:00", "2032-02-29T00:00"],
    ),
    (
        "day-31-skips-short-months",
        "0 0 31 * *",
        "UTC",
        "2026-04-01T00:00",
        ["2026-05-31T00:00", "2026-07-31T00:00", "2026-08-31T00:00", "2026-10-31T00:00"],
    ),
    (
        "every-monday",
        "0 9 * * 1",
        "UTC",
        "2026-11-29T12:00",  # a Sunday
        ["2026-11-30T09:00", "2026-12-07T09:00", "2026-12-14T09:00"],
    ),
    (
        "every-monday-by-name-in-a-zone",
        "0 9 * * MON",
        "Asia/Shanghai",
        "2026-11-29T12:00",
        ["2026-11-30T01:00", "2026-12-07T01:00"],
    ),
]


@pytest.mark.parametrize(
    ("expr", "zone", "after", "expected"),
    [pytest.param(*row[1:], id=row[0]) for row in CRON_TABLE],
)
def test_cron_slots(expr: str, zone: str, after: str, expected: list[str]) -> None:
    assert first(expr, zone, after, len(expected)) == [utc(e) for e in expected]


@pytest.mark.parametrize(
    ("expr", "zone", "day"),
    [
        ("30 2 * * *", "Europe/Berlin", date(2026, 3, 29)),
        ("30 2 * * *", "Europe/Berlin", date(2026, 10, 25)),
        ("0 2 * * *", "Europe/Berlin", date(2026, 10, 25)),
        ("30 2 * * *", "America/New_York", date(2026, 3, 8)),
        ("30 1 * * *", "America/New_York", date(2026, 11, 1)),
        ("0,30 1 * * *", "America/New_York", date(2026, 11, 1)),
    ],
)
def test_fixed_time_job_fires_once_on_a_dst_day(expr: str, zone: str, day: date) -> None:
    tz = ZoneInfo(zone)
    start = datetime.combine(day, datetime.min.time(), tzinfo=tz).astimezone(UTC)
    end = datetime.combine(day + timedelta(days=1), datetime.min.time(), tzinfo=tz).astimezone(UTC)
    slots = list(takewhile(lambda s: s < end, triggers.cron_slots_after(expr, zone, start)))
    per_minute_field = len(expr.split()[0].split(","))
    assert len(slots) == per_minute_field
    assert all(s.astimezone(tz).date() == day for s in slots)


def test_wildcard_job_skips_nonexistent_wall_times() -> None:
    slots = between("*/30 * * * *", "Europe/Berlin", "2026-03-28T23:00", "2026-03-29T02:00")
    walls = [s.astimezone(ZoneInfo("Europe/Berlin")).strftime("%H:%M") for s in slots]
    assert walls == ["00:30", "01:00", "01:30", "03:00", "03:30", "04:00"]


def test_wildcard_job_fires_in_both_occurrences_of_the_repeated_hour() -> None:
    slots = between("*/30 * * * *", "Europe/Berlin", "2026-10-24T23:30", "2026-10-25T01:30")
    walls = [s.astimezone(ZoneInfo("Europe/Berlin")).strftime("%H:%M %Z") for s in slots]
    assert walls == ["02:00 CEST", "02:30 CEST", "02:00 CET", "02:30 CET"]


@settings(max_examples=40, deadline=None)
@given(start=st.dates(min_value=date(2024, 1, 1), max_value=date(2032, 12, 31)))
def test_daily_fixed_time_job_fires_exactly_once_per_local_day(start: date) -> None:
    """Across any year, DST days included, `30 2 * * *` in Berlin fires once per local date."""
    tz = ZoneInfo("Europe/Berlin")
    after = datetime.combine(start, datetime.min.time(), tzinfo=tz).astimezone(UTC)
    slots = list(islice(triggers.cron_slots_after("30 2 * * *", "Europe/Berlin", after), 366))
    days = [s.astimezone(tz).date() for s in slots]
    assert days == [start + timedelta(days=i) for i in range(366)]


@settings(max_examples=40, deadline=None)
@given(
    after=st.datetimes(
        min_value=datetime(2024, 1, 1), max_value=datetime(2032, 12, 31), timezones=st.just(UTC)
    ),
    zone=st.sampled_from(["UTC", "Europe/Berlin", "America/New_York", "Australia/Sydney"]),
)
def test_wildcard_job_follows_elapsed_time(after: datetime, zone: str) -> None:
    """`*/30 * * * *` in a whole-hour-offset zone: UTC slots exactly 30 minutes apart, always."""
    slots = list(islice(triggers.cron_slots_after("*/30 * * * *", zone, after), 200))
    assert slots[0] > after
    assert all(s.second == 0 and s.microsecond == 0 and s.tzinfo is UTC for s in slots)
    assert all(b - a == timedelta(minutes=30) for a, b in pairwise(slots))


@settings(max_examples=100, deadline=None)
@given(
    after=st.datetimes(
        min_value=datetime(2024, 1, 1), max_value=datetime(2030, 12, 31), timezones=st.just(UTC)
    ),
    later=st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=3)),
    expr=st.sampled_from(["*/15 * * * *", "30 2 * * *", "5 0 * * 1-5", "0 */6 * * *"]),
    zone=st.sampled_from(["UTC", "Europe/Berlin", "America/New_York"]),
)
def test_cron_grid_does_not_depend_on_where_you_start(
    after: datetime, later: timedelta, expr: str, zone: str
) -> None:
    """Two dispatchers starting at different instants see the same grid (a suffix of it)."""
    early = list(islice(triggers.cron_slots_after(expr, zone, after), 400))
    late = list(islice(triggers.cron_slots_after(expr, zone, after + later), 20))
    assert early == sorted(set(early))
    assert all(s > after + later for s in late)
    assert late == [s for s in early if s > after + later][: len(late)]


# -- rates ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "minutes"),
    [
        ("15m", 15),
        ("1h", 60),
        ("1d", 1440),
        ("2 days", 2880),
        ("90 minutes", 90),
        ("rate(1 hour)", 60),
        ("rate(5 minutes)", 5),
    ],
)
def test_parse_rate(text: str, minutes: int) -> None:
    assert triggers.parse_rate(text) == timedelta(minutes=minutes)


@pytest.mark.parametrize("text", ["0m", "15s", "1w", "", "m", "-5m", "1.5h", "rate(1 hour"])
def test_parse_rate_rejects(text: str) -> None:
    with pytest.raises(TriggerError):
        triggers.parse_rate(text)


@pytest.mark.parametrize(
    ("rate", "anchor", "after", "expected"),
    [
        pytest.param(
            "15m",
            None,
            "2026-11-29T12:07",
            ["2026-11-29T12:15", "2026-11-29T12:30"],
            id="15m-epoch",
        ),
        pytest.param(
            "15m",
            None,
            "2026-11-29T12:15",
            ["2026-11-29T12:30", "2026-11-29T12:45"],
            id="15m-strictly-after",
        ),
        pytest.param(
            "1h", None, "2026-11-29T12:00", ["2026-11-29T13:00", "2026-11-29T14:00"], id="1h-epoch"
        ),
        pytest.param(
            "1d", None, "2026-11-29T12:00", ["2026-11-30T00:00", "2026-12-01T00:00"], id="1d-epoch"
        ),
        pytest.param(
            "1h",
            "2026-01-01T00:05",
            "2026-11-29T12:00",
            ["2026-11-29T12:05", "2026-11-29T13:05"],
            id="1h-custom-anchor",
        ),
        pytest.param(
            "1d",
            "2026-06-01T06:30",
            "2026-11-29T12:00",
            ["2026-11-30T06:30", "2026-12-01T06:30"],
            id="1d-custom-anchor",
        ),
    ],
)
def test_rate_slots(rate: str, anchor: str | None, after: str, expected: list[str]) -> None:
    fields: dict[str, object] = {"rate": rate}
    if anchor is not None:
        fields["anchor"] = utc(anchor)
    trigger = RateTrigger.model_validate(fields)
    assert list(islice(trigger.slots_after(utc(after)), len(expected))) == [
        utc(e) for e in expected
    ]


@settings(max_examples=200, deadline=None)
@given(
    minutes=st.integers(min_value=1, max_value=3 * 1440),
    after=st.datetimes(
        min_value=datetime(2000, 1, 1), max_value=datetime(2040, 1, 1), timezones=st.just(UTC)
    ),
)
def test_rate_grid_is_anchored_at_the_epoch(minutes: int, after: datetime) -> None:
    period = timedelta(minutes=minutes)
    slots = list(islice(triggers.rate_slots_after(period, after), 3))
    assert after < slots[0] <= after + period
    for slot in slots:
        assert (slot - triggers.RATE_EPOCH) % period == timedelta(0)
    assert slots[1] - slots[0] == period
    assert slots[2] - slots[1] == period


# -- invalid expressions ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "expr",
    [
        pytest.param("0 10 * * ? *", id="aws-6-field"),
        pytest.param("0 10 * * * 2026", id="6-field-with-year"),
        pytest.param("61 * * * *", id="minute-61"),
        pytest.param("0 24 * * *", id="hour-24"),
        pytest.param("0 0 32 * *", id="day-32"),
        pytest.param("0 0 * 13 *", id="month-13"),
        pytest.param("* * * *", id="4-fields"),
        pytest.param("", id="empty"),
        pytest.param("every monday", id="words"),
    ],
)
def test_invalid_cron_raises_trigger_error(expr: str) -> None:
    with pytest.raises(TriggerError):
        triggers.check_cron(expr)


def test_check_cron_normalises_whitespace() -> None:
    assert triggers.check_cron("  */5   *  * * *  ") == "*/5 * * * *"


@pytest.mark.parametrize("zone", ["Mars/Olympus_Mons", "../etc/passwd", "", "UTC+8"])
def test_unknown_timezone_raises_trigger_error(zone: str) -> None:
    with pytest.raises(TriggerError):
        triggers.load_zone(zone)


def test_naive_instant_is_refused() -> None:
    with pytest.raises(ValueError, match="naive"):
        next(triggers.cron_slots_after("* * * * *", "UTC", datetime(2026, 1, 1)))
    with pytest.raises(ValueError, match="naive"):
        next(triggers.rate_slots_after(timedelta(minutes=5), datetime(2026, 1, 1)))


def test_cron_trigger_model_uses_the_same_grid() -> None:
    trigger = CronTrigger(cron="30 2 * * *", timezone="Europe/Berlin")
    assert next(iter(trigger.slots_after(utc("2026-03-28T12:00")))) == utc("2026-03-29T01:00")
