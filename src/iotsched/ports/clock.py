"""The clock port: the wall clock the use-cases are given, never read from the system."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol


class Clock(Protocol):
    """The wall clock, injected. The dispatcher never uses it for slots, only for leases."""

    def now(self) -> datetime:
        """The current instant, timezone-aware UTC."""
        ...
