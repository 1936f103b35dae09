"""The tenant quotas port: a tenant's quotas, and the count of its tasks kept for
`max_tasks` (seeded once, never past the quota)."""

from __future__ import annotations

from typing import Protocol

from iotsched.core.quotas import TenantQuotas


class TenantQuotaStore(Protocol):
    """A tenant's quotas and its task count, and the copy of its quotas each task carries."""

    def tenant_task_count(self, tenant: str) -> int | None:
        """The tenant's task count kept for `max_tasks` (a consistent read), None if not kept."""
        ...

    def get_tenant_quotas(self, tenant: str) -> TenantQuotas | None:
        """The tenant's quotas as last set (its item `TENANT#<tenant>`), None if none."""
        ...

    def put_tenant_quotas(self, tenant: str, quotas: TenantQuotas | None) -> None:
        """Set (None: remove) the tenant's quotas on its item; idempotent."""
        ...

    def seed_tenant_task_count(self, tenant: str, count: int) -> bool:
        """Start keeping the tenant's task count at `count` (its tasks, counted when its
        `max_tasks` was set), iff none is kept: False if one was (it stays)."""
        ...

    def forget_tenant_task_count(self, tenant: str) -> None:
        """Stop keeping the tenant's task count (its `max_tasks` was removed); idempotent."""
        ...

    def set_task_quotas(self, task_id: str, quotas: TenantQuotas | None) -> bool:
        """Store its tenant's quotas on a task (`TaskRecord.quotas`; None: none), leaving its
        definition, version and clock; False if there is no such task."""
        ...
