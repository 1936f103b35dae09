"""moto patched for the chaos run: costs that grow with the data avoided, and TransactWriteItems
idempotent by ClientRequestToken, as on AWS (`fast_moto`)."""

from __future__ import annotations

import contextlib
import importlib
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def fast_moto() -> Iterator[Counter[str]]:
    """While active, the in-process moto server avoids costs that grow with its data.

    Without them a run of many shards on the (serialized) emulator collapses; each replacement
    returns what moto 5.x returns:

    * DynamoDB Query sorts every item of the table (`all_items()`), then keeps the queried
      partition (or, for an index, re-sorts the matches by the index keys): O(n log n) per
      query. Here it gets the partition's items (or, for an index, every item unsorted) and
      does the rest as before.
    * DynamoDB TransactWriteItems deep-copies every table it touches, once per entry, to roll
      back: O(table size) per transaction (the effect ledger adds two items per key). Instead
      the entries' own items are copied before the call and put back if it raises, which is
      the same all-or-nothing: a transaction writes only the items its entries name, each at
      most once.
    * SQS computes every queue attribute (ApproximateNumberOfMessages walks all messages) for
      each message sent and, three times, for each message received, only to read one static
      attribute. The retention check here reads the retention period itself.
    * The clock those walks read per message (`unix_time()`: datetime arithmetic) is
      `time.time()` when called without an argument, as it is there.

    And one AWS guarantee moto lacks: TransactWriteItems is idempotent by ClientRequestToken
    (botocore sets one per call and resends it when it retries): a retry of a transaction
    that committed, whose response was lost, succeeds without writing again. moto runs it
    again, so the ledger's own claim looks like an earlier run's (`once()` returns False and
    the attempt's execution record misses a key it wrote). Replays are counted in the
    yielded counter (`idempotent_replays`).

    The moto server runs in this process; everything is restored on exit.
    """
    ddb: Any = importlib.import_module("moto.dynamodb.models")
    ddb_responses: Any = importlib.import_module("moto.dynamodb.responses")
    sqs: Any = importlib.import_module("moto.sqs.models")
    from moto.core.responses import ActionResult
    from moto.dynamodb.models.dynamo_type import DynamoType
    from moto.dynamodb.models.table import Table

    saved_attrs: list[tuple[Any, str, Any]] = []

    def replace(owner: Any, name: str, value: Any) -> None:
        saved_attrs.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)

    # -- DynamoDB: item-level rollback ------------------------------------------------------
    original_transact = ddb.DynamoDBBackend.transact_write_items
    real_copy = ddb.copy
    state = threading.local()

    class _Copy:
        """`copy` for moto's DynamoDB backend: a table copied inside a transaction is itself."""

        def __getattr__(self, name: str) -> Any:
            return getattr(real_copy, name)

        def deepcopy(self, value: Any, memo: Any = None) -> Any:
            if getattr(state, "active", False) and isinstance(value, Table):
                return value
            return real_copy.deepcopy(value, memo)

    def current(table: Any, hash_value: Any, range_value: Any) -> Any:
        partition = table.items.get(hash_value)
        if range_value is None or partition is None:
            return partition
        return partition.get(range_value)

    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
        saved: list[tuple[Any, Any, Any, Any]] = []
        for entry in transact_items:
            op: Any = next(iter(entry.values()), None)
            if not isinstance(op, dict) or op.get("TableName") not in self.tables:
                continue
            table = self.tables[op["TableName"]]
            key = op.get("Key") or op.get("Item") or {}
            try:
                hash_value = DynamoType(key[table.hash_key_attr])
                range_value = (
                    DynamoType(key[table.range_key_attr]) if table.range_key_attr else None
                )
            except (KeyError, TypeError):
                continue  # moto rejects the entry before it writes anything
            item = current(table, hash_value, range_value)
            saved.append((table, hash_value, range_value, real_copy.deepcopy(item)))
        state.active = True
        try:
            original_transact(self, transact_items)
        except BaseException:
            for table, hash_value, range_value, item in reversed(saved):
                if item is None:
                    if current(table, hash_value, range_value) is not None:
                        table.delete_item(hash_value, range_value)
                elif range_value is None:
                    table.items[hash_value] = item
                else:
                    table.items[hash_value][range_value] = item
            raise
        finally:
            state.active = False

    replace(ddb, "copy", _Copy())
    replace(ddb.DynamoDBBackend, "transact_write_items", transact_write_items)

    # -- DynamoDB: a query reads its partition, not the whole table sorted -------------------
    original_query = Table.query

    def query(self: Any, hash_key: Any, *args: Any, **kwargs: Any) -> Any:
        index_name = kwargs.get("index_name", args[6] if len(args) > 6 else None)
        if index_name:  # every item is a candidate; the index order is sorted in there
            candidates = [
                item
                for partition in self.items.values()
                for item in (partition.values() if self.range_key_attr else [partition])
            ]
        else:  # only the partition can match (the original filters all items by hash key)
            partition = self.items.get(hash_key)
            if partition is None:
                candidates = []
            else:
                candidates = list(partition.values()) if self.range_key_attr else [partition]
        self.all_items = lambda: candidates
        try:
            return original_query(self, hash_key, *args, **kwargs)
        finally:
            del self.all_items

    replace(Table, "query", query)

    # -- DynamoDB: TransactWriteItems idempotent by ClientRequestToken (10 minutes, as AWS) --
    stats: Counter[str] = Counter()
    committed: dict[str, float] = {}
    original_handler = ddb_responses.DynamoHandler.transact_write_items

    def handle_transact_write_items(self: Any) -> Any:
        token = self.body.get("ClientRequestToken")
        now = time.monotonic()
        if token and now - committed.get(token, float("-inf")) < 600:
            stats["idempotent_replays"] += 1
            return ActionResult({"ConsumedCapacity": [], "ItemCollectionMetrics": {}})
        result = original_handler(self)
        if token:
            committed[token] = now
        return result

    replace(ddb_responses.DynamoHandler, "transact_write_items", handle_transact_write_items)

    # -- SQS: no attribute walk per message, a cheap clock -----------------------------------
    real_unix_time = sqs.unix_time

    def unix_time(dt: Any = None) -> float:
        return time.time() if dt is None else float(real_unix_time(dt))

    def unix_time_millis(dt: Any = None) -> float:
        return unix_time(dt) * 1000.0

    def is_message_valid_based_on_retention_period(
        self: Any, queue_name: str, message: Any
    ) -> bool:
        retention_s = int(self.get_queue(queue_name).message_retention_period)
        return bool(retention_s + message.sent_timestamp / 1000 > unix_time())

    replace(sqs, "unix_time", unix_time)
    replace(sqs, "unix_time_millis", unix_time_millis)
    replace(
        sqs.SQSBackend,
        "is_message_valid_based_on_retention_period",
        is_message_valid_based_on_retention_period,
    )
    try:
        yield stats
    finally:
        for owner, name, value in reversed(saved_attrs):
            setattr(owner, name, value)
