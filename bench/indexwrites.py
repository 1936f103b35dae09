"""DynamoDB write accounting with global secondary indexes, derived from what the writes did.

A `WriteAccountant` is attached to the boto3 clients of the code under test (botocore event
hooks, as `bench.counting` does). For every write request it sees (PutItem, UpdateItem,
DeleteItem, BatchWriteItem, TransactWriteItems) it reads the image of each item the request
names *before* the request (`before-parameter-build`) and *after* its answer (`after-call`),
with a client of its own that nobody counts, and applies DynamoDB's rules to the two images:

* the table: one write unit per started KB of the larger of the two images (at least 1; a
  write that changed nothing, such as a failed condition or the delete of a missing item,
  still costs its unit); twice that for an item of a transaction (a ConditionCheck too);
* each global secondary index of the table (key schema and projection read with
  DescribeTable): the item is in the index only while it carries the index's key attributes
  (sparse). Not in it before nor after: nothing. Entering it: a *put*. Leaving it: a *delete*.
  Its index key changed: a *move*, a delete at the old key plus a put at the new one. Its
  projected entry changed (ALL: any attribute; KEYS_ONLY: the keys; INCLUDE: the keys and the
  listed attributes): an *update*. Otherwise nothing. Each costs one unit per started KB of the
  entry (the table's key, the index's key and the projected attributes; an update the larger
  of the entries before and after), not doubled by a transaction.

Every unit is charged to a partition: (table or index name, partition key value), under the
accountant's current `label` (who writes now). Nothing here knows the product's key names.
Retried attempts of one call (botocore retries) are counted as attempts, not charged again:
the images show the call's net effect. Concurrent writers to the same item between a write's
two reads would blur its images; the benchmarks write each item from one thread at a time.
"""

from __future__ import annotations

import json
import math
import threading
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from bench.counting import KB, item_size

WRITES = ("PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems")
#: What an item write did to a table or an index entry.
PUT, UPDATE, DELETE, NONE = "put", "update", "delete", "none"

Item = Mapping[str, Any]  # DynamoDB JSON: {"name": {"S": "..."}}


@dataclass(frozen=True)
class IndexSchema:
    """One global secondary index: its key and what it projects."""

    name: str
    hash_key: str
    range_key: str | None
    projection: str  # ALL, KEYS_ONLY or INCLUDE
    non_key: tuple[str, ...] = ()

    def key_names(self) -> tuple[str, ...]:
        return (self.hash_key,) if self.range_key is None else (self.hash_key, self.range_key)


@dataclass(frozen=True)
class TableSchema:
    """A table's key and its global secondary indexes, as DescribeTable gives them."""

    name: str
    hash_key: str
    range_key: str | None
    indexes: tuple[IndexSchema, ...] = ()

    def key_names(self) -> tuple[str, ...]:
        return (self.hash_key,) if self.range_key is None else (self.hash_key, self.range_key)

    def key_of(self, item: Item) -> dict[str, Any]:
        return {k: item[k] for k in self.key_names() if k in item}


def describe(client: Any, table: str) -> TableSchema:
    """The schema of `table` from DescribeTable."""
    desc = client.describe_table(TableName=table)["Table"]

    def keys(schema: list[dict[str, str]]) -> tuple[str, str | None]:
        by_type = {k["KeyType"]: k["AttributeName"] for k in schema}
        return by_type["HASH"], by_type.get("RANGE")

    indexes = []
    for gsi in desc.get("GlobalSecondaryIndexes", []):
        hash_key, range_key = keys(gsi["KeySchema"])
        projection = gsi.get("Projection", {})
        indexes.append(
            IndexSchema(
                name=gsi["IndexName"],
                hash_key=hash_key,
                range_key=range_key,
                projection=projection.get("ProjectionType", "ALL"),
                non_key=tuple(projection.get("NonKeyAttributes", ())),
            )
        )
    hash_key, range_key = keys(desc["KeySchema"])
    return TableSchema(table, hash_key, range_key, tuple(indexes))


def units_of(size: int) -> int:
    """Write units of `size` bytes: started KB, at least 1."""
    return max(1, math.ceil(size / KB))


def partition_text(value: Mapping[str, Any]) -> str:
    """A key attribute's value as a partition name (strings as they are)."""
    ((kind, inner),) = value.items()
    return str(inner) if kind in ("S", "N") else json.dumps(value, sort_keys=True, default=str)


@dataclass(frozen=True)
class Charge:
    """Write units charged to one partition by one item write."""

    target: str  # the table's or the index's name
    partition: str  # the partition key value
    kind: str  # put, update, delete, none (a table write that changed nothing)
    units: int


def _entry(table: TableSchema, index: IndexSchema, image: Item) -> dict[str, Any]:
    if index.projection == "ALL":
        return dict(image)
    names = set(table.key_names()) | set(index.key_names())
    if index.projection == "INCLUDE":
        names |= set(index.non_key)
    return {k: v for k, v in image.items() if k in names}


def charges(
    table: TableSchema,
    before: Item | None,
    after: Item | None,
    *,
    transactional: bool = False,
    key: Item | None = None,
) -> list[Charge]:
    """What one item write costs, by partition, given the item (`key`) before and after it."""
    some = key or (after if after is not None else before)
    partition = partition_text(some[table.hash_key]) if some and table.hash_key in some else "?"
    if before is None and after is None:
        kind = NONE
    elif before is None:
        kind = PUT
    elif after is None:
        kind = DELETE
    else:
        kind = UPDATE if before != after else NONE
    largest = max(item_size(before or {}), item_size(after or {}))
    out = [Charge(table.name, partition, kind, units_of(largest) * (2 if transactional else 1))]
    for index in table.indexes:
        names = index.key_names()
        was = before is not None and all(k in before for k in names)
        now = after is not None and all(k in after for k in names)
        old = _entry(table, index, before) if was and before is not None else None
        new = _entry(table, index, after) if now and after is not None else None
        if old is not None and new is not None and before is not None and after is not None:
            if any(before[k] != after[k] for k in names):  # a move: delete, then put
                out.append(
                    Charge(
                        index.name,
                        partition_text(before[index.hash_key]),
                        DELETE,
                        units_of(item_size(old)),
                    )
                )
                out.append(
                    Charge(
                        index.name,
                        partition_text(after[index.hash_key]),
                        PUT,
                        units_of(item_size(new)),
                    )
                )
            elif old != new:
                size = max(item_size(old), item_size(new))
                out.append(
                    Charge(
                        index.name, partition_text(after[index.hash_key]), UPDATE, units_of(size)
                    )
                )
        elif new is not None and after is not None:
            out.append(
                Charge(
                    index.name, partition_text(after[index.hash_key]), PUT, units_of(item_size(new))
                )
            )
        elif old is not None and before is not None:
            out.append(
                Charge(
                    index.name,
                    partition_text(before[index.hash_key]),
                    DELETE,
                    units_of(item_size(old)),
                )
            )
    return out


def _texts(item: Item | None) -> list[str]:
    """The item's string values (for telling whose item it is, after the run)."""
    out: list[str] = []
    for value in (item or {}).values():
        ((kind, inner),) = value.items()
        if kind == "S":
            out.append(str(inner))
        elif kind == "SS":
            out.extend(str(v) for v in inner)
        elif kind in ("M", "L"):
            out.append(json.dumps(inner, default=str))
    return out


@dataclass
class _Target:
    table: str
    key: dict[str, Any]
    transactional: bool
    before: dict[str, Any] | None = None


@dataclass
class Ledger:
    """Write units by (label, target, partition); which items each partition took."""

    units: defaultdict[tuple[str, str, str], int] = field(default_factory=lambda: defaultdict(int))
    counts: Counter[tuple[str, str, str, str]] = field(default_factory=Counter)  # + kind
    items: defaultdict[tuple[str, str], set[str]] = field(default_factory=lambda: defaultdict(set))
    # Write units by (target, partition, item key): what each item took (an index entry is
    # charged to the item it indexes).
    item_units: defaultdict[tuple[str, str, str], int] = field(
        default_factory=lambda: defaultdict(int)
    )
    item_text: dict[str, str] = field(default_factory=dict)  # item key -> its string values
    calls: Counter[str] = field(default_factory=Counter)
    attempts: int = 0
    failed_conditions: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def charge(self, label: str, item_key: str, texts: list[str], found: list[Charge]) -> None:
        with self._lock:
            for c in found:
                self.units[(label, c.target, c.partition)] += c.units
                self.counts[(label, c.target, c.partition, c.kind)] += 1
                self.items[(c.target, c.partition)].add(item_key)
                self.item_units[(c.target, c.partition, item_key)] += c.units
            if texts:
                self.item_text[item_key] = " ".join([item_key, *texts])

    def total(self, *, label: str | None = None) -> int:
        return sum(u for (lb, _t, _p), u in self.units.items() if label is None or lb == label)

    def by_target(self) -> dict[str, int]:
        out: Counter[str] = Counter()
        for (_lb, target, _p), u in self.units.items():
            out[target] += u
        return dict(out)

    def partitions(self) -> dict[tuple[str, str], dict[str, int]]:
        """(target, partition) -> put/update/delete/none counts and wcu, over every label."""
        out: dict[tuple[str, str], dict[str, int]] = {}
        for (_lb, target, part), u in self.units.items():
            row = out.setdefault((target, part), {PUT: 0, UPDATE: 0, DELETE: 0, NONE: 0, "wcu": 0})
            row["wcu"] += u
        for (_lb, target, part, kind), n in self.counts.items():
            out[(target, part)][kind] += n
        return out


class WriteAccountant:
    """Charges the writes of the clients it is attached to (see the module docstring).

    `reader` is a DynamoDB client of its own (never attached: its reads are not counted);
    `schemas` the tables it accounts for (others are left alone). `label` names who writes now;
    `paused` stops accounting (set-up and checks).
    """

    def __init__(self, reader: Any, schemas: Iterable[TableSchema]) -> None:
        self._reader = reader
        self.schemas = {s.name: s for s in schemas}
        self.ledger = Ledger()
        self.label = "other"
        self.paused = False

    def attach(self, client: Any) -> None:
        events = client.meta.events
        events.register("before-parameter-build.dynamodb", self._before)
        events.register("before-send.dynamodb", self._attempt)
        events.register("after-call.dynamodb", self._after)

    def reset(self) -> Ledger:
        """A fresh ledger from now on; returns the one so far."""
        done, self.ledger = self.ledger, Ledger()
        return done

    # -- hooks ------------------------------------------------------------------------------

    def _before(
        self, params: Mapping[str, Any], model: Any, context: dict[str, Any], **_: Any
    ) -> None:
        if self.paused or model.name not in WRITES:
            return
        targets = list(self._targets(model.name, params))
        for t in targets:
            t.before = self._read(t.table, t.key)
        context["index_writes"] = (targets, self.label)

    def _attempt(self, **_: Any) -> None:
        if not self.paused:
            self.ledger.attempts += 1

    def _after(
        self, parsed: Mapping[str, Any], model: Any, context: dict[str, Any], **_: Any
    ) -> None:
        found = context.pop("index_writes", None)
        if found is None:
            return
        targets, label = found
        ledger = self.ledger
        ledger.calls[model.name] += 1
        error = (parsed.get("Error") or {}).get("Code")
        if error in ("ConditionalCheckFailedException", "TransactionCanceledException"):
            ledger.failed_conditions += 1
        unprocessed = {
            self._request_key(table, request)
            for table, requests in (parsed.get("UnprocessedItems") or {}).items()
            for request in requests
        }
        for t in targets:
            schema = self.schemas[t.table]
            key_text = json.dumps({k: t.key[k] for k in sorted(t.key)}, sort_keys=True)
            if (t.table, key_text) in unprocessed:
                continue  # not written: DynamoDB charges nothing for it
            after = self._read(t.table, t.key)
            found_charges = charges(
                schema, t.before, after, transactional=t.transactional, key=t.key
            )
            texts = _texts(t.before) + _texts(after)
            ledger.charge(label, f"{t.table}:{key_text}", texts, found_charges)

    # -- helpers ----------------------------------------------------------------------------

    def _read(self, table: str, key: dict[str, Any]) -> dict[str, Any] | None:
        item: dict[str, Any] | None = self._reader.get_item(
            TableName=table, Key=key, ConsistentRead=True
        ).get("Item")
        return item

    def _request_key(self, table: str, request: Mapping[str, Any]) -> tuple[str, str]:
        schema = self.schemas.get(table)
        if schema is None:
            return table, ""
        if "PutRequest" in request:
            key = schema.key_of(request["PutRequest"]["Item"])
        else:
            key = dict(request["DeleteRequest"]["Key"])
        return table, json.dumps({k: key[k] for k in sorted(key)}, sort_keys=True)

    def _targets(self, operation: str, params: Mapping[str, Any]) -> Iterable[_Target]:
        def target(table: str, key: Mapping[str, Any], tx: bool) -> _Target | None:
            schema = self.schemas.get(table)
            if schema is None:
                return None
            return _Target(table, schema.key_of(key), tx)

        found: list[_Target | None] = []
        if operation == "PutItem":
            found.append(target(params["TableName"], params["Item"], False))
        elif operation in ("UpdateItem", "DeleteItem"):
            found.append(target(params["TableName"], params["Key"], False))
        elif operation == "BatchWriteItem":
            for table, requests in params["RequestItems"].items():
                for request in requests:
                    body = request.get("PutRequest", {}).get("Item") or request.get(
                        "DeleteRequest", {}
                    ).get("Key", {})
                    found.append(target(table, body, False))
        elif operation == "TransactWriteItems":
            for entry in params["TransactItems"]:
                ((_action, body),) = entry.items()
                found.append(target(body["TableName"], body.get("Key") or body["Item"], True))
        return [t for t in found if t is not None]
