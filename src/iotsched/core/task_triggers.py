"""A task's trigger as its file states it (`trigger:`): `cron`, `rate`, `at` or `after`, one
tagged union (`Trigger`) told apart by the one key that names it. Each trigger lists its slots
after an instant; the grid arithmetic is `iotsched.core.triggers`'."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Annotated, Any

from pydantic import Discriminator, Field, Tag

from iotsched.core import triggers
from iotsched.core.timeutil import require_aware
from iotsched.core.value_types import (
    TASK_ID_PATTERN,
    Anchor,
    Aware,
    Cron,
    Duration,
    Frozen,
    Zone,
)


class CronTrigger(Frozen):
    """5-field cron in an IANA timezone (DST rule in `iotsched.core.triggers`)."""

    cron: Cron
    timezone: Zone = "UTC"

    def slots_after(self, after: datetime) -> Iterator[datetime]:
        """Fire instants strictly after `after`, UTC, ascending."""
        return triggers.cron_slots_after(self.cron, self.timezone, after)


class RateTrigger(Frozen):
    """A fixed period anchored to `anchor` (default the Unix epoch), e.g. `15m`, `1h`."""

    rate: Duration
    anchor: Anchor = triggers.RATE_EPOCH
    timezone: Zone = "UTC"

    @property
    def period(self) -> timedelta:
        """The period as a timedelta of whole minutes."""
        return triggers.parse_rate(self.rate)

    def slots_after(self, after: datetime) -> Iterator[datetime]:
        """Grid instants strictly after `after`, UTC, ascending."""
        return triggers.rate_slots_after(self.period, after, self.anchor)


class AtTrigger(Frozen):
    """A one-time instant; once fired it never fires again."""

    at: Aware
    timezone: Zone = "UTC"

    def slots_after(self, after: datetime) -> Iterator[datetime]:
        """The single instant if it lies after `after`."""
        if self.at.replace(second=0, microsecond=0) > after:
            yield require_aware(self.at).replace(second=0, microsecond=0)


class AfterTrigger(Frozen):
    """Fires for a business date once every parent's instance for that date succeeded."""

    after: list[Annotated[str, Field(pattern=TASK_ID_PATTERN)]] = Field(min_length=1)
    timezone: Zone = "UTC"

    def slots_after(self, after: datetime) -> Iterator[datetime]:
        """Dependency triggers have no clock grid: the dispatcher never finds them due."""
        return iter(())


def _trigger_kind(value: Any) -> str | None:
    """The trigger kind, told by the one key that names it (`cron:`, `rate:`, `at:`, `after:`)."""
    if isinstance(value, dict):
        kinds = [kind for kind in ("cron", "rate", "at", "after") if kind in value]
        return kinds[0] if len(kinds) == 1 else None
    for kind, cls in _TRIGGER_CLASSES.items():
        if isinstance(value, cls):
            return kind
    return None


_TRIGGER_CLASSES: dict[str, type[Frozen]] = {
    "cron": CronTrigger,
    "rate": RateTrigger,
    "at": AtTrigger,
    "after": AfterTrigger,
}

Trigger = Annotated[
    Annotated[CronTrigger, Tag("cron")]
    | Annotated[RateTrigger, Tag("rate")]
    | Annotated[AtTrigger, Tag("at")]
    | Annotated[AfterTrigger, Tag("after")],
    Discriminator(
        _trigger_kind,
        custom_error_type="trigger_kind",
        custom_error_message="a trigger needs exactly one of cron, rate, at or after",
    ),
]
