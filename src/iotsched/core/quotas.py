"""A tenant's quotas (`TenantQuotas`, from `tenants: [{name, quotas: {...}}]` in a task file),
and the pure part of the in-flight cap: which of the tenant's slots (`SLOT#<i>`, each held by
one running shard under a lease; an adapter keeps them in groups, `slot_groups`) a shard reads
and tries first.
"""

from __future__ import annotations

import zlib

from pydantic import Field

from iotsched.core.value_types import Frozen


def slot_order(holder: str, slots: list[int], cap: int) -> list[int]:
    """The free `slots` (indexes below `cap`) in the order a taker tries them: from the index a
    hash of its holder names, wrapping round, so that concurrent takers spread over the slots
    rather than all meeting at slot 0."""
    if cap <= 0:
        return []
    start = zlib.crc32(holder.encode()) % cap
    return sorted((s for s in slots if 0 <= s < cap), key=lambda s: (s - start) % cap)


def slot_groups(holder: str, cap: int, size: int) -> list[range]:
    """The slots below `cap` cut in groups of `size` (an adapter keeps each group on a
    partition of its own), in the order a taker reads them: from the group holding the slot
    `slot_order` starts it at, wrapping round."""
    if cap <= 0:
        return []
    count = -(-cap // size)
    home = (zlib.crc32(holder.encode()) % cap) // size
    groups = ((home + j) % count for j in range(count))
    return [range(g * size, min(cap, (g + 1) * size)) for g in groups]


def slot_holder(instance_id: str, shard: int) -> str:
    """What a slot item names as its holder: one shard of one instance."""
    return f"{instance_id}#{shard}"


#: The highest `max_concurrent_shards` (its slots in groups: a take reads a few of them).
MAX_CONCURRENT_SHARDS = 1000


class TenantQuotas(Frozen):
    """A tenant's quotas, each optional (None: no such quota). They are the tenant's, stored on
    an item of their own (`TENANT#<name>`), not on its tasks' definitions."""

    max_concurrent_shards: int | None = Field(default=None, ge=1, le=MAX_CONCURRENT_SHARDS)
    max_instances_per_minute: int | None = Field(default=None, ge=1, le=100_000)
    max_tasks: int | None = Field(default=None, ge=1, le=1_000_000)

    @property
    def empty(self) -> bool:
        """True if no quota is set."""
        return (
            self.max_concurrent_shards is None
            and self.max_instances_per_minute is None
            and self.max_tasks is None
        )
