"""Reads over many partitions: scatter-gather queries and BatchGetItem."""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from iotsched.adapters.dynamodb.batches import batch_get_items
from iotsched.adapters.dynamodb.keys import _key_of

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


#: Concurrent queries of one scatter-gather read (one per bucket).
GATHER_THREADS = 16
#: Keys per BatchGetItem request.
BATCH_GET_KEYS = 100


def gather_page(limit: int, buckets: int) -> int:
    """The page size of each bucket's query in a scatter-gather read of `limit` items."""
    return min(limit, max(10, 2 * -(-limit // max(buckets, 1))))


def batch_get(
    client: DynamoDBClient,
    table: str,
    keys: Sequence[Mapping[str, Any]],
    *,
    consistent: bool = True,
) -> dict[tuple[str, str], Any]:
    """The items of `keys` that exist, by (pk, sk): BatchGetItem requests of 100 keys
    (strongly consistent unless not `consistent`: half the read units, for the sweeper, whose
    every write is conditional); unprocessed keys (throttling, the 16 MB response limit) are
    sent again under the one policy of `iotsched.adapters.dynamodb.batches`, whose error is a
    StoreContendedError. For readers of a keys-only index."""
    found: dict[tuple[str, str], Any] = {}
    unique = list({_key_of(k): k for k in keys}.values())
    for first in range(0, len(unique), BATCH_GET_KEYS):
        request = {
            table: {"Keys": unique[first : first + BATCH_GET_KEYS], "ConsistentRead": consistent}
        }
        for item in batch_get_items(client, request).get(table, []):
            found[_key_of(item)] = item
    return found


def merged(
    client: DynamoDBClient,
    requests: Sequence[dict[str, Any]],
    *,
    order: str,
    newest_first: bool = False,
) -> Iterator[dict[str, Any]]:
    """Scatter-gather: the items of every query of `requests` (one per bucket or partition,
    each in its index's sort order by the string attribute `order`), merged in that order.

    Lazy: nothing is asked for until the first item is read. Then the first page of every
    query is asked for at once (a few threads); later pages only as the merge reaches them.
    """
    if not requests:
        return
    with ThreadPoolExecutor(max_workers=min(GATHER_THREADS, len(requests))) as pool:
        firsts = list(pool.map(lambda r: client.query(**r), requests))
    yield from heapq.merge(
        *(pages(client, r, first) for r, first in zip(requests, firsts, strict=True)),
        key=lambda item: str(item[order]["S"]),
        reverse=newest_first,
    )


def pages(client: DynamoDBClient, request: dict[str, Any], page: Any) -> Iterator[dict[str, Any]]:
    """The items of one query, from its first `page` on, the next page asked when needed."""
    while True:
        yield from page.get("Items", [])
        last = page.get("LastEvaluatedKey")
        if not last:
            return
        page = client.query(**request, ExclusiveStartKey=last)


def take(items: Iterator[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
    """The first `limit` items of `items` (at least one, if any), reading no further."""
    out = []
    for item in items:
        out.append(item)
        if len(out) >= limit:
            break
    return out
