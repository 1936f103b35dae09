"""Clocks: the system clock for production, a manual one for tests."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta


class SystemClock:
    """The wall clock, in UTC."""

    def now(self) -> datetime:
        """The current instant."""
        return datetime.now(UTC)


class ManualClock:
    """A clock that moves only when told to (thread-safe)."""

    def __init__(self, start: datetime) -> None:
        self._now = start
        self._lock = threading.Lock()

    def now(self) -> datetime:
        """The current instant."""
        with self._lock:
            return self._now

    def advance(self, delta: timedelta) -> datetime:
        """Move forward by `delta`; returns the new instant."""
        with self._lock:
            self._now += delta
            return self._now

    def set(self, instant: datetime) -> None:
        """Jump to `instant`."""
        with self._lock:
            self._now = instant
