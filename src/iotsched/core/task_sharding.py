"""How a task's instances are cut into shards, as its file states it (`sharding:`): one model
per strategy, told apart by `strategy`. The plan and each shard's bounds are
`iotsched.core.sharding`'s."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field, model_validator

from iotsched.core.value_types import Frozen, Params, Tenant

#: The largest id of an `id_range` space: a shard's bounds are numbers every store and reader
#: holds exactly (DynamoDB numbers have 38 digits, JSON readers often 64 bits).
MAX_ID = 10**18


class ShardingStrategy(StrEnum):
    """How one instance is cut into shards; bounds are fixed at claim time."""

    NONE = "none"  # one shard, empty bounds
    STATIC = "static"  # one shard per listed bounds object (tenants, regions)
    GROUPS = "groups"  # one shard per group read from the Device Management System at fire time
    ID_RANGE = "id_range"  # N contiguous half-open ranges over a stable id space
    CUSTOM = "custom"  # a registered planner


class NoSharding(Frozen):
    """One shard."""

    strategy: Literal[ShardingStrategy.NONE] = ShardingStrategy.NONE


class StaticSharding(Frozen):
    """One shard per bounds object, in the order written."""

    strategy: Literal[ShardingStrategy.STATIC]
    shards: list[Params] = Field(min_length=1, max_length=10_000)


class IdRangeSharding(Frozen):
    """`shards` contiguous half-open ranges over the integer id space `[id_min, id_max)`.

    Ids are rendered as `prefix` + zero-padded number (`dev-000042`), so a bound stays the same
    when devices are added or removed: bounds never depend on a page or an offset.
    """

    strategy: Literal[ShardingStrategy.ID_RANGE]
    shards: int = Field(ge=1, le=100_000)
    key_space: str = "device_id"
    id_min: int = Field(default=0, ge=0, le=MAX_ID)
    id_max: int = Field(default=1_000_000, gt=0, le=MAX_ID)
    prefix: str = "dev-"
    width: int = Field(default=6, ge=1, le=20)

    @model_validator(mode="after")
    def _space(self) -> IdRangeSharding:
        if self.id_max <= self.id_min:
            raise ValueError("id_max must be greater than id_min")
        if self.shards > self.id_max - self.id_min:
            raise ValueError("more shards than ids in [id_min, id_max)")
        return self


class GroupsSharding(Frozen):
    """One shard per device group, read from the Device Management System at fire time."""

    strategy: Literal[ShardingStrategy.GROUPS]
    source: str = "device_directory"
    tenant: Tenant | None = None


class CustomSharding(Frozen):
    """A registered planner by name, with its own parameters."""

    strategy: Literal[ShardingStrategy.CUSTOM]
    planner: str
    params: Params = Field(default_factory=dict)


Sharding = Annotated[
    NoSharding | StaticSharding | IdRangeSharding | GroupsSharding | CustomSharding,
    Field(discriminator="strategy"),
]
