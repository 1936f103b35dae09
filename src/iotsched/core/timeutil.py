"""Instants as the scheduler stores them: timezone-aware UTC, minute resolution for slots."""

from __future__ import annotations

from datetime import UTC, datetime

SLOT_FORMAT = "%Y-%m-%dT%H:%MZ"


def require_aware(instant: datetime) -> datetime:
    """Return `instant` converted to UTC; a naive datetime is a programming error."""
    if instant.tzinfo is None or instant.utcoffset() is None:
        raise ValueError(f"naive datetime {instant!r}: every instant must be timezone-aware")
    return instant.astimezone(UTC)


def floor_minute(instant: datetime) -> datetime:
    """The minute `instant` falls in, in UTC: the scheduler's resolution."""
    return require_aware(instant).replace(second=0, microsecond=0)


def slot_text(slot: datetime) -> str:
    """The canonical text of a slot, used in deterministic keys (`2026-11-29T12:00Z`)."""
    return floor_minute(slot).strftime(SLOT_FORMAT)


def parse_slot(text: str) -> datetime:
    """Inverse of `slot_text`."""
    return datetime.strptime(text, SLOT_FORMAT).replace(tzinfo=UTC)


def iso(instant: datetime) -> str:
    """ISO-8601 UTC with millisecond precision and a `Z`, sortable as text."""
    return require_aware(instant).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_iso(text: str) -> datetime:
    """Parse an ISO-8601 instant; a missing offset is rejected rather than guessed."""
    parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return require_aware(parsed)


def to_ms(instant: datetime) -> int:
    """Epoch milliseconds, for lease deadlines compared inside DynamoDB conditions."""
    return int(require_aware(instant).timestamp() * 1000)


def from_ms(ms: int) -> datetime:
    """Inverse of `to_ms`."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC)
