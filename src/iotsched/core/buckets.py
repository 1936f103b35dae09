"""Write-sharded index partitions: an index key that would be one constant for the whole
platform (every open instance, every running lease) is written as `<prefix>#<k>`, k a stable
hash of the item's own key over the deployment's bucket count, and readers query every bucket
and merge. The count may be raised on a live deployment, never lowered (docs/design.md,
section 8).
"""

from __future__ import annotations

import zlib

#: The default bucket count (see the module docstring, and docs of the IndexBuckets parameter).
DEFAULT_BUCKETS = 32
#: The largest bucket count accepted: every scatter-gather read costs one query per bucket.
MAX_BUCKETS = 512


def bucket_of(key: str, buckets: int) -> int:
    """The bucket of an item whose identity is `key` (stable across processes and versions)."""
    return zlib.crc32(key.encode()) % buckets


def partition(prefix: str, key: str, buckets: int) -> str:
    """The sharded partition key value `<prefix>#<k>` for the item `key`."""
    return f"{prefix}#{bucket_of(key, buckets)}"


def partitions(prefix: str, buckets: int) -> list[str]:
    """Every partition key value of `prefix`, in bucket order (what a reader queries)."""
    return [f"{prefix}#{k}" for k in range(buckets)]
