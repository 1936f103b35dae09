"""The task store in dicts: MemoryTaskStore."""

from __future__ import annotations

import threading
from collections.abc import Collection, Mapping, Sequence
from datetime import UTC, date, datetime
from typing import Any

from iotsched.adapters.memory.alertstate import AlertStates
from iotsched.core.audit import AuditRecord, TaskVersion, Verb
from iotsched.core.buckets import DEFAULT_BUCKETS, bucket_of
from iotsched.core.calendars import Calendar
from iotsched.core.instance_record import incarnation_key
from iotsched.core.quotas import TenantQuotas
from iotsched.core.task_record import TaskRecord
from iotsched.core.task_triggers import AfterTrigger
from iotsched.ports.audit import (
    TaskConflictError,
    TaskQuotaError,
)
from iotsched.ports.store_errors import UnreadableRecordError
from iotsched.ports.tasks import TaskAdvance
from iotsched.ports.ticks import TickLease


class MemoryTaskStore(AlertStates):
    """TaskStore in a dict."""

    def __init__(self, *, buckets: int = DEFAULT_BUCKETS) -> None:
        AlertStates.__init__(self)
        self._tasks: dict[str, TaskRecord] = {}
        self._lock = threading.Lock()
        self._buckets = buckets
        self._ticks: dict[int, dict[str, Any]] = {}  # bucket -> its dispatch lease
        self._calendars: dict[str, Calendar] = {}
        self._task_counts: dict[str, int] = {}  # per tenant, kept for `max_tasks`
        self._tenant_quotas: dict[str, TenantQuotas] = {}
        self._versions: dict[str, dict[int, TaskVersion]] = {}
        self._audit: dict[str, AuditRecord] = {}

    def put_tasks(
        self,
        tasks: Sequence[TaskRecord],
        *,
        audit: Sequence[AuditRecord] = (),
        counted: Collection[str] = (),
    ) -> None:
        with self._lock:
            adds: dict[str, int] = {}
            for task in tasks:
                tenant, quotas = task.definition.tenant, task.quotas
                if task.task_id not in counted or tenant is None or quotas is None:
                    continue
                limit = quotas.max_tasks
                if limit is None:
                    continue
                adds[tenant] = adds.get(tenant, 0) + 1
                kept = self._task_counts.get(tenant)
                if kept is None or kept + adds[tenant] > limit:
                    refused = [t.task_id for t in tasks if t.task_id in counted]
                    raise TaskQuotaError(tenant, limit, refused)
            for task in tasks:  # all or nothing, as one transaction
                current = self._tasks.get(task.task_id)
                versions = self._versions.get(task.task_id, {})
                if (current is not None and current.version >= task.version) or (
                    task.version in versions
                ):
                    stored = current.version if current else max(versions)
                    raise TaskConflictError(
                        f"task {task.task_id} changed meanwhile (version {stored} is stored, "
                        f"this write is version {task.version}): read it and apply again"
                    )
            for task in tasks:
                current = self._tasks.get(task.task_id)
                versions = self._versions.setdefault(task.task_id, {})
                versions[task.version] = _version_of(task, audit)
                for entry in audit:
                    if entry.subject == task.task_id:
                        self._audit[entry.audit_id] = entry
                # the hold is the dispatcher's, and so is the run count
                hold = (
                    {"active": current.active, "queue": current.queue, "runs": current.runs}
                    if current
                    else {"runs": 0}
                )
                self._tasks[task.task_id] = task.model_copy(update=hold)
            for tenant, n in adds.items():
                self._task_counts[tenant] = self._task_counts.get(tenant, 0) + n

    def tenant_task_count(self, tenant: str) -> int | None:
        with self._lock:
            return self._task_counts.get(tenant)

    def get_tenant_quotas(self, tenant: str) -> TenantQuotas | None:
        with self._lock:
            return self._tenant_quotas.get(tenant)

    def put_tenant_quotas(self, tenant: str, quotas: TenantQuotas | None) -> None:
        with self._lock:
            if quotas is None:
                self._tenant_quotas.pop(tenant, None)
            else:
                self._tenant_quotas[tenant] = quotas

    def seed_tenant_task_count(self, tenant: str, count: int) -> bool:
        with self._lock:
            if tenant in self._task_counts:
                return False
            self._task_counts[tenant] = count
            return True

    def forget_tenant_task_count(self, tenant: str) -> None:
        with self._lock:
            self._task_counts.pop(tenant, None)

    def set_task_quotas(self, task_id: str, quotas: TenantQuotas | None) -> bool:
        with self._lock:
            task = self._tasks.get(task_id)
            if task is None:
                return False
            self._tasks[task_id] = task.model_copy(update={"quotas": quotas})
            return True

    def put_calendars(
        self,
        calendars: Sequence[Calendar],
        resolved: Mapping[str, Mapping[str, list[date]]],
        *,
        audit: Sequence[AuditRecord] = (),
    ) -> None:
        with self._lock:
            for entry in audit:
                self._audit[entry.audit_id] = entry
            for calendar in calendars:
                self._calendars[calendar.name] = calendar
            for task_id, dates in resolved.items():
                task = self._tasks.get(task_id)
                if task is not None:  # a task deleted meanwhile is left out
                    update = {"calendars": {k: list(v) for k, v in dates.items()}}
                    self._tasks[task_id] = task.model_copy(update=update)

    def get_calendar(self, name: str) -> Calendar | None:
        return self._calendars.get(name)

    def list_calendars(self) -> list[Calendar]:
        return [self._calendars[name] for name in sorted(self._calendars)]

    def get_task(self, task_id: str) -> TaskRecord | None:
        return self._tasks.get(task_id)

    def children_of(self, task_id: str) -> list[str]:
        return sorted(
            t.task_id
            for t in self._tasks.values()
            if isinstance(t.definition.trigger, AfterTrigger)
            and task_id in t.definition.trigger.after
        )

    def list_tasks(self, *, after: str | None = None, limit: int | None = None) -> list[TaskRecord]:
        ids = [k for k in sorted(self._tasks) if after is None or k > after]
        return [self._tasks[k] for k in ids[:limit]]

    def due_tasks(
        self,
        now: datetime,
        *,
        bucket: int | None = None,
        limit: int | None = None,
        unreadable: list[UnreadableRecordError] | None = None,
    ) -> list[TaskRecord]:
        # Records are kept decoded here: none is ever unreadable.
        return sorted(
            (
                t
                for t in self._tasks.values()
                if t.fires
                and t.next_fire is not None
                and t.next_fire <= now
                and (bucket is None or bucket_of(t.task_id, self._buckets) == bucket)
            ),
            key=lambda t: (t.next_fire, t.task_id),
        )[:limit]

    def take_tick(
        self, bucket: int, minute: datetime, *, owner: str, now: datetime, until: datetime
    ) -> TickLease:
        with self._lock:
            lease = self._ticks.setdefault(bucket, {})
            free = lease.get("until") is None or lease["until"] <= now or lease["owner"] == owner
            fresh = lease.get("done") != minute
            if free and fresh:
                lease.update(owner=owner, until=until, minute=minute)
                return TickLease(taken=True, owner=owner, minute=minute, until=until)
            live = lease.get("until") is not None and lease["until"] > now
            return TickLease(
                taken=False,
                owner=lease["owner"] if live else None,
                minute=lease["minute"] if live else None,
                until=lease["until"] if live else None,
                done=lease.get("done"),
            )

    def release_tick(self, bucket: int, *, owner: str, minute: datetime, done: bool) -> bool:
        with self._lock:
            lease = self._ticks.get(bucket, {})
            if lease.get("owner") != owner:
                return False
            lease["until"] = datetime.fromtimestamp(0, tz=UTC)
            if done:
                lease["done"] = minute
            return True

    def delete_task(
        self,
        task_id: str,
        *,
        audit: AuditRecord | None = None,
        counted: str | None = None,
        incarnation: int = 1,
    ) -> bool:
        with self._lock:
            task = self._tasks.get(task_id)
            if task is None or task.active is not None:
                return False
            del self._tasks[task_id]
            self.forget_alert_state(incarnation_key(task_id, incarnation))
            if counted is not None and counted in self._task_counts:
                self._task_counts[counted] -= 1
            if audit is not None:
                self._audit[audit.audit_id] = audit
            return True

    def set_paused(
        self,
        task_id: str,
        *,
        paused: bool,
        note: str | None = None,
        audit: AuditRecord | None = None,
        restart: tuple[datetime | None, datetime | None] | None = None,
    ) -> bool:
        with self._lock:
            task = self._tasks.get(task_id)
            if task is None:
                return False
            if audit is not None:
                self._audit[audit.audit_id] = audit
            update: dict[str, object] = {"paused": paused, "pause_note": note}
            if restart is not None:
                update["next_fire"], update["last_slot"] = restart
            self._tasks[task_id] = task.model_copy(update=update)
            return True

    def advance_task(
        self,
        task_id: str,
        *,
        expected_next_fire: datetime | None,
        next_fire: datetime | None,
        last_slot: datetime | None,
        runs: int = 0,
    ) -> bool:
        with self._lock:
            task = self._tasks.get(task_id)
            if task is None or task.next_fire != expected_next_fire:
                return False
            self._tasks[task_id] = task.model_copy(
                update={
                    "next_fire": next_fire,
                    "last_slot": last_slot if last_slot is not None else task.last_slot,
                    "runs": task.runs + runs,
                }
            )
            return True

    def advance_tasks(self, advances: Sequence[TaskAdvance]) -> list[bool]:
        return [
            self.advance_task(
                a.task_id,
                expected_next_fire=a.expected_next_fire,
                next_fire=a.next_fire,
                last_slot=a.last_slot,
                runs=a.runs,
            )
            for a in advances
        ]

    # -- versions and the audit log ---------------------------------------------------------

    def record_audit(self, entry: AuditRecord) -> None:
        with self._lock:
            self._audit[entry.audit_id] = entry

    def list_audit(
        self,
        *,
        since: datetime,
        until: datetime,
        subject: str | None = None,
        limit: int | None = None,
    ) -> list[AuditRecord]:
        with self._lock:
            found = sorted(
                (
                    e
                    for e in self._audit.values()
                    if since <= e.at < until and (subject is None or e.subject == subject)
                ),
                key=lambda e: e.audit_id,
            )
        return found[:limit]

    def task_versions(self, task_id: str) -> list[TaskVersion]:
        with self._lock:
            versions = self._versions.get(task_id, {})
            return [versions[n] for n in sorted(versions)]


def _version_of(task: TaskRecord, audit: Sequence[AuditRecord]) -> TaskVersion:
    """The version item a task write stores: its definition, who and when, and by which verb
    (its audit record's, else an apply)."""
    verbs = [e.verb for e in audit if e.subject == task.task_id]
    return TaskVersion(
        task_id=task.task_id,
        version=task.version,
        definition=task.definition,
        at=task.updated_at,
        actor=task.updated_by or "",
        verb=verbs[0] if verbs else Verb.APPLY,
    )
