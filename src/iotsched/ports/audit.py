"""The audit log port: who changed what and when, listed by subject and by time."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from iotsched.core.audit import AuditRecord, TaskVersion


class TaskConflictError(RuntimeError):
    """A task changed meanwhile (another apply wrote a newer version): nothing was written;
    read it again and apply again."""


class TaskQuotaError(RuntimeError):
    """A task would take its tenant past its `max_tasks`: nothing of it was written."""

    def __init__(self, tenant: str, limit: int, task_ids: list[str]) -> None:
        super().__init__(
            f"tenant {tenant} has reached its quota max_tasks ({limit}): "
            f"task {', '.join(task_ids)} not created"
        )
        self.tenant, self.limit, self.task_ids = tenant, limit, task_ids


class AuditLog(Protocol):
    """Audit records and task versions.

    The task store writes a change's record in the same transaction as the change where the
    change is one write of the task store (apply, pause, resume, delete, calendars). A change
    of several writes (a run, a cancel) records itself `pending` first and settles the record
    after, so that no change lands without its record.
    """

    def record_audit(self, entry: AuditRecord) -> None:
        """Store `entry` (by its id: storing it again replaces it, so a retry is harmless)."""
        ...

    def list_audit(
        self,
        *,
        since: datetime,
        until: datetime,
        subject: str | None = None,
        limit: int | None = None,
    ) -> list[AuditRecord]:
        """The records at `since` or later and before `until`, oldest first: one subject's (a
        task id, `calendar:<name>`), or everyone's. Reads the days of the range, no scan."""
        ...

    def task_versions(self, task_id: str) -> list[TaskVersion]:
        """Every stored version of the task's definition, oldest first (kept after a delete)."""
        ...
