"""The Device Management System on DynamoDB: the devices table (template.yaml `DeviceTable`).

Layout (pk / sk, all strings):

```
TENANT              / <tenant>          timezone, name
GROUP#<tenant>      / <group>           first_id, end_id (half-open id range), timezone,
                                        attributes (a JSON object, as a string)
DEVICES#<tenant>    / <block first id>  one block of up to BLOCK_SIZE consecutive ids:
                                        ids   fixed-width id numbers, concatenated
                                        hb    last heartbeat per device, 10-digit epoch s
                                        plan  plan expiry per device, YYYYMMDD
                                        off   map device id -> offline since (ISO 8601)
```

A range of ids is read as whole blocks (BatchGetItem); a device is marked offline once,
whatever the number of inspections racing for it (a conditional update of its block).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from iotsched.adapters.dynamodb.batches import (
    batch_get_items,
    batch_write_items,
)
from iotsched.ports.devices import (
    Device,
    DeviceGroup,
    Tenant,
)

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

#: Devices per block item (consecutive ids).
BLOCK_SIZE = 500
_HB_WIDTH = 10
_PLAN_WIDTH = 8
_BATCH_GET = 100
_BATCH_WRITE = 25


@dataclass(frozen=True)
class IdFormat:
    """Device ids: `prefix` + a zero-padded number of `width` digits (`dev-000042`)."""

    prefix: str = "dev-"
    width: int = 6

    def number(self, device_id: str) -> int:
        """The number of `device_id`; ValueError for an id of another format."""
        digits = device_id[len(self.prefix) :]
        if not device_id.startswith(self.prefix) or not digits.isdigit():
            raise ValueError(
                f"device id {device_id!r} is not {self.prefix!r} followed by digits "
                f"(e.g. {self.render(42)!r})"
            )
        return int(digits)

    def render(self, number: int) -> str:
        """The id of device `number`."""
        return f"{self.prefix}{number:0{self.width}d}"

    def block_of(self, number: int) -> int:
        """The first id number of the block holding `number`."""
        return number - number % BLOCK_SIZE


def block_numbers(fmt: IdFormat, first_id: str, end_id: str) -> list[int]:
    """First id numbers of the blocks that hold ids in `[first_id, end_id)`."""
    start, end = fmt.number(first_id), fmt.number(end_id)
    if end <= start:
        return []
    return list(range(fmt.block_of(start), end, BLOCK_SIZE))


def _attributes(item: dict[str, Any]) -> dict[str, Any]:
    """A group item's attributes: its JSON object, or none. A value that is not a JSON object
    is the directory's fault, not the caller's: it reads as no attributes, and a task naming
    one of them finds it missing (and says so) rather than the read failing for every task."""
    text = item.get("attributes", {}).get("S")
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


class DynamoDBDeviceDirectory:
    """`DeviceDirectory` on the devices table (see the module docstring for the layout)."""

    def __init__(
        self, client: DynamoDBClient, table: str, *, id_format: IdFormat | None = None
    ) -> None:
        self._ddb = client
        self._table = table
        self.id_format = id_format or IdFormat()
        # Device numbers per (tenant, block) this process has read: a mark needs no second read.
        self._members: dict[tuple[str, int], frozenset[int]] = {}

    # -- reads ------------------------------------------------------------------------------

    def tenants(self) -> list[Tenant]:
        """Every tenant, by id."""
        return [
            Tenant(
                tenant_id=item["sk"]["S"],
                timezone=item.get("timezone", {}).get("S", "UTC"),
                name=item.get("name", {}).get("S", ""),
            )
            for item in self._query("TENANT")
        ]

    def groups(self, tenant: str | None = None) -> list[DeviceGroup]:
        """The groups of `tenant` (every tenant's when None), by tenant then first id."""
        tenant_ids = [tenant] if tenant is not None else [t.tenant_id for t in self.tenants()]
        out: list[DeviceGroup] = []
        for tenant_id in tenant_ids:
            found = [
                DeviceGroup(
                    tenant=tenant_id,
                    group=item["sk"]["S"],
                    first_id=item["first_id"]["S"],
                    end_id=item["end_id"]["S"],
                    timezone=item.get("timezone", {}).get("S", "UTC"),
                    attributes=_attributes(item),
                )
                for item in self._query(f"GROUP#{tenant_id}")
            ]
            out.extend(sorted(found, key=lambda g: (self.id_format.number(g.first_id), g.group)))
        return out

    def devices(self, tenant: str, first_id: str, end_id: str) -> Iterator[Device]:
        """The tenant's devices in `[first_id, end_id)`, in id order (blocks by BatchGetItem)."""
        start, end = self.id_format.number(first_id), self.id_format.number(end_id)
        numbers = block_numbers(self.id_format, first_id, end_id)
        for chunk in range(0, len(numbers), _BATCH_GET):
            keys = [self._block_key(tenant, n) for n in numbers[chunk : chunk + _BATCH_GET]]
            blocks = self._batch_get(keys)
            for number in numbers[chunk : chunk + _BATCH_GET]:
                item = blocks.get(self.id_format.render(number))
                if item is None:
                    continue
                for device in self._decode(tenant, item):
                    if start <= self.id_format.number(device.device_id) < end:
                        yield device

    # -- writes -----------------------------------------------------------------------------

    def mark_offline(self, tenant: str, device_id: str, *, since: datetime) -> bool:
        """One conditional UpdateItem on the device's block: the first mark stays."""
        number = self.id_format.number(device_id)
        block_number = self.id_format.block_of(number)
        key = self._block_key(tenant, block_number)
        members = self._members.get((tenant, block_number), frozenset())
        if number not in members:  # not read by this process yet, or added since: read the ids
            block = self._ddb.get_item(
                TableName=self._table, Key=key, ProjectionExpression="ids", ConsistentRead=True
            ).get("Item")
            members = self._remember(tenant, block_number, block["ids"]["S"] if block else "")
            if number not in members:
                return False  # no such device
        try:
            self._ddb.update_item(
                TableName=self._table,
                Key=key,
                UpdateExpression="SET #off.#dev = :since",
                ConditionExpression="attribute_exists(pk) AND attribute_not_exists(#off.#dev)",
                ExpressionAttributeNames={"#off": "off", "#dev": device_id},
                ExpressionAttributeValues={":since": {"S": _iso(since)}},
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
                return False
            raise
        return True

    # -- seeding (the demo, tests, an import from another DMS) -------------------------------

    def put_tenants(self, tenants: Sequence[Tenant]) -> None:
        """Write tenant records (BatchWriteItem)."""
        self._batch_write(
            {
                "pk": {"S": "TENANT"},
                "sk": {"S": t.tenant_id},
                "timezone": {"S": t.timezone},
                "name": {"S": t.name or t.tenant_id},
            }
            for t in tenants
        )

    def put_groups(self, groups: Sequence[DeviceGroup]) -> None:
        """Write group records (BatchWriteItem); ids are validated first."""
        for g in groups:
            if self.id_format.number(g.end_id) <= self.id_format.number(g.first_id):
                raise ValueError(f"group {g.tenant}/{g.group}: end_id must follow first_id")
        self._batch_write(
            {
                "pk": {"S": f"GROUP#{g.tenant}"},
                "sk": {"S": g.group},
                "first_id": {"S": g.first_id},
                "end_id": {"S": g.end_id},
                "timezone": {"S": g.timezone},
                **({"attributes": {"S": json.dumps(dict(g.attributes))}} if g.attributes else {}),
            }
            for g in groups
        )

    def put_devices(self, devices: Sequence[Device]) -> int:
        """Write devices as whole blocks (BatchWriteItem), replacing those blocks; returns the
        number of block items written. Devices of one block must all be given together."""
        blocks: dict[tuple[str, int], list[tuple[int, Device]]] = {}
        self._members.clear()
        for device in devices:
            number = self.id_format.number(device.device_id)
            key = (device.tenant, self.id_format.block_of(number))
            blocks.setdefault(key, []).append((number, device))
        items = (
            self._encode(tenant, first, sorted(members, key=lambda m: m[0]))
            for (tenant, first), members in sorted(blocks.items())
        )
        self._batch_write(items)
        return len(blocks)

    # -- helpers ----------------------------------------------------------------------------

    def _block_key(self, tenant: str, number: int) -> dict[str, Any]:
        return {"pk": {"S": f"DEVICES#{tenant}"}, "sk": {"S": self.id_format.render(number)}}

    def _encode(self, tenant: str, first: int, members: list[tuple[int, Device]]) -> dict[str, Any]:
        width = self.id_format.width
        ids = "".join(f"{n:0{width}d}" for n, _ in members)
        hb = "".join(
            f"{int(d.last_heartbeat.timestamp()) if d.last_heartbeat else 0:0{_HB_WIDTH}d}"
            for _, d in members
        )
        plan = "".join(
            d.plan_expires.strftime("%Y%m%d") if d.plan_expires else "0" * _PLAN_WIDTH
            for _, d in members
        )
        off = {d.device_id: {"S": _iso(d.offline_since)} for _, d in members if d.offline_since}
        return {
            **self._block_key(tenant, first),
            "ids": {"S": ids},
            "hb": {"S": hb},
            "plan": {"S": plan},
            "off": {"M": off},
        }

    def _remember(self, tenant: str, block: int, ids: str) -> frozenset[int]:
        width = self.id_format.width
        members = frozenset(int(ids[i : i + width]) for i in range(0, len(ids), width))
        self._members[(tenant, block)] = members
        return members

    def _decode(self, tenant: str, item: dict[str, Any]) -> Iterator[Device]:
        width = self.id_format.width
        ids, hb, plan = item["ids"]["S"], item["hb"]["S"], item["plan"]["S"]
        self._remember(tenant, self.id_format.number(item["sk"]["S"]), ids)
        off = {k: v["S"] for k, v in item.get("off", {}).get("M", {}).items()}
        for i in range(len(ids) // width):
            device_id = self.id_format.render(int(ids[i * width : (i + 1) * width]))
            seconds = int(hb[i * _HB_WIDTH : (i + 1) * _HB_WIDTH])
            raw_plan = plan[i * _PLAN_WIDTH : (i + 1) * _PLAN_WIDTH]
            yield Device(
                device_id=device_id,
                tenant=tenant,
                last_heartbeat=datetime.fromtimestamp(seconds, UTC) if seconds else None,
                offline_since=datetime.fromisoformat(off[device_id]) if device_id in off else None,
                plan_expires=(
                    date(int(raw_plan[:4]), int(raw_plan[4:6]), int(raw_plan[6:]))
                    if raw_plan != "0" * _PLAN_WIDTH
                    else None
                ),
            )

    def _query(self, pk: str) -> Iterator[dict[str, Any]]:
        paginator = self._ddb.get_paginator("query")
        for page in paginator.paginate(
            TableName=self._table,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": pk}},
        ):
            yield from page.get("Items", [])

    def _batch_get(self, keys: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """Items by sk (unprocessed keys sent again: `iotsched.adapters.dynamodb.batches`)."""
        request = {self._table: {"Keys": keys, "ConsistentRead": True}}
        return {
            item["sk"]["S"]: item
            for item in batch_get_items(self._ddb, request).get(self._table, [])
        }

    def _batch_write(self, items: Iterator[dict[str, Any]] | Any) -> None:
        batch: list[dict[str, Any]] = []
        for item in items:
            batch.append({"PutRequest": {"Item": item}})
            if len(batch) == _BATCH_WRITE:
                batch_write(self._ddb, self._table, batch)
                batch = []
        if batch:
            batch_write(self._ddb, self._table, batch)


def batch_write(client: Any, table: str, requests: list[dict[str, Any]]) -> None:
    """One BatchWriteItem of up to 25 requests (unprocessed items sent again:
    `iotsched.adapters.dynamodb.batches`)."""
    batch_write_items(client, {table: requests})


def _iso(at: datetime) -> str:
    return at.astimezone(UTC).isoformat()
