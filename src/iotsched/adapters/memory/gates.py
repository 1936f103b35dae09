"""Shard-start gates in dicts: the starts counted per minute, and the fence `close_starts` sets."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from iotsched.adapters.memory.instances import InstanceRecords
from iotsched.core.buckets import DEFAULT_BUCKETS
from iotsched.core.timeutil import from_ms, to_ms

MINUTE_MS = 60_000


@dataclass
class _Gate:
    seat_ms: int = 0
    seats: int = 0


class StartGates(InstanceRecords):
    """The gates of the instances' shard starts, under the instances' lock (as the DynamoDB
    adapter's gate items, one per instance or per shared key)."""

    def __init__(self, *, buckets: int = DEFAULT_BUCKETS) -> None:
        super().__init__(buckets=buckets)
        self._gates: dict[str, _Gate] = {}
        self._closed_starts: dict[str, str] = {}  # instance id: the reason it was closed

    def starts_closed(self, instance_id: str) -> bool:
        with self._lock:
            return instance_id in self._closed_starts

    def take_seat(self, gate: str, *, minute: datetime, limit: int, weight: int = 1) -> datetime:
        with self._lock:
            item = self._gates.setdefault(gate, _Gate())
            at = to_ms(minute)
            if item.seat_ms < at:
                item.seat_ms, item.seats = at, weight
            elif item.seats + weight <= limit:
                item.seats += weight
            else:
                item.seat_ms, item.seats = item.seat_ms + MINUTE_MS, weight
            return from_ms(item.seat_ms)

    def close_starts(self, instance_id: str, reason: str) -> None:
        with self._lock:
            self._closed_starts.setdefault(instance_id, reason)
