"""A tenant's in-flight slots in dicts (`take_tenant_slot`, `release_tenant_slot`), as the
DynamoDB adapter's slot items: one holder per slot, free once its lease has ended; and its line
(`join_tenant_line`), a set of places."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from iotsched.adapters.memory.instances import InstanceRecords
from iotsched.core.buckets import DEFAULT_BUCKETS
from iotsched.core.quotas import slot_order


@dataclass
class _Slot:
    holder: str
    until: datetime


class TenantSlots(InstanceRecords):
    """The tenants' in-flight slots, under the instances' lock."""

    def __init__(self, *, buckets: int = DEFAULT_BUCKETS) -> None:
        super().__init__(buckets=buckets)
        self._slots: dict[str, dict[int, _Slot]] = {}
        self._lines: dict[str, set[str]] = {}

    def take_tenant_slot(
        self, tenant: str, holder: str, *, cap: int, now: datetime, until: datetime
    ) -> int | None:
        with self._lock:
            slots = self._slots.setdefault(tenant, {})
            live = {i for i, s in slots.items() if s.until > now}
            if len(live) >= cap:
                return None
            free = [i for i in range(cap) if i not in live]
            index = slot_order(holder, free, cap)[0]
            slots[index] = _Slot(holder, until)
            return index

    def extend_tenant_slot(self, tenant: str, slot: int, holder: str, *, until: datetime) -> bool:
        with self._lock:
            held = self._slots.get(tenant, {}).get(slot)
            if held is None or held.holder != holder:
                return False
            held.until = until
            return True

    def release_tenant_slot(self, tenant: str, slot: int, holder: str) -> None:
        with self._lock:
            slots = self._slots.get(tenant, {})
            if slot in slots and slots[slot].holder == holder:
                del slots[slot]

    def tenant_slots(self, tenant: str, now: datetime) -> dict[int, str]:
        """The tenant's slots held at `now`, by index: their holders (for tests and views)."""
        with self._lock:
            return {i: s.holder for i, s in self._slots.get(tenant, {}).items() if s.until > now}

    def join_tenant_line(self, tenant: str, place: str, *, expires: datetime) -> None:
        with self._lock:
            self._lines.setdefault(tenant, set()).add(place)

    def tenant_line_head(self, tenant: str) -> str | None:
        with self._lock:
            return min(self._lines.get(tenant, ()), default=None)

    def leave_tenant_line(self, tenant: str, place: str) -> None:
        with self._lock:
            self._lines.get(tenant, set()).discard(place)
