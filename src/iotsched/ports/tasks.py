"""The task ports: task definitions (a version is written once, by one of concurrent applies)
and the dispatcher's per-task clock (moved only from the fire time it was read at).

`TaskStore` is the whole task store as the use-cases take it: these parts, calendars, tenant
quotas, tick leases, the audit log and the alert policy's state.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from iotsched.core.audit import AuditRecord
from iotsched.core.task_record import TaskRecord
from iotsched.ports.alert_state import AlertStateStore
from iotsched.ports.audit import AuditLog
from iotsched.ports.calendars import CalendarStore
from iotsched.ports.store_errors import UnreadableRecordError
from iotsched.ports.tenant_quotas import TenantQuotaStore
from iotsched.ports.ticks import TickLeaseStore


class TaskDefinitions(Protocol):
    """Task definitions: written with their versions and audit records, read, deleted."""

    def put_tasks(
        self,
        tasks: Sequence[TaskRecord],
        *,
        audit: Sequence[AuditRecord] = (),
        counted: Collection[str] = (),
    ) -> None:
        """Write `tasks`, each with its version item (`TaskVersion`: the definition, `version`,
        `updated_at`, `updated_by`) and the audit records whose subject it is, all in one
        transaction per task at least (a batch of up to 100 items is all-or-nothing). A task's
        run count is the store's: a new task starts at 0, a rewritten one keeps its count.

        Each task is written iff the stored one's version is lower (or none is stored) and its
        version item is new: of two applies that read the same version, one wins.

        `counted`: ids of tasks new to their tenant whose quotas have `max_tasks`: each adds one
        to its tenant's task count in its own transaction, on condition that the count is below
        the quota (so concurrent applies never pass it).

        Raises:
            TaskConflictError: a task's stored version is not lower (nothing of that task, nor
                of the tasks after it, was written).
            TaskQuotaError: a counted task would take its tenant past `max_tasks` (likewise).
        """
        ...

    def get_task(self, task_id: str) -> TaskRecord | None:
        """The task, or None."""
        ...

    def list_tasks(self, *, after: str | None = None, limit: int | None = None) -> list[TaskRecord]:
        """Tasks ordered by id: those after the id `after` (a page's last), at most `limit`
        (all without one). No table scan: the task items' sparse index entries."""
        ...

    def children_of(self, task_id: str) -> list[str]:
        """Tasks that were written with `trigger: {after: [..., task_id, ...]}`.

        May include a task whose trigger changed since: callers re-check its definition.
        """
        ...

    def delete_task(
        self,
        task_id: str,
        *,
        audit: AuditRecord | None = None,
        counted: str | None = None,
        incarnation: int = 1,
    ) -> bool:
        """Delete the task's definition iff no instance holds it (its blocking `active` slot),
        with `audit` in the same transaction; `counted`: its tenant, whose task count (kept for
        `max_tasks`) the same transaction lowers by one.

        False if there is no such task or an instance holds it (and no record is written).
        Instances, shards, versions and their history stay: they are the record of what ran.
        The alert state (failing or recovered) of its incarnation `incarnation` goes with it (a
        task created again under the same id has its own, `incarnation_key`).
        """
        ...


@dataclass(frozen=True)
class TaskAdvance:
    """One move of a task's clock, as `TaskClocks.advance_tasks` takes it."""

    task_id: str
    expected_next_fire: datetime | None
    next_fire: datetime | None
    last_slot: datetime | None
    runs: int = 0  # firings to add to the task's run count (`max_runs`)


class TaskClocks(Protocol):
    """The dispatcher's per-task clock: which tasks are due, pauses, clock moves."""

    def due_tasks(
        self,
        now: datetime,
        *,
        bucket: int | None = None,
        limit: int | None = None,
        unreadable: list[UnreadableRecordError] | None = None,
    ) -> list[TaskRecord]:
        """Enabled tasks whose next fire time is at or before `now` (index on next fire time),
        in next-fire order; with `limit`, at most that many (enough to know whether any is due).
        A due task whose record cannot be decoded is left out (and added to `unreadable`), so
        that it never holds back the others.

        `bucket`: only the tasks of that bucket (`iotsched.core.buckets.bucket_of` of the
        task id over the store's bucket count; a task written under an older, smaller count
        is found under the bucket it was written to), which is what one bucket dispatcher
        reads; None: every bucket. The index is eventually consistent: a caller must tolerate
        a task that was advanced a moment ago; the instance claim makes a stale answer
        harmless.
        """
        ...

    def set_paused(
        self,
        task_id: str,
        *,
        paused: bool,
        note: str | None = None,
        audit: AuditRecord | None = None,
        restart: tuple[datetime | None, datetime | None] | None = None,
    ) -> bool:
        """Pause or resume a task, with `audit` in the same transaction; False if there is no
        such task (and no record is written).

        A paused task is never due; resuming makes it due again from its `next_fire`. A pause
        leaves the task's clock as it is (a dispatcher may have moved it since the caller's
        read); a resume sets it to `restart` (next fire, last slot) where given. The same
        write sets the task's `pause_note` to `note` (why it was paused), or clears it when
        `note` is None: a resume clears it.
        """
        ...

    def advance_task(
        self,
        task_id: str,
        *,
        expected_next_fire: datetime | None,
        next_fire: datetime | None,
        last_slot: datetime | None,
        runs: int = 0,
    ) -> bool:
        """Move the task's clock iff its next fire time is still `expected_next_fire`, adding
        `runs` to its run count in the same write."""
        ...

    def advance_tasks(self, advances: Sequence[TaskAdvance]) -> list[bool]:
        """`advance_task` for many tasks in few requests (the tick's hot path).

        Each advance is decided alone, exactly as `advance_task` would decide it: one whose
        condition fails changes nothing and does not hold the others back. Returns, in order,
        whether each moved the clock. A task may appear once.
        """
        ...


class TaskStore(
    TaskDefinitions,
    TaskClocks,
    CalendarStore,
    TenantQuotaStore,
    TickLeaseStore,
    AuditLog,
    AlertStateStore,
    Protocol,
):
    """Task definitions, their versions and audit records, and the dispatcher's per-task clock
    (and its alert policy's state): every part above, one object."""
