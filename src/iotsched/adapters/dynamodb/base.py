"""The table every aggregate writes through: single writes, transactions, reads."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from botocore.exceptions import ClientError

from iotsched.adapters.dynamodb import transact_outcomes as transact
from iotsched.adapters.dynamodb.keys import _instance_key, _key_of, _shard_key
from iotsched.adapters.dynamodb.partition_reads import (
    batch_get,
    gather_page,
    merged,
    take,
)
from iotsched.adapters.dynamodb.transact_outcomes import (
    Kind,
    Outcome,
)
from iotsched.adapters.dynamodb.transactions import (
    _T,
    TRANSACTION_ROUNDS,
    _conditional_failure,
    _landed,
    _pack,
    _token,
    _with_token,
)
from iotsched.core.buckets import DEFAULT_BUCKETS
from iotsched.ports.store_errors import StoreContendedError

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


#: A request refused for throughput (after botocore's own retries): nothing was read or written.
THROTTLED = frozenset(
    {"ThrottlingException", "ProvisionedThroughputExceededException", "RequestLimitExceeded"}
)


def _contended(what: str, exc: ClientError) -> StoreContendedError | None:
    """The port's "not now" for a throttled request, else None."""
    if exc.response.get("Error", {}).get("Code") in THROTTLED:
        return StoreContendedError(f"{what}: throttled past the SDK's retries")
    return None


class Layout(NamedTuple):
    """Where an instance's shard records and counts are kept, fixed at its claim."""

    parts: int  # shard parts (`keys.shard_parts`): 1, `INST#<id>`
    stripes: int  # counter stripes (`keys.counter_stripes`): 0, its one counter item
    planned: int  # the shards its counts start from


NO_LAYOUT = Layout(parts=1, stripes=0, planned=0)

#: Instances whose shard parts a store remembers (forgotten all at once past it: one read each
#: brings them back).
LAYOUTS_KEPT = 10_000


class Table:
    """The table every aggregate writes through: single writes, transactions, reads."""

    def __init__(
        self, client: DynamoDBClient, table: str, *, buckets: int = DEFAULT_BUCKETS
    ) -> None:
        self._ddb = client
        self._table = table
        self._buckets = buckets  # write-sharded index partitions (iotsched.core.buckets)
        #: Each instance's layout, as read from its item (`_layout`): it never changes.
        self._layouts: dict[str, Layout] = {}

    def _remember_layout(self, item: Mapping[str, Any]) -> Layout | None:
        """Note the layout of an instance item read whole (or its layout projected), and
        return it; None for an item that is not an instance's."""
        instance_id = item.get("instance_id", {}).get("S")
        if instance_id is None or item.get("kind", {}).get("S") != "instance":
            return None  # not an instance item (a shard record, an alert, also name one)
        layout = Layout(
            parts=int(item.get("shard_parts", {}).get("N", "1")),
            stripes=int(item.get("counter_stripes", {}).get("N", "0")),
            planned=int(item.get("planned", {}).get("N", "0")),
        )
        # Returned as read, not from the dict: another thread may clear it in between.
        if len(self._layouts) >= LAYOUTS_KEPT:
            self._layouts.clear()
        self._layouts[str(instance_id)] = layout
        return layout

    def _parts(self, instance_id: str) -> int:
        """The partition keys `instance_id` keeps its shard records on (`keys.shard_parts`,
        stored on its item by its claim; none stored: one, as every instance claimed before the
        parts)."""
        return self._layout(instance_id).parts

    def _stripes(self, instance_id: str) -> int:
        """The counter stripes of `instance_id` (`keys.counter_stripes`, stored on its item by
        its claim; none stored: 0, its one counter item)."""
        return self._layout(instance_id).stripes

    def _layout(self, instance_id: str) -> Layout:
        """The instance's layout: read once per instance (a consistent read of its item,
        unless an instance read already saw it), then remembered. An instance that does not
        exist: one part, one counter, nothing remembered."""
        layout = self._layouts.get(instance_id)
        if layout is not None:
            return layout
        try:
            key = _instance_key(instance_id)
        except KeyError:
            return NO_LAYOUT  # no instance has such an id
        item = self._read(
            f"layout of {instance_id}",
            lambda: self._ddb.get_item(
                TableName=self._table,
                Key=key,
                ConsistentRead=True,
                ProjectionExpression="#id, #kind, #parts, #stripes, #planned",
                ExpressionAttributeNames={
                    "#id": "instance_id",
                    "#kind": "kind",
                    "#parts": "shard_parts",
                    "#stripes": "counter_stripes",
                    "#planned": "planned",
                },
            ),
        ).get("Item")
        if item is None:
            return NO_LAYOUT  # no such instance (never claimed, or deleted): not remembered
        return self._remember_layout(item) or NO_LAYOUT

    def _shard_key(self, instance_id: str, index: int) -> dict[str, Any]:
        """The key of shard `index`'s record, in its instance's part."""
        return _shard_key(instance_id, index, self._parts(instance_id))

    def _fetch(
        self, entries: Sequence[Mapping[str, Any]], *, consistent: bool = True
    ) -> list[dict[str, Any]]:
        """The items named by index entries, read whole, in the entries' order."""
        keys = [{"pk": e["pk"], "sk": e["sk"]} for e in entries]
        read = self._batch_get(keys, consistent=consistent)
        return [read[_key_of(k)] for k in keys if _key_of(k) in read]

    def _batch_get(
        self, keys: Sequence[Mapping[str, Any]], *, consistent: bool = True
    ) -> dict[tuple[str, str], Any]:
        return batch_get(self._ddb, self._table, keys, consistent=consistent)

    def _update_if(
        self,
        key: dict[str, Any],
        expression: str,
        condition: str,
        names: dict[str, str],
        values: dict[str, Any],
    ) -> bool:
        token = _token()
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "Key": key,
            "UpdateExpression": _with_token(expression),
            "ConditionExpression": condition,
            "ExpressionAttributeValues": {**values, ":wtok": {"S": token}},
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
        if names:  # DynamoDB rejects an empty map
            kwargs["ExpressionAttributeNames"] = names
        try:
            self._single(f"update of {key['pk']['S']}", lambda: self._ddb.update_item(**kwargs))
        except ClientError as exc:
            if _conditional_failure(exc):
                return _landed(exc, token)
            raise
        return True

    def _single(self, what: str, call: Callable[[], _T]) -> _T:
        """A single write, sent again while an item it touches is part of a transaction under
        way (TransactionConflictException: nothing was written, and botocore does not retry
        it), a few rounds with jittered backoff; then StoreContendedError."""
        for round_ in range(transact.ROUNDS):
            try:
                return call()
            except ClientError as exc:
                if (throttled := _contended(what, exc)) is not None:
                    raise throttled from exc
                if exc.response.get("Error", {}).get("Code") != "TransactionConflictException":
                    raise
                if round_ + 1 == transact.ROUNDS:
                    raise StoreContendedError(
                        f"{what}: in conflict with a transaction after {transact.ROUNDS} tries"
                    ) from exc
                time.sleep(transact.backoff_s(round_))
        raise AssertionError("unreachable")  # pragma: no cover

    def _read(self, what: str, call: Callable[[], _T]) -> _T:
        """A read whose throttling (past botocore's retries) is the port's StoreContendedError,
        as a single write's: the start steps of a shard defer on it instead of failing."""
        try:
            return call()
        except ClientError as exc:
            if (throttled := _contended(what, exc)) is not None:
                raise throttled from exc
            raise

    def _write_groups(self, groups: list[list[Any]]) -> list[bool]:
        """Write each group of transaction actions all or nothing, the groups independently.

        Returns, per group, whether it was written. A group holding None is not sent (False);
        an empty one is trivially written (True).
        """
        written = [not g for g in groups]
        pending = [n for n, g in enumerate(groups) if g and None not in g]
        for round_ in range(TRANSACTION_ROUNDS):
            retry: list[int] = []
            for chunk in _pack(pending, groups):
                for n, outcome in self._transact(chunk, groups).items():
                    if outcome == "written":
                        written[n] = True
                    elif outcome == "retry":
                        retry.append(n)
            if not retry:
                break
            pending = retry
            if round_ + 1 < TRANSACTION_ROUNDS:
                time.sleep(transact.backoff_s(round_))
        return written

    def _transact(self, chunk: list[int], groups: list[list[Any]]) -> dict[int, str]:
        """One TransactWriteItems of the groups in `chunk`: each one's outcome (see above)."""
        owners = [n for n in chunk for _ in groups[n]]
        sent = self._send([action for n in chunk for action in groups[n]])
        if sent.kind is Kind.COMMITTED:
            return dict.fromkeys(chunk, "written")
        if not sent.reasons:  # the whole request: retry it, or let the caller go one by one
            return dict.fromkeys(chunk, "retry" if sent.kind is Kind.RETRY else "dropped")
        outcome = dict.fromkeys(chunk, "retry")
        for n, kind in zip(owners, map(transact.reason_kind, sent.reasons), strict=True):
            if kind in (Kind.CONDITION_FAILED, Kind.INVALID):
                outcome[n] = "dropped"  # lost its condition, or an error of its own
        return outcome

    def _send(self, actions: list[Any]) -> Outcome:
        """One TransactWriteItems with a fresh ClientRequestToken, its outcome read.

        Errors botocore has already retried (throttling, 5xx) and errors other than the
        service's (no connection, ...) propagate. A lost response is safe: botocore retries
        with the same ClientRequestToken, which DynamoDB answers idempotently; a cancelled
        request sent again is a new one, with a new token.
        """
        try:
            self._ddb.transact_write_items(TransactItems=actions, ClientRequestToken=_token())
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in transact.RETRIED_BY_SDK:
                raise
            return dataclasses.replace(transact.classify(exc.response, len(actions)), cause=exc)
        return transact.COMMITTED

    def _transaction(self, actions: list[Any], *, what: str) -> Outcome:
        """`actions` in one transaction, sent again while contended or throttled (a few
        rounds, then StoreContendedError): committed, a condition failed, or invalid."""
        return transact.retrying(lambda: self._send(actions), what=what)

    def _gather(
        self,
        queries: Sequence[Mapping[str, Any]],
        *,
        order: str,
        limit: int | None,
        newest_first: bool = False,
    ) -> list[dict[str, Any]]:
        """Scatter-gather: every query (one per bucket, each in the index's sort order by the
        string attribute `order`), merged into one sorted list of at most `limit` items.

        A page holds about twice a bucket's share of `limit`, so the merge reads little past
        the `limit` items it returns, however many buckets (see `gather.merged`).
        """
        page = {"Limit": gather_page(limit, len(queries))} if limit else {}
        requests = [{"TableName": self._table, **q, **page} for q in queries]
        items = merged(self._ddb, requests, order=order, newest_first=newest_first)
        return list(items) if limit is None else take(items, limit)

    def _paginate(self, operation: str, **kwargs: Any) -> Iterator[dict[str, Any]]:
        paginator = self._ddb.get_paginator(operation)  # type: ignore[call-overload]
        for page in paginator.paginate(**kwargs):
            yield from page.get("Items", [])
