"""An in-memory Device Management System, for unit tests (the contract suite holds it to the
DynamoDB adapter's behaviour)."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import replace
from datetime import datetime

from iotsched.ports.devices import (
    Device,
    DeviceGroup,
    Tenant,
)


class MemoryDeviceDirectory:
    """`DeviceDirectory` in dictionaries. Ids order as strings (use fixed-width ids)."""

    def __init__(
        self,
        tenants: Sequence[Tenant] = (),
        groups: Sequence[DeviceGroup] = (),
        devices: Sequence[Device] = (),
    ) -> None:
        self._lock = threading.Lock()
        self._tenants: dict[str, Tenant] = {}
        self._groups: dict[tuple[str, str], DeviceGroup] = {}
        self._devices: dict[tuple[str, str], Device] = {}
        self.put_tenants(tenants)
        self.put_groups(groups)
        self.put_devices(devices)

    def tenants(self) -> list[Tenant]:
        """Every tenant, by id."""
        with self._lock:
            return sorted(self._tenants.values(), key=lambda t: t.tenant_id)

    def groups(self, tenant: str | None = None) -> list[DeviceGroup]:
        """The groups of `tenant` (every tenant's when None), by tenant then first id."""
        with self._lock:
            found = [g for g in self._groups.values() if tenant is None or g.tenant == tenant]
        return sorted(found, key=lambda g: (g.tenant, g.first_id, g.group))

    def devices(self, tenant: str, first_id: str, end_id: str) -> Iterator[Device]:
        """The tenant's devices in `[first_id, end_id)`, in id order."""
        with self._lock:
            found = [
                d
                for (t, device_id), d in self._devices.items()
                if t == tenant and first_id <= device_id < end_id
            ]
        yield from sorted(found, key=lambda d: d.device_id)

    def mark_offline(self, tenant: str, device_id: str, *, since: datetime) -> bool:
        """Mark once; False if already marked or unknown."""
        with self._lock:
            device = self._devices.get((tenant, device_id))
            if device is None or device.offline_since is not None:
                return False
            self._devices[(tenant, device_id)] = replace(device, offline_since=since)
            return True

    def put_tenants(self, tenants: Sequence[Tenant]) -> None:
        """Add or replace tenants."""
        with self._lock:
            self._tenants.update({t.tenant_id: t for t in tenants})

    def put_groups(self, groups: Sequence[DeviceGroup]) -> None:
        """Add or replace groups."""
        with self._lock:
            for g in groups:
                if g.end_id <= g.first_id:
                    raise ValueError(f"group {g.tenant}/{g.group}: end_id must follow first_id")
                self._groups[(g.tenant, g.group)] = g

    def put_devices(self, devices: Sequence[Device]) -> int:
        """Add or replace devices; returns how many were written."""
        with self._lock:
            self._devices.update({(d.tenant, d.device_id): d for d in devices})
        return len(devices)
