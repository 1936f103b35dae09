"""Write-sharded index partitions.

A sparse index whose partition key is one constant (every open instance, every running lease)
takes every write of the platform on one partition, which DynamoDB caps at 1,000 WCU/s. Each such
key is instead `<prefix>#<k>`, k a stable hash of the item's own key over `buckets` values;
readers query every bucket and merge (scatter-gather).

The bucket count is a deployment setting (IOTSCHED_INDEX_BUCKETS, the template's IndexBuckets).
It may be raised on a live deployment: readers query buckets 0..N-1, which include every bucket
an item was written under with a smaller N. It must never be lowered: items written under a
bucket at or above the new N would no longer be read.
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
