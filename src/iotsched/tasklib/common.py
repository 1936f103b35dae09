"""What the IoT handlers share: their resources, shard bounds, telemetry rows, S3 writes.

Handlers depend on boto3, pydantic and the standard library only (the Lambda layer stays lean).
Their
resources (the Device Management System, the devices table, the data bucket, the reminder topic)
are bound once per process by `iotsched.bootstrap`; a handler whose resource is not
configured fails its attempt with a message naming the missing setting.

Telemetry rollups live in the devices table, one row per tenant, business date and block of
consecutive device ids (the ingestion pipeline's daily rollup):

```
TELEMETRY#<tenant>#<YYYY-MM-DD> / <block first id>
    ids     fixed-width id numbers of the block's devices, concatenated
    counts  readings per device that day, 5 digits each
    alarms  alarms per device that day, 3 digits each
```
"""

from __future__ import annotations

import gzip
import hashlib
import json
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any

from botocore.exceptions import ClientError
from pydantic import BaseModel, ConfigDict

from iotsched.adapters.dynamodb.batches import batch_get_items
from iotsched.adapters.dynamodb.devices import (
    IdFormat,
    batch_write,
    block_numbers,
)
from iotsched.context import ShardContext

# Re-exported: the handlers, the local tools and the tests take them from here.
from iotsched.tasklib.resources import TaskResources

#: A key prefix in the data bucket: one path segment, so that the tenant is always a key's second
#: segment (`<prefix>/<tenant>/...`) and no task of one tenant writes under another's prefix.
KEY_PREFIX_PATTERN = r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,62}$"


class TenantParams(BaseModel):
    """The params the tenant handlers share, checked at apply (other params pass through)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    #: the tenant, when neither the bounds nor the task name one
    tenant: str | None = None


COUNT_WIDTH = 5
ALARM_WIDTH = 3


class BoundsError(ValueError):
    """A shard's bounds do not name what the handler needs (a tenant, an id range)."""


@dataclass(frozen=True)
class Scope:
    """The devices one shard covers: a tenant and a half-open id range."""

    tenant: str
    first_id: str
    end_id: str

    @property
    def label(self) -> str:
        """`<first_id>_<end_id>`: names objects derived from the range (stable bounds)."""
        return f"{self.first_id}_{self.end_id}"


def tenant_of(ctx: ShardContext) -> str:
    """The tenant the shard acts on: the task's own; for a task without one (the operator's),
    its bounds', else its params'. A task of a tenant whose bounds or params name another
    (refused at apply and at run; here should a record say otherwise) acts on none."""
    named = ctx.bounds.get("tenant") or ctx.params.get("tenant")
    if ctx.tenant:
        if named and named != ctx.tenant:
            raise BoundsError(
                f"shard {ctx.shard} of {ctx.instance_id} names tenant {named!r}: a task of "
                f"tenant {ctx.tenant!r} acts on that tenant only"
            )
        return ctx.tenant
    tenant = named
    if not tenant:
        raise BoundsError(
            f"shard {ctx.shard} of {ctx.instance_id} names no tenant (bounds {dict(ctx.bounds)}, "
            "params, or the task's tenant)"
        )
    return str(tenant)


def scope_of(ctx: ShardContext, resources: TaskResources) -> Scope:
    """The shard's tenant and id range, from its bounds (groups, id_range, static) and params.

    A bound without an id range (e.g. `static` over tenants) covers the tenant's groups, from
    the first group's first id to the last group's end, as the directory lists them now.
    """
    bounds: Mapping[str, Any] = ctx.bounds
    tenant = tenant_of(ctx)
    fmt = resources.id_format
    first, end = bounds.get("first_id"), bounds.get("end_id")
    if not first or not end:
        groups = resources.directory.groups(str(tenant)) if resources.directory else []
        if not groups:
            raise BoundsError(
                f"shard {ctx.shard} of {ctx.instance_id}: bounds {dict(bounds)} give no id range "
                f"and the device directory lists no group of tenant {tenant!r}"
            )
        first = min((g.first_id for g in groups), key=fmt.number)
        end = max((g.end_id for g in groups), key=fmt.number)
    fmt.number(str(first)), fmt.number(str(end))  # a foreign id format fails here, clearly
    return Scope(tenant=str(tenant), first_id=str(first), end_id=str(end))


# -- telemetry rows -------------------------------------------------------------------------


@dataclass(frozen=True)
class TelemetryRow:
    """One tenant's telemetry for one day and one block: per-device readings and alarms."""

    tenant: str
    day: date
    block: str
    readings: tuple[tuple[str, int, int], ...]  # (device id, readings, alarms), id order

    def key(self) -> dict[str, Any]:
        """The row's DynamoDB key."""
        return telemetry_key(self.tenant, self.day, self.block)

    def as_json(self) -> dict[str, Any]:
        """The row as archived (one JSON line)."""
        return {
            "tenant": self.tenant,
            "date": self.day.isoformat(),
            "block": self.block,
            "devices": [list(r) for r in self.readings],
        }


def telemetry_key(tenant: str, day: date, block: str) -> dict[str, Any]:
    """The key of a telemetry row."""
    return {"pk": {"S": f"TELEMETRY#{tenant}#{day.isoformat()}"}, "sk": {"S": block}}


def encode_row(row: TelemetryRow, fmt: IdFormat) -> dict[str, Any]:
    """A telemetry row as a DynamoDB item."""
    return {
        **row.key(),
        "ids": {"S": "".join(f"{fmt.number(d):0{fmt.width}d}" for d, _, _ in row.readings)},
        "counts": {
            "S": "".join(
                f"{min(c, 10**COUNT_WIDTH - 1):0{COUNT_WIDTH}d}" for _, c, _ in row.readings
            )
        },
        "alarms": {
            "S": "".join(
                f"{min(a, 10**ALARM_WIDTH - 1):0{ALARM_WIDTH}d}" for _, _, a in row.readings
            )
        },
    }


def decode_row(item: Mapping[str, Any], fmt: IdFormat) -> TelemetryRow:
    """A DynamoDB item as a telemetry row."""
    _, tenant, day = item["pk"]["S"].split("#", 2)
    ids, counts, alarms = item["ids"]["S"], item["counts"]["S"], item["alarms"]["S"]
    w = fmt.width
    readings = tuple(
        (
            fmt.render(int(ids[i * w : (i + 1) * w])),
            int(counts[i * COUNT_WIDTH : (i + 1) * COUNT_WIDTH]),
            int(alarms[i * ALARM_WIDTH : (i + 1) * ALARM_WIDTH]),
        )
        for i in range(len(ids) // w)
    )
    return TelemetryRow(
        tenant=tenant, day=date.fromisoformat(day), block=item["sk"]["S"], readings=readings
    )


def read_rows(resources: TaskResources, scope: Scope, day: date) -> list[TelemetryRow]:
    """The telemetry rows of the blocks that hold ids of `scope` on `day`, in block order."""
    ddb, table = resources.need_table()
    fmt = resources.id_format
    blocks = [fmt.render(n) for n in block_numbers(fmt, scope.first_id, scope.end_id)]
    found: dict[str, TelemetryRow] = {}
    for chunk in range(0, len(blocks), 100):
        request = {
            table: {
                "Keys": [telemetry_key(scope.tenant, day, b) for b in blocks[chunk : chunk + 100]],
                "ConsistentRead": True,
            }
        }
        for item in batch_get_items(ddb, request).get(table, []):
            row = decode_row(item, fmt)
            found[row.block] = row
    return [found[b] for b in blocks if b in found]


def in_scope(scope: Scope, fmt: IdFormat, device_id: str) -> bool:
    """True when `device_id` lies in the scope's id range."""
    return fmt.number(scope.first_id) <= fmt.number(device_id) < fmt.number(scope.end_id)


def put_rows(resources: TaskResources, rows: Sequence[TelemetryRow]) -> None:
    """Write telemetry rows (BatchWriteItem): the demo's and the tests' ingestion."""
    ddb, table = resources.need_table()
    items = [{"PutRequest": {"Item": encode_row(r, resources.id_format)}} for r in rows]
    for chunk in range(0, len(items), 25):
        batch_write(ddb, table, items[chunk : chunk + 25])


def delete_rows(resources: TaskResources, keys: Sequence[Mapping[str, Any]]) -> None:
    """Delete telemetry rows by key (BatchWriteItem; deleting a missing row is a no-op)."""
    ddb, table = resources.need_table()
    requests = [{"DeleteRequest": {"Key": dict(k)}} for k in keys]
    for chunk in range(0, len(requests), 25):
        batch_write(ddb, table, requests[chunk : chunk + 25])


def days_of(period: str, business_date: date) -> list[date]:
    """The business dates a report of `period` (daily, weekly, monthly) ending on
    `business_date` covers."""
    if period == "daily":
        return [business_date]
    if period == "weekly":
        return [date.fromordinal(business_date.toordinal() - k) for k in range(6, -1, -1)]
    if period == "monthly":
        first = business_date.replace(day=1)
        return [
            date.fromordinal(o) for o in range(first.toordinal(), business_date.toordinal() + 1)
        ]
    raise ValueError(f"period must be daily, weekly or monthly, not {period!r}")


# -- S3 -------------------------------------------------------------------------------------


def canonical_json(value: Any) -> bytes:
    """Deterministic JSON bytes (sorted keys, no whitespace variance): a rerun's bytes match."""
    return (json.dumps(value, sort_keys=True, indent=1, ensure_ascii=False) + "\n").encode()


def gzip_bytes(data: bytes) -> bytes:
    """gzip with a fixed header (no name, mtime 0): the same input gives the same bytes."""
    return gzip.compress(data, compresslevel=6, mtime=0)


def sha256(data: bytes) -> str:
    """Hex SHA-256."""
    return hashlib.sha256(data).hexdigest()


def head(s3: Any, bucket: str, key: str) -> dict[str, Any] | None:
    """HeadObject, or None when the object does not exist."""
    try:
        out: dict[str, Any] = s3.head_object(Bucket=bucket, Key=key)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
            return None
        raise
    return out


def confirmed(s3: Any, bucket: str, key: str, data: bytes) -> bool:
    """True when the object at `key` is exactly `data` (length and SHA-256 metadata)."""
    meta = head(s3, bucket, key)
    return (
        meta is not None
        and int(meta.get("ContentLength", -1)) == len(data)
        and meta.get("Metadata", {}).get("sha256") == sha256(data)
    )


def put_complete(s3: Any, bucket: str, key: str, data: bytes, content_type: str) -> None:
    """Write `data` at `key` so that no reader ever sees part of it: a multipart upload is
    invisible until CompleteMultipartUpload, which publishes the whole object at once. An
    upload abandoned by a dead worker stays invisible (the bucket's lifecycle rule aborts it).
    """
    upload = s3.create_multipart_upload(
        Bucket=bucket, Key=key, ContentType=content_type, Metadata={"sha256": sha256(data)}
    )
    upload_id = upload["UploadId"]
    try:
        part = s3.upload_part(Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=1, Body=data)
        s3.complete_multipart_upload(
            Bucket=bucket,
            Key=key,
            UploadId=upload_id,
            MultipartUpload={"Parts": [{"ETag": part["ETag"], "PartNumber": 1}]},
        )
    except Exception:
        s3.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id)
        raise


class Liveness:
    """Heartbeats and cancellation checks at a bounded rate between units of work.

    `check()` calls `ctx.heartbeat()` (renews the lease, restarts the timeout) at most
    every `every_s` seconds of elapsed time, and returns `ctx.cancelled()` (which reads the
    instance at most once a second). Elapsed time is liveness, not business logic: no
    business decision depends on it.
    """

    def __init__(self, ctx: ShardContext, every_s: float = 5.0) -> None:
        self._ctx = ctx
        self._every = every_s
        self._last = time.monotonic()

    def check(self) -> bool:
        """Heartbeat if due; True when the instance was asked to stop."""
        if time.monotonic() - self._last >= self._every:
            self._ctx.heartbeat()
            self._last = time.monotonic()
        return self._ctx.cancelled()


def iter_chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    """`items` in slices of `size`."""
    for start in range(0, len(items), size):
        yield items[start : start + size]
