"""DynamoDB read accounting by partition, beside `bench.indexwrites`'s writes.

A `ReadAccountant` is attached to the boto3 clients of the code under test (botocore event
hooks) and charges every read request it sees to a partition, (table or index name, partition
key value), under its current `label`, by DynamoDB's rules (sizes and units from
`bench.counting`):

* GetItem: one unit per started 4 KB of the item (at least one, a missing item too), half for
  an eventually consistent read;
* BatchGetItem: each key as a GetItem, with its table's `ConsistentRead`; keys answered as
  unprocessed were not read and cost nothing;
* Query: the items it read, their sizes summed, per started 4 KB (at least one unit), half
  when eventually consistent (a global secondary index always is), charged to the partition
  key value its key condition names;
* TransactGetItems: each item as two strongly consistent GetItems;
* Scan: as a Query, charged to the pseudo-partition `SCAN` of the table or index, as a scan
  reads every partition and names none.

DynamoDB charges what it read, not what it answered: a projection or a filter narrows the
answer only. Where a request had one, the accountant reads the same items again without it,
with a client of its own that nobody counts. Failed requests are not charged. Nothing here
knows the product's key names.
"""

from __future__ import annotations

import json
import re
import threading
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from bench.counting import item_size, read_units
from bench.indexwrites import Item, TableSchema, partition_text

READS = ("GetItem", "BatchGetItem", "Query", "Scan", "TransactGetItems")
#: The partition a Scan is charged to.
SCAN = "<scan>"
#: Request parameters that narrow an answer without changing what was read.
_NARROWING = (
    "ProjectionExpression",
    "AttributesToGet",
    "FilterExpression",
    "QueryFilter",
    "ScanFilter",
)
#: `Select` values that answer every attribute read.
_WHOLE = (None, "ALL_ATTRIBUTES", "ALL_PROJECTED_ATTRIBUTES")
_PLACEHOLDER = re.compile(r"[#:][A-Za-z0-9_]+")
# `name = value` (either side first), not part of `<=`, `>=` or `<>`.
_EQUALITY = re.compile(r"([#:]?[\w.-]+)\s*(?<![<>!])=(?!=)\s*([#:]?[\w.-]+)")


@dataclass(frozen=True)
class ReadCharge:
    """Read units charged to one partition by one read (an item of a batch, or a query)."""

    target: str  # the table's or the index's name
    partition: str  # the partition key value
    operation: str  # the request's operation
    units: float
    # The item read (its key), or QUERIED for a query's range: the unit a hot partition is
    # split to at most (DynamoDB isolates a hot item; a query's range counts as one).
    item: str = ""


#: The item a Query or Scan is charged to within its partition: its range, as one.
QUERIED = "<query>"


@dataclass
class ReadLedger:
    """Read units by (label, target, partition), and the reads each partition took."""

    units: defaultdict[tuple[str, str, str], float] = field(
        default_factory=lambda: defaultdict(float)
    )
    reads: Counter[tuple[str, str, str, str]] = field(default_factory=Counter)  # + operation
    # Read units by (target, partition, item): what each item (or query range) took.
    item_units: defaultdict[tuple[str, str, str], float] = field(
        default_factory=lambda: defaultdict(float)
    )
    calls: Counter[str] = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def charge(self, label: str, operation: str, found: Iterable[ReadCharge]) -> None:
        with self._lock:
            self.calls[operation] += 1
            for c in found:
                self.units[(label, c.target, c.partition)] += c.units
                self.reads[(label, c.target, c.partition, c.operation)] += 1
                self.item_units[(c.target, c.partition, c.item or QUERIED)] += c.units

    def total(self, *, label: str | None = None) -> float:
        return sum(u for (lb, _t, _p), u in self.units.items() if label is None or lb == label)

    def partitions(self) -> dict[tuple[str, str], dict[str, float]]:
        """(target, partition) -> reads by operation and `rcu`, over every label."""
        out: dict[tuple[str, str], dict[str, float]] = {}
        for (_lb, target, part), u in self.units.items():
            row = out.setdefault((target, part), dict.fromkeys(READS, 0.0) | {"rcu": 0.0})
            row["rcu"] += u
        for (_lb, target, part, operation), n in self.reads.items():
            out[(target, part)][operation] += n
        return out


def query_partition(params: Mapping[str, Any], hash_key: str) -> str | None:
    """The value a Query's key condition gives the partition key attribute `hash_key` (its
    `KeyConditionExpression`, placeholders resolved, or the older `KeyConditions`)."""
    names: Mapping[str, str] = params.get("ExpressionAttributeNames") or {}
    values: Mapping[str, Any] = params.get("ExpressionAttributeValues") or {}
    for left, right in _EQUALITY.findall(params.get("KeyConditionExpression") or ""):
        for name, value in ((left, right), (right, left)):
            if names.get(name, name) == hash_key and value in values:
                return partition_text(values[value])
    condition = (params.get("KeyConditions") or {}).get(hash_key)
    if condition and condition.get("ComparisonOperator") == "EQ":
        return partition_text(condition["AttributeValueList"][0])
    return None


def _narrowed(request: Mapping[str, Any]) -> bool:
    """True if the request's answer leaves out some of what it read."""
    return any(request.get(p) for p in _NARROWING) or request.get("Select") not in _WHOLE


def _key_text(key: Mapping[str, Any]) -> str:
    return json.dumps({k: key[k] for k in sorted(key)}, sort_keys=True)


def _item_text(table: str, key: Mapping[str, Any]) -> str:
    """An item as the write ledger names it (`<table>:<key>`), so both count one item."""
    return f"{table}:{_key_text(key)}"


class ReadAccountant:
    """Charges the reads of the clients it is attached to (see the module docstring).

    `reader` is a DynamoDB client of its own (never attached: its reads are not counted);
    `schemas` the tables it accounts for (others are left alone). `label` names who reads now;
    `paused` stops accounting (set-up and checks).
    """

    def __init__(self, reader: Any, schemas: Iterable[TableSchema]) -> None:
        self._reader = reader
        self.schemas = {s.name: s for s in schemas}
        self.ledger = ReadLedger()
        self.label = "other"
        self.paused = False

    def attach(self, client: Any) -> None:
        events = client.meta.events
        events.register("before-parameter-build.dynamodb", self._before)
        events.register("after-call.dynamodb", self._after)

    def reset(self) -> ReadLedger:
        """A fresh ledger from now on; returns the one so far."""
        done, self.ledger = self.ledger, ReadLedger()
        return done

    # -- hooks ------------------------------------------------------------------------------

    def _before(
        self, params: Mapping[str, Any], model: Any, context: dict[str, Any], **_: Any
    ) -> None:
        if not self.paused and model.name in READS:
            context["index_reads"] = (dict(params), self.label)

    def _after(
        self, parsed: Mapping[str, Any], model: Any, context: dict[str, Any], **_: Any
    ) -> None:
        found = context.pop("index_reads", None)
        if found is None or parsed.get("Error"):
            return
        params, label = found
        operation = model.name
        if operation == "GetItem":
            charged = self._get(params, parsed)
        elif operation == "BatchGetItem":
            charged = self._batch_get(params, parsed)
        elif operation == "TransactGetItems":
            charged = self._transact_get(params, parsed)
        else:
            charged = self._query_or_scan(operation, params, parsed)
        self.ledger.charge(label, operation, charged)

    # -- operations -------------------------------------------------------------------------

    def _get(self, params: Mapping[str, Any], parsed: Mapping[str, Any]) -> list[ReadCharge]:
        schema = self.schemas.get(params["TableName"])
        if schema is None:
            return []
        item = self._whole(schema, params, params["Key"], parsed.get("Item"))
        units = read_units(item_size(item or {}), consistent=bool(params.get("ConsistentRead")))
        key = params["Key"]
        return [
            ReadCharge(
                schema.name,
                self._partition(schema, key),
                "GetItem",
                units,
                _item_text(schema.name, key),
            )
        ]

    def _batch_get(self, params: Mapping[str, Any], parsed: Mapping[str, Any]) -> list[ReadCharge]:
        out: list[ReadCharge] = []
        for table, request in params["RequestItems"].items():
            schema = self.schemas.get(table)
            if schema is None:
                continue
            unprocessed = (parsed.get("UnprocessedKeys") or {}).get(table, {}).get("Keys", [])
            skipped = {_key_text(k) for k in unprocessed}
            answered = {
                _key_text(schema.key_of(item)): item
                for item in (parsed.get("Responses") or {}).get(table, [])
            }
            consistent = bool(request.get("ConsistentRead"))
            for key in request["Keys"]:
                text = _key_text(key)
                if text in skipped:
                    continue
                item = self._whole(schema, request, key, answered.get(text))
                units = read_units(item_size(item or {}), consistent=consistent)
                out.append(
                    ReadCharge(
                        table,
                        self._partition(schema, key),
                        "BatchGetItem",
                        units,
                        _item_text(table, key),
                    )
                )
        return out

    def _transact_get(
        self, params: Mapping[str, Any], parsed: Mapping[str, Any]
    ) -> list[ReadCharge]:
        out: list[ReadCharge] = []
        responses = parsed.get("Responses") or []
        for entry, response in zip(params["TransactItems"], responses, strict=False):
            get = entry["Get"]
            schema = self.schemas.get(get["TableName"])
            if schema is None:
                continue
            item = self._whole(schema, get, get["Key"], response.get("Item"))
            units = 2 * read_units(item_size(item or {}), consistent=True)
            out.append(
                ReadCharge(
                    schema.name,
                    self._partition(schema, get["Key"]),
                    "TransactGetItems",
                    units,
                    _item_text(schema.name, get["Key"]),
                )
            )
        return out

    def _query_or_scan(
        self, operation: str, params: Mapping[str, Any], parsed: Mapping[str, Any]
    ) -> list[ReadCharge]:
        schema = self.schemas.get(params["TableName"])
        if schema is None:
            return []
        index = params.get("IndexName")
        target, hash_key = schema.name, schema.hash_key
        if index is not None:
            found = next((i for i in schema.indexes if i.name == index), None)
            if found is None:  # a local secondary index: the table's partition
                target = index
            else:
                target, hash_key = index, found.hash_key
        items: list[Item] = parsed.get("Items") or []
        if _narrowed(params):
            items = self._read_again(operation, params, int(parsed.get("ScannedCount") or 0))
        size = sum(item_size(i) for i in items)
        consistent = bool(params.get("ConsistentRead")) and index is None
        named = query_partition(params, hash_key) if operation == "Query" else SCAN
        partition = named or "?"
        return [ReadCharge(target, partition, operation, read_units(size, consistent=consistent))]

    # -- helpers ----------------------------------------------------------------------------

    @staticmethod
    def _partition(schema: TableSchema, key: Item) -> str:
        value = key.get(schema.hash_key)
        return partition_text(value) if value is not None else "?"

    def _whole(
        self, schema: TableSchema, request: Mapping[str, Any], key: Item, answered: Item | None
    ) -> Item | None:
        """The item as read: the answer, or for a projected read the whole item, read again
        (a projection may leave out even the key that would match the answer to its key)."""
        if not _narrowed(request):
            return answered
        item: Item | None = self._reader.get_item(
            TableName=schema.name, Key=dict(key), ConsistentRead=True
        ).get("Item")
        return item

    def _read_again(self, operation: str, params: Mapping[str, Any], read: int) -> list[Item]:
        """The `read` items a Query or Scan examined, whole: the same request from the same
        start, without its projection and filter, limited to as many items."""
        if read == 0:
            return []
        dropped = (*_NARROWING, "ConditionalOperator", "Select", "Limit", "ReturnConsumedCapacity")
        request = {
            k: v
            for k, v in params.items()
            if k not in dropped and not k.startswith("ExpressionAttribute")
        }
        used = set(_PLACEHOLDER.findall(params.get("KeyConditionExpression") or ""))
        for name in ("ExpressionAttributeNames", "ExpressionAttributeValues"):
            kept = {k: v for k, v in (params.get(name) or {}).items() if k in used}
            if kept:
                request[name] = kept
        request["Limit"] = read
        method = self._reader.query if operation == "Query" else self._reader.scan
        items: list[Item] = method(**request).get("Items", [])
        return items
