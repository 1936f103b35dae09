"""The named calendars port: calendars by name, and their dates resolved onto the tasks
that use them, written together."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import date
from typing import Protocol

from iotsched.core.audit import AuditRecord
from iotsched.core.calendars import Calendar


class CalendarStore(Protocol):
    """Named calendars, and each task's resolved calendar dates."""

    def put_calendars(
        self,
        calendars: Sequence[Calendar],
        resolved: Mapping[str, Mapping[str, list[date]]],
        *,
        audit: Sequence[AuditRecord] = (),
    ) -> None:
        """Write named calendars (with `audit`, their records), and set the resolved calendar
        dates (`TaskRecord.calendars`) of the stored tasks in `resolved` (task id -> calendar
        name -> dates), nothing else of them; up to 100 items in all are written
        all-or-nothing. A task gone meanwhile is left out."""
        ...

    def get_calendar(self, name: str) -> Calendar | None:
        """The named calendar, or None."""
        ...

    def list_calendars(self) -> list[Calendar]:
        """Every named calendar, by name (no table scan)."""
        ...
