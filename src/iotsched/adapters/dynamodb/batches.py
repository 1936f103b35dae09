"""BatchGetItem and BatchWriteItem, with the one retry policy for what DynamoDB leaves
unprocessed.

DynamoDB may answer a batch request in part (throttling, the 16 MB response limit): the keys
or write requests it did not process come back as `UnprocessedKeys` / `UnprocessedItems`, to be
sent again. Every batch read and write of the project (the store, the devices table, the task
library's telemetry rows) goes through `batch_get_items` / `batch_write_items`, under one policy:

- at most `ATTEMPTS` requests, the first included;
- between two, a capped exponential backoff with jitter (`transact.backoff_s`: a ceiling
  doubling from 25 ms up to 1 s, each pause drawn in the upper half of its ceiling);
- what is still unprocessed after the last attempt raises `UnprocessedItemsError`, which names
  the operation, the tables and how many items were left. It is a `StoreContendedError` (the
  table's capacity outlasted the retries), hence also a RuntimeError.

The caller sizes the request (100 keys per BatchGetItem, 25 requests per BatchWriteItem): a
batch is never cut here.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from iotsched.adapters.dynamodb import transact_outcomes as transact
from iotsched.ports.store_errors import StoreContendedError

#: Requests per batch, the first included, before what is left unprocessed is an error.
ATTEMPTS = 8


class UnprocessedItemsError(StoreContendedError):
    """A batch request's items stayed unprocessed through every attempt."""


def batch_get_items(client: Any, request_items: Mapping[str, Any]) -> dict[str, list[Any]]:
    """The items BatchGetItem finds for `request_items` (its `RequestItems`), by table,
    unprocessed keys sent again under the policy above."""
    found: dict[str, list[Any]] = {}

    def send(request: dict[str, Any]) -> Mapping[str, Any]:
        out: Mapping[str, Any] = client.batch_get_item(RequestItems=request)
        for table, items in out.get("Responses", {}).items():
            found.setdefault(table, []).extend(items)
        # The keys left, with the request's own parameters (ConsistentRead, a projection):
        # an answer may name the keys alone.
        left: Mapping[str, Any] = out.get("UnprocessedKeys") or {}
        return {table: {**request_items[table], **keys} for table, keys in left.items()}

    _drain(send, dict(request_items), "BatchGetItem", lambda left: len(left.get("Keys", [])))
    return found


def batch_write_items(client: Any, request_items: Mapping[str, Any]) -> None:
    """BatchWriteItem of `request_items` (its `RequestItems`), unprocessed items sent again
    under the policy above."""

    def send(request: dict[str, Any]) -> Mapping[str, Any]:
        out: Mapping[str, Any] = client.batch_write_item(RequestItems=request)
        return dict(out.get("UnprocessedItems") or {})

    _drain(send, dict(request_items), "BatchWriteItem", len)


def _drain(
    send: Callable[[dict[str, Any]], Mapping[str, Any]],
    request: dict[str, Any],
    operation: str,
    count: Callable[[Any], int],
) -> None:
    """Send `request`, then what `send` returns as unprocessed, until nothing is left."""
    for attempt in range(ATTEMPTS):
        request = dict(send(request))
        if not request:
            return
        if attempt + 1 < ATTEMPTS:
            time.sleep(transact.backoff_s(attempt))
    left = sum(count(entry) for entry in request.values())
    raise UnprocessedItemsError(
        f"{operation} on {', '.join(sorted(request))}: {left} items still unprocessed"
        f" after {ATTEMPTS} attempts"
    )
