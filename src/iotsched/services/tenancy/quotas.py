"""Tenants' quotas: stored on each of the tenant's tasks (`TaskRecord.quotas`), so that neither
the tick nor a worker reads a tenant item, and the task count `max_tasks` holds against.

A task file's `tenants: [{name, quotas}]` sets a tenant's quotas: on the tenant's own item
(`TENANT#<name>`, read by an apply that creates a task of the tenant), on its tasks in the file
with their write (`apply_tasks`), and on its other stored tasks, stamped again here. A tenant
absent from `tenants:`, or present without `quotas:`, keeps what it has; `quotas: {}` removes
them.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from iotsched.core.quotas import TenantQuotas
from iotsched.core.task_record import TaskRecord
from iotsched.ports.tasks import TaskStore


@dataclass(frozen=True)
class TenantView:
    """A tenant as `iotsched tenants` shows it: its tasks and its quotas."""

    name: str
    tasks: list[str]
    quotas: TenantQuotas | None
    task_count: int | None  # the count kept for `max_tasks`, None while it has none

    def as_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "tasks": self.tasks,
            "quotas": self.quotas.model_dump(exclude_none=True) if self.quotas else {},
            "task_count": self.task_count,
        }


def seed_task_count(tenant: str, store: TaskStore, tasks: list[TaskRecord] | None = None) -> None:
    """Start keeping the tenant's task count from its stored tasks, unless one is kept (a read
    of the task list: an operator's action, never the tick's)."""
    if store.tenant_task_count(tenant) is not None:
        return
    listed = store.list_tasks() if tasks is None else tasks
    store.seed_tenant_task_count(tenant, sum(1 for t in listed if t.definition.tenant == tenant))


def prepare_quotas(tenant: str, quotas: TenantQuotas, store: TaskStore) -> None:
    """Before a tenant's quotas are written with its tasks: store them on the tenant's item
    (where a new task of the tenant finds them), keep its task count from now if they have
    `max_tasks` (counting its stored tasks), forget it if not (so that a `max_tasks` set again
    later counts afresh)."""
    store.put_tenant_quotas(tenant, None if quotas.empty else quotas)
    if quotas.max_tasks is not None:
        seed_task_count(tenant, store)
    else:
        store.forget_tenant_task_count(tenant)


def quotas_for_file(
    tenants: Collection[str], given: Mapping[str, TenantQuotas], store: TaskStore
) -> dict[str, TenantQuotas]:
    """The quotas a file's tasks store, by tenant: the file's own (`tenants:`), else the
    tenant's stored ones (one read per tenant the file names without them)."""
    found = dict(given)
    for tenant in sorted(set(tenants) - given.keys()):
        stored = store.get_tenant_quotas(tenant)
        if stored is not None:
            found[tenant] = stored
    return found


def stamp_quotas(
    tenant: str, quotas: TenantQuotas, store: TaskStore, *, skip: Collection[str] = ()
) -> list[str]:
    """Store the tenant's quotas on each of its stored tasks (but `skip`, written with them)
    that holds others; the ids of those changed. The next claim of each carries them."""
    stored = None if quotas.empty else quotas
    changed = []
    for task in store.list_tasks():
        if task.definition.tenant != tenant or task.task_id in skip or task.quotas == stored:
            continue
        if store.set_task_quotas(task.task_id, stored):
            changed.append(task.task_id)
    return changed


def tenant_views(store: TaskStore, *, tenant: str | None = None) -> list[TenantView]:
    """The tenants the stored tasks name (or `tenant` alone), each with its tasks and quotas."""
    tasks: dict[str, list[TaskRecord]] = {}
    for task in store.list_tasks():
        name = task.definition.tenant
        if name is not None and (tenant is None or name == tenant):
            tasks.setdefault(name, []).append(task)
    views = []
    for name in sorted(tasks):
        mine = tasks[name]
        views.append(
            TenantView(
                name=name,
                tasks=sorted(t.task_id for t in mine),
                quotas=store.get_tenant_quotas(name),
                task_count=store.tenant_task_count(name),
            )
        )
    return views
