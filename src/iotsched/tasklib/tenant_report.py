"""`tenant_report` and its reduce `tenant_report_merge`: one report per tenant and business date.

Params:
    period: `daily` (default), `weekly` (the 7 days ending on the business date) or `monthly`
        (the month up to the business date).
    heartbeat_timeout_s: a device counts as online at the end of the period when its last
        heartbeat is at most this old at the data-interval end (default 1800).
    prefix: key prefix of the reports in the data bucket (default `reports`): one path segment
        (letters, digits, `.`, `_`, `-`), so the tenant is always the key's second segment.
    tenant: the tenant, when neither the bounds nor the task name one.

Bounds: `{tenant, group, first_id, end_id}` (sharding `groups`), an id range, or `{tenant}`.

Effects: shards write nothing; each returns the partial sums of its range (devices, devices
online at the interval's end, devices that reported, telemetry readings, alarms, per day). The
reduce runs once after every shard succeeded and writes, per tenant in the partials,
`<prefix>/<tenant>/<period>/<business date>.json` to the data bucket.

Why it is safe twice: the partials depend only on the stored bounds, the business date and
the data-interval end (never on "now", never on marks that other tasks make), and the report is
canonical JSON of the partials in shard order, so a rerun produces the same bytes. The reduce
writes only when the object's SHA-256 differs (the first write or a changed input), so a second
run adds no object version.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any, Literal

from pydantic import Field

from iotsched.context import ShardContext
from iotsched.handlers import handler
from iotsched.tasklib.common import (
    KEY_PREFIX_PATTERN,
    TenantParams,
    canonical_json,
    confirmed,
    days_of,
    in_scope,
    put_complete,
    read_rows,
    scope_of,
)
from iotsched.tasklib.resources import iot_resources


class ReportParams(TenantParams):
    """`tenant_report`'s params (the module docstring), checked at apply."""

    period: Literal["daily", "weekly", "monthly"] = "daily"
    heartbeat_timeout_s: float = Field(default=1800, gt=0, le=366 * 86_400)
    prefix: str = Field(default="reports", pattern=KEY_PREFIX_PATTERN)


@handler(params=ReportParams)
def tenant_report(ctx: ShardContext, params: ReportParams) -> Mapping[str, Any]:
    """Partial sums for the shard's range; the reduce merges them."""
    resources = ctx.resource(iot_resources)
    scope = scope_of(ctx, resources)
    days = days_of(params.period, ctx.business_date)
    timeout = timedelta(seconds=params.heartbeat_timeout_s)
    cutoff = ctx.data_interval_end - timeout
    devices = online = 0
    for device in resources.need_directory().devices(scope.tenant, scope.first_id, scope.end_id):
        devices += 1
        if device.last_heartbeat is not None and device.last_heartbeat >= cutoff:
            online += 1
    fmt = resources.id_format
    per_day = []
    for day in days:
        reporting = readings = alarms = 0
        for row in read_rows(resources, scope, day):
            for device_id, count, alarm in row.readings:
                if in_scope(scope, fmt, device_id):
                    reporting += 1 if count else 0
                    readings += count
                    alarms += alarm
        per_day.append(
            {
                "date": day.isoformat(),
                "reporting": reporting,
                "readings": readings,
                "alarms": alarms,
            }
        )
        if ctx.cancelled():
            break
    return {
        "tenant": scope.tenant,
        "group": ctx.bounds.get("group"),
        "first_id": scope.first_id,
        "end_id": scope.end_id,
        "devices": devices,
        "online": online,
        "days": per_day,
    }


def report_key(prefix: str, tenant: str, period: str, business_date: str) -> str:
    """Where the report of one tenant, period and business date lives."""
    return f"{prefix}/{tenant}/{period}/{business_date}.json"


@handler(params=ReportParams)
def tenant_report_merge(ctx: ShardContext, params: ReportParams) -> Mapping[str, Any]:
    """The reduce: one canonical JSON report per tenant, written once per content."""
    resources = ctx.resource(iot_resources)
    s3, bucket = resources.need_bucket()
    period, prefix = params.period, params.prefix
    by_tenant: dict[str, list[dict[str, Any]]] = {}
    for partial in ctx.partials():
        result = partial.get("result") or {}
        if "tenant" in result:
            by_tenant.setdefault(str(result["tenant"]), []).append(
                {"shard": partial["shard"], **result}
            )
    written: list[str] = []
    unchanged: list[str] = []
    for tenant, parts in sorted(by_tenant.items()):
        parts.sort(key=lambda p: p["shard"])
        devices = sum(int(p["devices"]) for p in parts)
        online = sum(int(p["online"]) for p in parts)
        totals: dict[str, dict[str, int]] = {}
        for part in parts:
            for day in part["days"]:
                slot = totals.setdefault(day["date"], {"reporting": 0, "readings": 0, "alarms": 0})
                for name in slot:
                    slot[name] += int(day[name])
        report = {
            "tenant": tenant,
            "task": ctx.task_id,
            "period": period,
            "business_date": ctx.business_date.isoformat(),
            "data_interval": [
                ctx.data_interval_start.isoformat(),
                ctx.data_interval_end.isoformat(),
            ],
            "devices": devices,
            "online": online,
            "online_ratio": round(online / devices, 6) if devices else None,
            "telemetry_readings": sum(d["readings"] for d in totals.values()),
            "alarms": sum(d["alarms"] for d in totals.values()),
            "days": [{"date": day, **totals[day]} for day in sorted(totals)],
            "groups": [
                {
                    "group": p.get("group"),
                    "first_id": p["first_id"],
                    "end_id": p["end_id"],
                    "devices": p["devices"],
                    "online": p["online"],
                    "readings": sum(int(d["readings"]) for d in p["days"]),
                    "alarms": sum(int(d["alarms"]) for d in p["days"]),
                }
                for p in parts
            ],
        }
        data = canonical_json(report)
        key = report_key(prefix, tenant, period, ctx.business_date.isoformat())
        if confirmed(s3, bucket, key, data):
            unchanged.append(key)
            continue
        put_complete(s3, bucket, key, data, "application/json")
        written.append(key)
    return {"written": written, "unchanged": unchanged}
