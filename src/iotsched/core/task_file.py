"""A YAML task file (`TaskFile`): its tasks, named calendars and tenants, checked as a whole
(ids and names unique); `with_tenant_defaults` merges each tenant's alert defaults into its
tasks before validation."""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from iotsched.core.calendars import Calendar
from iotsched.core.input_limits import MAX_TASKS_PER_FILE
from iotsched.core.quotas import TenantQuotas
from iotsched.core.task_alerts import Alerts
from iotsched.core.task_definition import TaskDefinition
from iotsched.core.value_types import Frozen, Tenant


class TenantDefaults(Frozen):
    """A tenant's part of a task file: the `alerts:` fields its tasks do not set, and its
    `quotas:` (stored on the tenant's own item at apply)."""

    name: Tenant
    alerts: Alerts = Field(default_factory=Alerts)
    quotas: TenantQuotas | None = None


class TaskFile(Frozen):
    """A YAML task file: `tasks:` followed by a list of task definitions, and optionally
    `calendars:`, the named calendars its tasks (and others) exclude by name, and `tenants:`,
    each tenant's defaults for its tasks of the file (merged into them by
    `with_tenant_defaults` before validation, and stored on each task)."""

    # (A file of more tasks is refused before they are validated: `too_many_tasks`.)
    tasks: list[TaskDefinition] = Field(default_factory=list, max_length=MAX_TASKS_PER_FILE)
    calendars: list[Calendar] = Field(default_factory=list)
    tenants: list[TenantDefaults] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique(self) -> TaskFile:
        seen: set[str] = set()
        for task in self.tasks:
            if task.id in seen:
                raise ValueError(f"task id {task.id!r} appears twice")
            seen.add(task.id)
        names = [calendar.name for calendar in self.calendars]
        for name in names:
            if names.count(name) > 1:
                raise ValueError(f"calendar {name!r} appears twice")
        tenants = [tenant.name for tenant in self.tenants]
        for name in tenants:
            if tenants.count(name) > 1:
                raise ValueError(f"tenant {name!r} appears twice")
        return self


def too_many_tasks(data: Any) -> str | None:
    """Why a parsed task file holds more tasks than a file may, counted before any task is
    validated (pydantic counts a list's items only after validating them); None if it does
    not."""
    tasks = data.get("tasks") if isinstance(data, dict) else None
    if isinstance(tasks, list) and len(tasks) > MAX_TASKS_PER_FILE:
        return (
            f"a task file holds at most {MAX_TASKS_PER_FILE} tasks, this one {len(tasks):,}: "
            "split it"
        )
    return None


def with_tenant_defaults(data: Any) -> Any:
    """A parsed task file with each task's `alerts` filled from its tenant's defaults
    (`tenants:`): every field the task does not set. Done on the raw file, before validation,
    so that a task's own fields win field by field; a malformed part is left as written, for
    the validation to name."""
    if not isinstance(data, dict) or not isinstance(data.get("tenants"), list):
        return data
    defaults = {
        t["name"]: t["alerts"]
        for t in data["tenants"]
        if isinstance(t, dict)
        and isinstance(t.get("name"), str)
        and isinstance(t.get("alerts"), dict)
    }
    if not defaults or not isinstance(data.get("tasks"), list):
        return data
    tasks = []
    for raw in data["tasks"]:
        if isinstance(raw, dict) and isinstance(raw.get("tenant"), str):
            own = raw.get("alerts", {})
            default = defaults.get(raw["tenant"])
            if default is not None and isinstance(own, dict):
                raw = {**raw, "alerts": {**default, **own}}
        tasks.append(raw)
    return {**data, "tasks": tasks}
