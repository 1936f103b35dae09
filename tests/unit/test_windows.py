"""Maintenance windows: openings, closes and the next opening, DST nights included."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from iotsched.core import windows
from iotsched.core.task_fleet_safety import Window
from iotsched.core.windows import closes_at, is_open, next_open, opening_at

BERLIN = Window(cron="0 2 * * *", duration="2h", timezone="Europe/Berlin")


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize(
    ("night", "opens", "closes"),
    [
        ("2026-03-28T12:00", "2026-03-29T01:00", "2026-03-29T03:00"),  # 02:00 does not exist
        ("2026-03-29T12:00", "2026-03-30T00:00", "2026-03-30T02:00"),  # first CEST night
        ("2026-10-24T12:00", "2026-10-25T00:00", "2026-10-25T02:00"),  # 02:00 happens twice
        ("2026-10-25T12:00", "2026-10-26T01:00", "2026-10-26T03:00"),  # first CET night
    ],
)
def test_a_berlin_window_opens_once_a_night_for_its_duration_across_both_dst_nights(
    night: str, opens: str, closes: str
) -> None:
    start = next_open(BERLIN, utc(night))
    assert start == utc(opens)
    assert closes_at(BERLIN, start) == utc(closes)
    assert not is_open(BERLIN, start - timedelta(seconds=1))
    assert is_open(BERLIN, utc(closes) - timedelta(seconds=1))
    assert not is_open(BERLIN, utc(closes))
    # Once a night: the next opening is the next night's.
    assert next_open(BERLIN, utc(closes)) - start > timedelta(hours=20)


def test_overlapping_openings_keep_the_window_open_until_the_last_one_ends() -> None:
    window = Window(cron="0 * * * *", duration="90m")  # every hour for 90 minutes: always open
    at = utc("2026-01-01T00:30")
    assert opening_at(window, at) is not None
    assert closes_at(window, at) is not None
    assert closes_at(window, at) > at + timedelta(days=30)  # type: ignore[operator]


@given(
    minute=st.integers(min_value=0, max_value=59),
    hours=st.integers(min_value=1, max_value=6),
    offset_s=st.integers(min_value=0, max_value=14 * 24 * 3600),
)
def test_next_open_is_open_and_nothing_before_it_is(minute: int, hours: int, offset_s: int) -> None:
    window = Window(cron=f"{minute} 2 * * *", duration=f"{hours}h", timezone="Europe/Berlin")
    at = utc("2026-03-20T00:00") + timedelta(seconds=offset_s)
    start = next_open(window, at)
    assert start >= at
    assert is_open(window, start)
    if start > at:
        # Closed from `at` up to the opening, checked minute by minute.
        probe = at
        while probe < start:
            assert not is_open(window, probe)
            probe += timedelta(minutes=7)


@given(
    cron=st.sampled_from(["0 2 * * *", "30 1 * * 0", "0 0 1 1 *", "*/20 3-5 * * *"]),
    duration=st.sampled_from(["1m", "30m", "3h", "2d"]),
    steps=st.lists(st.integers(min_value=-600, max_value=50_000), min_size=1, max_size=40),
)
def test_next_open_answers_as_it_would_afresh_whatever_it_was_asked_before(
    cron: str, duration: str, steps: list[int]
) -> None:
    # next_open remembers the last closed stretch it found: instants inside it answer its end.
    window = Window(cron=cron, duration=duration, timezone="Europe/Berlin")
    at = utc("2026-03-28T22:00")
    for step in steps:
        at += timedelta(seconds=step)
        remembered = next_open(window, at)
        windows._CLOSED.clear()
        assert remembered == next_open(window, at)


def test_a_minutely_task_behind_a_yearly_window_searches_the_cron_once_for_its_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    window = Window(cron="0 0 1 1 *", duration="30m")
    searches = 0
    search = windows._openings_after

    def counted(window: Window, after: datetime) -> windows.Opening:
        nonlocal searches
        searches += 1
        return search(window, after)

    monkeypatch.setattr(windows, "_openings_after", counted)
    at = utc("2026-01-01T12:00")
    for minute in range(10_000):
        assert next_open(window, at + timedelta(minutes=minute)) == utc("2027-01-01T00:00")
    assert searches <= 3  # (was one, and an is_open, a minute)
