"""The tick leases port: one dispatcher per bucket and minute, and the minute last
dispatched in full."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol


@dataclass(frozen=True)
class TickLease:
    """The answer to `TickLeaseStore.take_tick`.

    `taken`: this caller holds the bucket's lease. Otherwise `owner`, `minute` and `until`
    describe the lease as read (None: no live holder), and `done` is the minute last
    dispatched in full (None: none yet).
    """

    taken: bool
    owner: str | None = None
    minute: datetime | None = None
    until: datetime | None = None
    done: datetime | None = None


class TickLeaseStore(Protocol):
    """A bucket dispatcher's lease of its bucket, per minute."""

    def take_tick(
        self, bucket: int, minute: datetime, *, owner: str, now: datetime, until: datetime
    ) -> TickLease:
        """Take bucket `bucket`'s dispatch lease for `minute` until `until`, iff no other
        owner holds it past `now` and `minute` is not the minute last dispatched in full.

        Taking it again with the same `owner` succeeds (a retried request). Otherwise the
        answer says who holds it, until when, and the newest minute done.
        """
        ...

    def release_tick(self, bucket: int, *, owner: str, minute: datetime, done: bool) -> bool:
        """End `owner`'s lease of bucket `bucket`; with `done`, record `minute` as dispatched
        in full. False if `owner` no longer holds it (it expired and another took it)."""
        ...
