"""iotsched's own custom planners (`sharding: {strategy: custom, planner: NAME}`), listed in
the entry-point group `iotsched.planners` like any package's."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from iotsched.core.sharding import PlanningError
from iotsched.handlers import planner


@planner("hash_buckets")
def hash_buckets(params: Mapping[str, Any]) -> list[dict[str, Any]]:
    """`buckets` shards, shard i taking the devices whose id hashes to i modulo `buckets`
    (for id spaces with no usable order); params: `buckets` (1..10,000), `key_space`."""
    buckets = params.get("buckets")
    if not isinstance(buckets, int) or isinstance(buckets, bool) or buckets < 1:
        raise PlanningError("planner 'hash_buckets' needs params.buckets, a positive integer")
    key_space = str(params.get("key_space", "device_id"))
    return [{"key_space": key_space, "bucket": i, "buckets": buckets} for i in range(buckets)]
