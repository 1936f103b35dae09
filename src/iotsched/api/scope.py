"""What a caller may see and change: every route asks here (design.md, section 13).

A record of a tenant the caller does not hold answers exactly as a missing one does (the same
404, after the same one read); a task or an alert with no tenant is the operators'. Operators
pass every check without a read of their own, so they pay nothing for scoping.
"""

from __future__ import annotations

from typing import Any

from iotsched.api.identity import Caller, ForbiddenError
from iotsched.core.instance_record import InstanceRecord
from iotsched.core.task_record import TaskRecord
from iotsched.core.value_types import passes_tenant_filter
from iotsched.ports.store_errors import UnreadableRecordError
from iotsched.services.definitions.control import TaskNotFoundError
from iotsched.services.definitions.task_file import TaskFileError
from iotsched.services.operations.actions import InstanceNotFoundError
from iotsched.services.wiring import Wiring


def visible_task(caller: Caller, task: TaskRecord | None, task_id: str) -> TaskRecord:
    """`task`, if it exists and the caller sees it; else `TaskNotFoundError`, as if missing."""
    if task is None or not caller.sees(task.definition.tenant):
        raise TaskNotFoundError(task_id)
    return task


def visible_instance(
    caller: Caller, inst: InstanceRecord | None, instance_id: str
) -> InstanceRecord:
    """`inst`, if it exists and the caller sees it; else `InstanceNotFoundError`."""
    if inst is None or not caller.sees(inst.tenant):
        raise InstanceNotFoundError(instance_id)
    return inst


def require_task(caller: Caller, svc: Wiring, task_id: str) -> None:
    """Before an action on a task: a task the caller does not see is a 404 (operators: no read;
    a missing task is the use case's own 404)."""
    if not caller.operator:
        visible_task(caller, _readable_task(svc, task_id), task_id)


def _readable_task(svc: Wiring, task_id: str) -> TaskRecord | None:
    """The task, or None where its record cannot be read: whose it is is unknown, so to a
    tenant it is a missing one (operators mend it)."""
    try:
        return svc.tasks.get_task(task_id)
    except UnreadableRecordError:
        return None


def require_instance(caller: Caller, svc: Wiring, instance_id: str) -> None:
    """Before an action on an instance: as `require_task`."""
    if not caller.operator:
        visible_instance(caller, svc.instances.get_instance(instance_id), instance_id)


def require_tenant(caller: Caller, task_id: str, tenant: str | None) -> None:
    """Writing a task for `tenant`: refused (403) unless the caller holds it."""
    if not caller.sees(tenant):
        held = ", ".join(caller.tenant_list() or [])
        what = f"tenant {tenant!r}" if tenant else "no tenant (operators only)"
        raise ForbiddenError(
            f"task {task_id!r} names {what}; this caller may write tasks of: {held or 'none'}"
        )


def require_task_file(caller: Caller, svc: Wiring, data: Any) -> None:
    """Before applying a task file: every task's tenant is the caller's, every id it reuses is
    a task the caller sees (another tenant's is a 404), every stored parent its `after`
    triggers name is one the caller sees (else the 400 of an unknown parent), and named
    calendars, shared by every tenant, and tenants' quotas are the operators' to write."""
    if caller.operator or not isinstance(data, dict):
        return
    if data.get("calendars"):
        raise ForbiddenError("calendars are shared by every tenant: only operators write them")
    tenants = data.get("tenants")
    if isinstance(tenants, list) and any(isinstance(t, dict) and "quotas" in t for t in tenants):
        raise ForbiddenError("a tenant's quotas bound what it may use: only operators set them")
    entries = [e for e in data.get("tasks") or [] if isinstance(e, dict)]
    for entry in entries:
        require_tenant(caller, str(entry.get("id")), entry.get("tenant"))
    for entry in entries:
        task_id = str(entry.get("id"))
        existing = _readable_task(svc, task_id)
        if existing is not None:
            visible_task(caller, existing, task_id)
    # A parent in `trigger.after` of another tenant is, to this caller, an unknown one.
    in_file = {str(e.get("id")) for e in entries}
    for entry in entries:
        trigger = entry.get("trigger")
        parents = trigger.get("after") if isinstance(trigger, dict) else None
        for parent in parents if isinstance(parents, list) else []:
            if parent in in_file:
                continue
            stored = svc.tasks.get_task(str(parent))
            if stored is not None and not caller.sees(stored.definition.tenant):
                raise TaskFileError(
                    [f"task {entry.get('id')!r}: trigger.after: unknown parent {parent!r}"]
                )


def wanted(caller: Caller, tenant: str | None, filter_tenant: str | None) -> bool:
    """Whether a listed record of `tenant` is shown: the caller sees it and it matches the
    optional `?tenant=` filter (`-`: the records without a tenant)."""
    return caller.sees(tenant) and passes_tenant_filter(tenant, filter_tenant)
