"""Reads over many partitions: scatter-gather queries and BatchGetItem."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from iotsched.adapters import transact
from iotsched.adapters.dynamodb.keys import _key_of
from iotsched.ports import (
    StoreContendedError,
)

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


#: Concurrent queries of one scatter-gather read (one per bucket).
GATHER_THREADS = 16
#: Keys per BatchGetItem request, and the rounds its unprocessed keys are sent again.
BATCH_GET_KEYS = 100
BATCH_GET_ROUNDS = 8


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
    sent again with backoff, a few rounds, then StoreContendedError. For readers of a
    keys-only index."""
    found: dict[tuple[str, str], Any] = {}
    unique = list({_key_of(k): k for k in keys}.values())
    for first in range(0, len(unique), BATCH_GET_KEYS):
        pending: list[Any] = unique[first : first + BATCH_GET_KEYS]
        for round_ in range(BATCH_GET_ROUNDS):
            answer: Any = client.batch_get_item(
                RequestItems={table: {"Keys": pending, "ConsistentRead": consistent}}
            )
            for item in answer.get("Responses", {}).get(table, []):
                found[_key_of(item)] = item
            pending = list(answer.get("UnprocessedKeys", {}).get(table, {}).get("Keys", []))
            if not pending:
                break
            if round_ + 1 == BATCH_GET_ROUNDS:
                raise StoreContendedError(
                    f"read of {len(pending)} items: unprocessed after {BATCH_GET_ROUNDS} tries"
                )
            time.sleep(transact.backoff_s(round_))
    return found
