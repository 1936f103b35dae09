"""`archive_cold_data`: move telemetry older than the retention window to the data bucket.

Params:
    retention_days: telemetry of business dates up to `business_date - retention_days` is
        cold (default 2).
    lookback_days: how many cold dates, counting back from the newest, each run checks
        (default 7); older ones were archived by earlier runs.
    prefix: key prefix of the archives (default `archive`): one path segment (letters, digits,
        `.`, `_`, `-`), so the tenant is always the key's second segment.
    tenant: the tenant, when neither the bounds nor the task name one.

Bounds: `{tenant, group, first_id, end_id}` (sharding `groups`), an id range, or `{tenant}`:
the shard is a prefix (an id range) of the tenant's devices. A telemetry row (one block of ids)
belongs to the shard whose range holds the row's first device, so adjacent shards never archive
the same row.

Effects, per cold date: one object `<prefix>/<tenant>/<date>/<first_id>_<end_id>.jsonl.gz`
(deterministic key and bytes: canonical JSON lines, gzip with a fixed header), then the rows it
holds are deleted from the devices table.

Why it is safe twice: the object is written by a multipart upload, invisible until complete,
so no reader sees half an object; the rows are deleted only after HeadObject confirms the
object's length and SHA-256. A run that finds the object already there writes nothing: it reads
the object and deletes whatever rows of it are still present (a worker that died between the
upload and the deletes), so a second run finds the work done and the end state is the same.
Rows of an archived date that the object does not hold (telemetry that arrived after it was
written) are left in place and counted in `rows_left`, never overwritten into the object.
Returns `{objects, rows_archived, rows_deleted, already, rows_left}`.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Mapping
from datetime import date, timedelta
from typing import Any

from pydantic import Field

from iotsched.context import ShardContext
from iotsched.handlers import handler
from iotsched.tasklib.common import (
    KEY_PREFIX_PATTERN,
    Liveness,
    TelemetryRow,
    TenantParams,
    confirmed,
    delete_rows,
    gzip_bytes,
    head,
    in_scope,
    put_complete,
    read_rows,
    scope_of,
    telemetry_key,
)
from iotsched.tasklib.resources import iot_resources


def archive_key(prefix: str, tenant: str, day: date, label: str) -> str:
    """Where the archive of one tenant, date and shard range lives."""
    return f"{prefix}/{tenant}/{day.isoformat()}/{label}.jsonl.gz"


class ArchiveParams(TenantParams):
    """`archive_cold_data`'s params (the module docstring), checked at apply."""

    retention_days: int = Field(default=2, ge=0, le=3660)
    lookback_days: int = Field(default=7, ge=1, le=366)
    prefix: str = Field(default="archive", pattern=KEY_PREFIX_PATTERN)


@handler(params=ArchiveParams)
def archive_cold_data(ctx: ShardContext, params: ArchiveParams) -> Mapping[str, Any]:
    """Archive, confirm, then delete: per cold date of the shard's range."""
    resources = ctx.resource(iot_resources)
    s3, bucket = resources.need_bucket()
    scope = scope_of(ctx, resources)
    fmt = resources.id_format
    retention, lookback, prefix = params.retention_days, params.lookback_days, params.prefix
    newest_cold = ctx.business_date - timedelta(days=retention)
    objects = archived = deleted = already = left = 0
    liveness = Liveness(ctx)
    for back in range(lookback):
        if liveness.check():
            break
        day = newest_cold - timedelta(days=back)
        key = archive_key(prefix, scope.tenant, day, scope.label)
        rows = [
            r
            for r in read_rows(resources, scope, day)
            if r.readings and in_scope(scope, fmt, r.readings[0][0])
        ]
        if head(s3, bucket, key) is not None:
            # Archived before: delete what the object holds and is still here, nothing else.
            already += 1
            held = _blocks_in(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
            leftover = [r for r in rows if r.block in held]
            delete_rows(resources, [r.key() for r in leftover])
            deleted += len(leftover)
            # Rows the object does not hold (arrived after it was written) stay, and say so.
            left += len(rows) - len(leftover)
            continue
        if not rows:
            continue
        data = gzip_bytes(
            "".join(json.dumps(r.as_json(), sort_keys=True) + "\n" for r in rows).encode()
        )
        put_complete(s3, bucket, key, data, "application/gzip")
        if not confirmed(s3, bucket, key, data):
            raise RuntimeError(f"s3://{bucket}/{key} could not be confirmed; rows kept")
        objects += 1
        archived += len(rows)
        liveness.check()
        delete_rows(resources, [telemetry_key(r.tenant, r.day, r.block) for r in rows])
        deleted += len(rows)
    return {
        "objects": objects,
        "rows_archived": archived,
        "rows_deleted": deleted,
        "already": already,
        "rows_left": left,
    }


def _blocks_in(data: bytes) -> set[str]:
    """The blocks an archive object holds."""
    return {json.loads(line)["block"] for line in gzip.decompress(data).splitlines() if line}


def rows_of(data: bytes) -> list[TelemetryRow]:
    """Read an archive object back (tests, restores)."""
    out = []
    for line in gzip.decompress(data).splitlines():
        if line:
            raw = json.loads(line)
            out.append(
                TelemetryRow(
                    tenant=raw["tenant"],
                    day=date.fromisoformat(raw["date"]),
                    block=raw["block"],
                    readings=tuple((d, int(c), int(a)) for d, c, a in raw["devices"]),
                )
            )
    return out
