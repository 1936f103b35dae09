"""Dates a task never fires on: its own list (`exclude:`), and named calendars that tasks share
by name (a task file's `calendars:`)."""

from __future__ import annotations

from datetime import date
from typing import Annotated

from pydantic import Field

from iotsched.core.value_types import Frozen

CALENDAR_NAME_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,63}$"
#: Dates one calendar (or one task's inline exclusions) may list.
MAX_CALENDAR_DATES = 1000


class Exclude(Frozen):
    """Dates the task never fires on, in its timezone: listed here, or in named calendars
    (a task file's `calendars:`), which tasks share."""

    dates: list[date] = Field(default_factory=list, max_length=MAX_CALENDAR_DATES)
    calendars: list[Annotated[str, Field(pattern=CALENDAR_NAME_PATTERN)]] = Field(
        default_factory=list, max_length=20
    )


class Calendar(Frozen):
    """A named list of dates (holidays, freeze days) that tasks exclude by name."""

    name: str = Field(pattern=CALENDAR_NAME_PATTERN)
    description: str = ""
    dates: list[date] = Field(max_length=MAX_CALENDAR_DATES)
