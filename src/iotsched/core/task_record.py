"""A task as stored (`TaskRecord`): its definition with the scheduling state the dispatcher
keeps (next fire, pause, the instance it holds and its queue, resolved calendars and quotas)."""

from __future__ import annotations

from datetime import date, datetime

from pydantic import Field

from iotsched.core.quotas import TenantQuotas
from iotsched.core.task_definition import TaskDefinition
from iotsched.core.value_types import Frozen

#: The longest pause note a task keeps (the task item also holds the whole definition).
MAX_NOTE_CHARS = 500


class TaskRecord(Frozen):
    """A task as stored: its definition plus the scheduling state the dispatcher keeps."""

    definition: TaskDefinition
    version: int = Field(ge=1)
    #: The version this task id's current incarnation began with. A task deleted and created
    #: again starts a new incarnation: its versions, instances, request ids and audit records
    #: are its own, and nothing of the one before reaches it (docs/isolation.md).
    incarnation: int = Field(default=1, ge=1)
    next_fire: datetime | None
    last_slot: datetime | None = None
    paused: bool = False
    updated_at: datetime
    updated_by: str | None = None  # who wrote this version (the audit record's actor)
    active: str | None = None  # the instance holding a non-parallel task (blocking)
    queue: list[str] = Field(default_factory=list)  # serial: instances waiting, oldest first
    pause_note: str | None = None  # why it was paused (an operator's note, or the scheduler's)
    runs: int = Field(default=0, ge=0)  # slots fired so far by its trigger (`max_runs`)
    # The dates of each named calendar its definition excludes, resolved when it was applied
    # (or when the calendar was), so that the tick reads no calendar item.
    calendars: dict[str, list[date]] = Field(default_factory=dict)
    # Its tenant's quotas, resolved when it was applied (or when the tenant's quotas were), so
    # that the tick reads no tenant item. None: the tenant has none.
    quotas: TenantQuotas | None = None

    @property
    def fires(self) -> bool:
        """True when the dispatcher may find the task due (enabled, not paused, a next fire)."""
        return self.definition.enabled and not self.paused and self.next_fire is not None

    @property
    def task_id(self) -> str:
        """The task's id."""
        return self.definition.id
