"""The Device Management System's port: tenants, groups and devices by stable id range."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any, Protocol


@dataclass(frozen=True)
class Tenant:
    """A tenant of the IoT platform and the timezone its business days are counted in."""

    tenant_id: str
    timezone: str = "UTC"
    name: str = ""


@dataclass(frozen=True)
class DeviceGroup:
    """A group of a tenant's devices: a stable, half-open id range `[first_id, end_id)`.

    Groups are what `sharding: groups` cuts an instance into; `bounds()` is what the instance
    stores, so a shard's devices are fixed by ids, never by a page or an offset.

    `timezone` is the group's own (an IANA zone; UTC where the directory records none); `attributes` are what the Device Management System keeps on the group
    (JSON values), e.g. a `maintenance_window: {cron, duration[, timezone]}` that a task's
    `window.group_attribute` names. Neither is part of the bounds: a plan stores only what its
    task reads of them.
    """

    tenant: str
    group: str
    first_id: str
    end_id: str
    timezone: str = "UTC"
    attributes: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=True)

    def bounds(self) -> dict[str, Any]:
        """The shard bounds stored with the instance."""
        return {
            "tenant": self.tenant,
            "group": self.group,
            "first_id": self.first_id,
            "end_id": self.end_id,
        }


@dataclass(frozen=True)
class Device:
    """One device as the directory knows it.

    Attributes:
        device_id: the stable id (ids order devices; ranges are half-open).
        tenant: the owning tenant.
        last_heartbeat: the device's latest heartbeat (UTC), None if it never reported.
        offline_since: when an inspection marked it offline (the inspected interval's end).
        plan_expires: the last day of its data plan, if it has one.
    """

    device_id: str
    tenant: str
    last_heartbeat: datetime | None = None
    offline_since: datetime | None = None
    plan_expires: date | None = None


class DirectoryError(RuntimeError):
    """The Device Management System could not answer (after its adapter's retries)."""


class DeviceDirectory(Protocol):
    """The Device Management System: tenants, groups and devices by stable id range.

    Shard planning reads groups at fire time (task params never carry a device list that may
    have expired); handlers read devices by the id range of their shard's bounds.
    """

    def tenants(self) -> list[Tenant]:
        """Every tenant, by id."""
        ...

    def groups(self, tenant: str | None = None) -> list[DeviceGroup]:
        """The groups of `tenant` (every tenant's when None), by tenant then first id."""
        ...

    def devices(self, tenant: str, first_id: str, end_id: str) -> Iterator[Device]:
        """The tenant's devices with `first_id <= device_id < end_id`, in id order.

        Raises ValueError for ids the directory cannot order (e.g. a foreign id format).
        """
        ...

    def mark_offline(self, tenant: str, device_id: str, *, since: datetime) -> bool:
        """Mark a device offline as of `since`, once: True if this call marked it, False if it
        was already marked (or is unknown). A second call never changes the first mark."""
        ...
