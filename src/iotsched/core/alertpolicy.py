"""Alert policies (`alerts:` on a task): which window a failure counts in, and whether an
alert raised at an instant is held by a silence. Pure: every instant is an argument."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from iotsched.core import windows
from iotsched.core.task_alerts import Alerts, Silence, Threshold
from iotsched.core.task_fleet_safety import Window
from iotsched.core.timeutil import require_aware

#: Alert types a threshold counts (an instance's end that did not succeed).
COUNTED_TYPES = frozenset({"instance_failed", "instance_timed_out", "instance_aborted"})
#: A `missed_run` alert is raised for a fire time at least this far behind the sweep, whatever
#: the task's grace: a sweep running beside the minute's tick never calls an on-time slot missed.
MISSED_FLOOR_S = 120


def window_start(threshold: Threshold, at: datetime) -> datetime:
    """The start of the threshold window holding `at` (windows of `window_s` from the epoch)."""
    epoch = int(require_aware(at).timestamp())
    return datetime.fromtimestamp(epoch - epoch % threshold.window_s, tz=UTC)


def _silence_until(silence: Silence, at: datetime) -> datetime | None:
    if silence.start is not None and silence.end is not None:
        return silence.end if silence.start <= at < silence.end else None
    assert silence.cron is not None and silence.duration is not None
    window = Window(cron=silence.cron, duration=silence.duration, timezone=silence.timezone)
    return windows.closes_at(window, at)


def silenced_until(policy: Alerts, at: datetime) -> datetime | None:
    """When the silence holding `at` ends (the latest end of those that hold it), or None."""
    at = require_aware(at)
    ends = [end for s in policy.silence if (end := _silence_until(s, at)) is not None]
    return max(ends) if ends else None


def missed_after(grace_s: int) -> timedelta:
    """How far behind a task's fire time must be for the sweeper to call it missed."""
    return timedelta(seconds=max(grace_s, MISSED_FLOOR_S))
