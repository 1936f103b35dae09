"""The start limits port: what holds a shard back at its start. Gates sell seats per minute in
order (a rollout's starts, a tenant's instances) and fence an ending instance; a tenant's slots
cap its shards in flight, and its line orders the instances that send into those slots. Neither
gates nor slots are ever passed by concurrent callers."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol


class ShardStartGates(Protocol):
    """Seats per minute on a gate, and the fence of an instance's starts."""

    def starts_closed(self, instance_id: str, *, shard: int = 0, shards: int = 1) -> bool:
        """Whether `close_starts` closed the instance's starts: a strongly consistent read of
        its fence (a start reads it after taking its lease). `shard` of `shards`: the start
        reading it, and its instance's shard count, so that a store may spread a large
        instance's fence over several items, each read by a share of its starts."""
        ...

    def take_seat(
        self,
        gate: str,
        *,
        minute: datetime,
        limit: int,
        weight: int = 1,
        latest: datetime | None = None,
    ) -> datetime | None:
        """Sell the next seat of `weight` on the gate `gate` (a tenant's instances, a rollout's
        starts), `limit` a minute by weight, in the order of the calls: the minute of the seat
        (`minute` itself, the scheduler's clock floored, while the last minute sold has room
        for it; else the minute after the last one sold), with one conditional write. A seat
        heavier than `limit` takes a minute alone. None, and nothing sold, if the seat would be
        later than `latest` (a caller's deadline: a seat it could never use would leave a hole
        every later caller waits behind). Seats are sold in order, so a later caller never gets an
        earlier minute than an earlier one: whoever waits keeps their place. A minute never
        holds more than the `limit` its callers gave, whatever the concurrency (callers giving
        different limits, a ramp's or an edited task's, fill it up to the largest); a seat
        whose response was lost and was sent again is sold once (or, rarely, twice: a minute
        under its limit, never over). StoreContendedError if contention outlasted the
        retries."""
        ...

    def close_starts(self, instance_id: str, reason: str, *, shards: int | None = None) -> None:
        """Close the instance's starts (idempotent; the fence is made if absent): once it
        returns, `starts_closed` answers True for every shard. `shards`: the instance's shard
        count, as its starts give it; None if the caller does not know it (the whole fence
        is closed, whatever its spread)."""
        ...


class TenantSlotLeases(Protocol):
    """A tenant's in-flight slots (`max_concurrent_shards`), each held under a lease."""

    def take_tenant_slot(
        self, tenant: str, holder: str, *, cap: int, now: datetime, until: datetime
    ) -> int | None:
        """Take one of the tenant's `cap` in-flight slots for `holder` (unique to this take)
        until `until`: the slot's index, or None if `cap` slots are held by leases live at
        `now` (nothing written). A slot whose lease ended (its holder died) is free again.

        Each slot is taken by one conditional write, so concurrent takers never hold more
        than `cap` live slots between them. A take whose response was lost and was sent again
        is read as taken (the slot names `holder`). A take that raises leaves no slot held by
        `holder` (a write of unknown outcome is released before it raises; should that fail
        too, the slot's lease ends at `until`). StoreContendedError if contention outlasted the
        retries.
        """
        ...

    def extend_tenant_slot(self, tenant: str, slot: int, holder: str, *, until: datetime) -> bool:
        """Move the slot's lease to `until` if `holder` still holds it (a heartbeat of a long
        attempt); False if it does not (its lease ended and another took it)."""
        ...

    def release_tenant_slot(self, tenant: str, slot: int, holder: str) -> None:
        """Free the slot if `holder` still holds it (idempotent: a slot another taker took
        since is left alone)."""
        ...


class TenantLines(Protocol):
    """A tenant's line: its capped instances in the order they send, each by its place (a
    string; places sort in line order)."""

    def join_tenant_line(self, tenant: str, place: str, *, expires: datetime) -> None:
        """Put `place` in the tenant's line (idempotent). `expires`: when the store may drop
        a place nobody took out (a safety net: its instance ended long before)."""
        ...

    def tenant_line_head(self, tenant: str) -> str | None:
        """The first place in the tenant's line (a strongly consistent read), or None."""
        ...

    def leave_tenant_line(self, tenant: str, place: str) -> None:
        """Take `place` out of the tenant's line (idempotent)."""
        ...
