"""Gates in dicts: seats sold per minute in order, and the fence `close_starts` sets."""

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

    def starts_closed(self, instance_id: str, *, shard: int = 0, shards: int = 1) -> bool:
        with self._lock:
            return instance_id in self._closed_starts

    def take_seat(
        self,
        gate: str,
        *,
        minute: datetime,
        limit: int,
        weight: int = 1,
        latest: datetime | None = None,
    ) -> datetime | None:
        with self._lock:
            item = self._gates.setdefault(gate, _Gate())
            at = to_ms(minute)
            if item.seat_ms < at:
                seat_ms, seats = at, weight
            elif item.seats + weight <= limit:
                seat_ms, seats = item.seat_ms, item.seats + weight
            else:
                seat_ms, seats = item.seat_ms + MINUTE_MS, weight
            if latest is not None and seat_ms > to_ms(latest):
                return None  # no seat at or before `latest`: none sold
            item.seat_ms, item.seats = seat_ms, seats
            return from_ms(seat_ms)

    def close_starts(self, instance_id: str, reason: str, *, shards: int | None = None) -> None:
        with self._lock:
            self._closed_starts.setdefault(instance_id, reason)
