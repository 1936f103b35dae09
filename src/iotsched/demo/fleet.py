"""A simulated IoT fleet for the demo: tenants, groups, devices, telemetry rollups, accounts.

Drawn from one seeded random stream: the same arguments seed the same fleet. The devices table
holds each device's last heartbeat only (the end instant for a device still reporting, the
instant it went silent, none for one that never reported), so an inspection of an earlier
interval sees a later heartbeat as "was reporting then". Telemetry is one rollup row per
tenant, day and block of devices.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

from iotsched.adapters.dynamodb.devices import (
    DynamoDBDeviceDirectory,
    IdFormat,
    batch_write,
)
from iotsched.ports.devices import (
    Device,
    DeviceGroup,
    Tenant,
)
from iotsched.tasklib.common import (
    TelemetryRow,
    encode_row,
)
from iotsched.tasklib.resources import TaskResources

#: The demo's tenants and the timezones their business days are counted in.
TENANTS = (
    Tenant("acme", "Asia/Shanghai", "Acme Logistics"),
    Tenant("globex", "Europe/Berlin", "Globex Utilities"),
    Tenant("initech", "America/New_York", "Initech Buildings"),
)
GROUPS_PER_TENANT = 1
#: Every demo group's maintenance window (`window.group_attribute: maintenance_window`), in the
#: group's own timezone (its tenant's): 02:00 local for two hours.
MAINTENANCE_WINDOW = {"cron": "0 2 * * *", "duration": "2h"}
ACCOUNTS_PER_TENANT = 5
INITIAL_BALANCE = 10_000_000  # cents
DAILY_FEE = 2  # cents per device per day
SILENT_SHARE = 0.01  # devices that go silent during the simulated days
NEVER_SHARE = 0.002  # devices that never reported
PLAN_SHARE = 0.1  # devices with a cellular data plan (the others have none)
PLAN_SPREAD_DAYS = 730  # plan expiry dates spread over two years around the start


@dataclass
class FleetStats:
    """What was seeded."""

    devices: int = 0
    groups: int = 0
    device_blocks: int = 0
    telemetry_rows: int = 0
    accounts: int = 0
    silent: int = 0
    never_reported: int = 0
    telemetry_days: list[str] = field(default_factory=list)


def telemetry_days(start: datetime, days: int, history_days: int) -> list[date]:
    """The business dates telemetry is generated for: `history_days` before the start (cold
    data to archive) through the last simulated day."""
    first = start.date() - timedelta(days=history_days)
    return [first + timedelta(days=k) for k in range(history_days + days)]


def seed_fleet(
    resources: TaskResources,
    *,
    devices: int,
    start: datetime,
    days: int,
    history_days: int = 4,
    seed: int = 7,
    progress: Callable[[int], None] = lambda n: None,
) -> FleetStats:
    """Seed tenants, groups, `devices` devices, telemetry and accounts (BatchWriteItem).

    `progress(n)` is called with the number of items written so far, for a progress bar.
    """
    directory = resources.directory
    if not isinstance(directory, DynamoDBDeviceDirectory):
        raise TypeError("the demo seeds the DynamoDB devices table")
    ddb, table = resources.need_table()
    fmt = directory.id_format
    rng = random.Random(seed)
    end = start + timedelta(days=days)
    stats = FleetStats(devices=devices)
    directory.put_tenants(list(TENANTS))

    per_tenant = _split(devices, len(TENANTS))
    groups: list[DeviceGroup] = []
    fleet: list[Device] = []
    first = 0
    for tenant, count in zip(TENANTS, per_tenant, strict=True):
        for g, size in enumerate(_split(count, GROUPS_PER_TENANT)):
            if size:
                groups.append(
                    DeviceGroup(
                        tenant.tenant_id,
                        f"{tenant.tenant_id}-g{g + 1}",
                        fmt.render(first),
                        fmt.render(first + size),
                        timezone=tenant.timezone,
                        attributes={"maintenance_window": dict(MAINTENANCE_WINDOW)},
                    )
                )
            for n in range(first, first + size):
                fleet.append(_device(rng, fmt.render(n), tenant.tenant_id, start, end, stats))
            first += size
    directory.put_groups(groups)
    stats.groups = len(groups)
    stats.device_blocks = directory.put_devices(fleet)
    written = stats.device_blocks
    progress(written)

    days_list = telemetry_days(start, days, history_days)
    stats.telemetry_days = [d.isoformat() for d in days_list]
    batch: list[dict[str, Any]] = []
    for day in days_list:
        day_start = datetime(day.year, day.month, day.day, tzinfo=UTC)
        for row in _rows(rng, fleet, day, day_start, fmt):
            batch.append({"PutRequest": {"Item": encode_row(row, fmt)}})
            if len(batch) == 25:
                batch_write(ddb, table, batch)
                written += len(batch)
                stats.telemetry_rows += len(batch)
                progress(written)
                batch = []
    if batch:
        batch_write(ddb, table, batch)
        stats.telemetry_rows += len(batch)
        written += len(batch)

    accounts: list[dict[str, Any]] = []
    for tenant, count in zip(TENANTS, per_tenant, strict=True):
        for a, members in enumerate(_split(count, ACCOUNTS_PER_TENANT)):
            if members:
                accounts.append(account_item(tenant.tenant_id, f"acct-{a + 1:02d}", members))
    for chunk in range(0, len(accounts), 25):
        batch_write(ddb, table, [{"PutRequest": {"Item": i}} for i in accounts[chunk : chunk + 25]])
    stats.accounts = len(accounts)
    progress(written + len(accounts))
    return stats


def account_item(tenant: str, account: str, devices: int) -> dict[str, Any]:
    """A billing account: balance, devices billed, fee per device per day."""
    return {
        "pk": {"S": f"ACCOUNT#{tenant}"},
        "sk": {"S": account},
        "balance": {"N": str(INITIAL_BALANCE)},
        "devices": {"N": str(devices)},
        "daily_fee": {"N": str(DAILY_FEE)},
    }


def _split(total: int, parts: int) -> list[int]:
    """`total` in `parts` near-equal sizes."""
    return [total // parts + (1 if k < total % parts else 0) for k in range(parts)]


def _device(
    rng: random.Random, device_id: str, tenant: str, start: datetime, end: datetime, stats: Any
) -> Device:
    roll = rng.random()
    heartbeat: datetime | None
    if roll < NEVER_SHARE:
        heartbeat = None
        stats.never_reported += 1
    elif roll < NEVER_SHARE + SILENT_SHARE:
        span = int((end - start).total_seconds())
        heartbeat = start + timedelta(seconds=rng.randrange(span))
        stats.silent += 1
    else:
        heartbeat = end
    plan = (
        start.date() + timedelta(days=rng.randrange(-30, PLAN_SPREAD_DAYS - 30))
        if rng.random() < PLAN_SHARE
        else None
    )
    return Device(device_id=device_id, tenant=tenant, last_heartbeat=heartbeat, plan_expires=plan)


def _rows(
    rng: random.Random,
    fleet: list[Device],
    day: date,
    day_start: datetime,
    fmt: IdFormat,
) -> list[TelemetryRow]:
    """One day's rollup rows: readings follow the heartbeats (none after a device went
    silent), alarms are rare."""
    rows: list[TelemetryRow] = []
    current: list[tuple[str, int, int]] = []
    key: tuple[str, int] | None = None
    start_s = day_start.timestamp()
    end_s = start_s + 86_400
    rand = rng.random
    for device in fleet:
        block = fmt.block_of(int(device.device_id[len(fmt.prefix) :]))
        if key != (device.tenant, block):
            if key is not None and current:
                rows.append(_row(key, day, current, fmt))
            key, current = (device.tenant, block), []
        hb = device.last_heartbeat.timestamp() if device.last_heartbeat else 0.0
        if hb <= start_s:
            readings = 0
        elif hb >= end_s:
            readings = 270 + int(rand() * 19)
        else:
            readings = int((hb - start_s) // 300)
        alarms = 1 if readings and rand() < 0.003 else 0
        current.append((device.device_id, readings, alarms))
    if key is not None and current:
        rows.append(_row(key, day, current, fmt))
    return rows


def _row(
    key: tuple[str, int], day: date, readings: list[tuple[str, int, int]], fmt: IdFormat
) -> TelemetryRow:
    tenant, block = key
    return TelemetryRow(tenant=tenant, day=day, block=fmt.render(block), readings=tuple(readings))
