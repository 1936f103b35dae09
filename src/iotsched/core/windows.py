"""Maintenance windows: when a task's window (`core.task_fleet_safety.Window`) is open.

A window opens at each instant of its cron, in its timezone, by the daylight-saving rule of
cron triggers (`core.triggers`), and stays open for `duration` of elapsed time. Every answer
follows from the window and an instant alone, so every dispatcher and worker computes the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from iotsched.core import triggers
from iotsched.core.task_fleet_safety import Window
from iotsched.core.timeutil import require_aware

_MINUTE = timedelta(minutes=1)


@dataclass(frozen=True)
class Opening:
    """One opening of a window: open from `start` (inclusive) to `end` (exclusive), UTC."""

    start: datetime
    end: datetime

    def holds(self, at: datetime) -> bool:
        """True if `at` lies within this opening."""
        return self.start <= at < self.end


def _openings_after(window: Window, after: datetime) -> Opening:
    start = next(triggers.cron_slots_after(window.schedule, window.timezone, after))
    return Opening(start, start + window.length)


def opening_at(window: Window, at: datetime) -> Opening | None:
    """The opening that holds `at`, or None if the window is closed at `at`.

    Openings of one window may overlap (a duration longer than the cron's period); the one
    that opened first among those holding `at` is returned, so its end is the earliest close.
    """
    at = require_aware(at)
    # Any opening holding `at` started in (at - length, at]; the cron's instants are whole
    # minutes, and cron_slots_after answers instants strictly after its argument.
    opening = _openings_after(window, at - window.length)
    return opening if opening.holds(at) else None


def is_open(window: Window, at: datetime) -> bool:
    """True if the window is open at `at`."""
    return opening_at(window, at) is not None


#: Per window, the last stretch `next_open` found it closed: (from, the next opening's start).
#: Every instant in it is closed too (an opening before it ended before it; none starts within
#: it) and waits for that start. A minutely task behind a yearly window asks for each slot of
#: its wait (up to 100,000 a tick, each a cron search: 16 s a tick, 2 s a `tasks show`).
_CLOSED: dict[Window, tuple[datetime, datetime]] = {}
#: Windows `_CLOSED` remembers at most (it is emptied past it).
MAX_REMEMBERED_WINDOWS = 256


def next_open(window: Window, at: datetime) -> datetime:
    """`at` itself if the window is open then, else the start of its next opening."""
    at = require_aware(at)
    known = _CLOSED.get(window)
    if known is not None and known[0] <= at < known[1]:
        return known[1]
    if is_open(window, at):
        return at
    start = _openings_after(window, at - _MINUTE if at.second or at.microsecond else at).start
    if len(_CLOSED) >= MAX_REMEMBERED_WINDOWS:
        _CLOSED.clear()
    _CLOSED[window] = (at, start)
    return start


def closes_at(window: Window, at: datetime) -> datetime | None:
    """When the window, open at `at`, closes: the end of its opening, extended by every later
    opening that starts before the window closed (a duration longer than the cron's period).
    None if it is closed at `at`. A window that never closes answers the end of the last
    opening it looked at (MAX_CHAINED_OPENINGS), which is when to ask again."""
    opening = opening_at(window, at)
    if opening is None:
        return None
    end = opening.end
    for _ in range(MAX_CHAINED_OPENINGS):
        following = _openings_after(window, opening.start)
        if following.start >= end:
            break
        end, opening = max(end, following.end), following
    return end


#: Overlapping openings `closes_at` follows before it answers.
MAX_CHAINED_OPENINGS = 1_000
