"""iotsched's own custom planners (`sharding: {strategy: custom, planner: NAME}`), listed in
the entry-point group `iotsched.planners` like any package's."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt

from iotsched.core.sharding import MAX_CUSTOM_SHARDS
from iotsched.handlers import planner


class HashBucketsParams(BaseModel):
    """`hash_buckets`'s params: `buckets` sizes the plan, so it is bounded by what a plan may
    hold, checked at apply before a bucket is planned."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    buckets: StrictInt = Field(ge=1, le=MAX_CUSTOM_SHARDS)
    key_space: str = Field(default="device_id", min_length=1, max_length=128)


@planner("hash_buckets", params=HashBucketsParams)
def hash_buckets(params: HashBucketsParams) -> list[dict[str, Any]]:
    """`buckets` shards, shard i taking the devices whose id hashes to i modulo `buckets`
    (for id spaces with no usable order); params: `buckets` (1..10,000), `key_space`."""
    return [
        {"key_space": params.key_space, "bucket": i, "buckets": params.buckets}
        for i in range(params.buckets)
    ]
