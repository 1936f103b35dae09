"""Audit records and task versions: who changed what, when, and the difference it made.

Pure: the records, the field-level difference of two definitions, and the ids and partitions
the stores key them by.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from datetime import date, datetime
from enum import StrEnum
from typing import Any

from pydantic import Field

from iotsched.core.task_definition import TaskDefinition
from iotsched.core.timeutil import iso
from iotsched.core.value_types import Frozen

#: The actor of the scheduler's own changes (an abort's or a failure's pause).
SCHEDULER = "scheduler"


class Verb(StrEnum):
    """A change an audit record names; every verb that changes state has one."""

    APPLY = "apply"
    PAUSE = "pause"
    RESUME = "resume"
    DELETE = "delete"
    RUN = "run"
    SUBMIT = "submit"
    BACKFILL = "backfill"
    CANCEL = "cancel"
    RERUN = "rerun"
    ROLLBACK = "rollback"
    CALENDARS = "calendars"


class AuditState(StrEnum):
    """`done`: the change landed (written with it, or confirmed after it). `pending`: recorded
    before a change of several writes that has not confirmed (it may or may not have landed:
    its instance ids say what to look at). `failed`: the change was refused after its record."""

    DONE = "done"
    PENDING = "pending"
    FAILED = "failed"


class AuditRecord(Frozen):
    """One change: who, when, what (verb, subject, instances), and the difference it made."""

    audit_id: str
    at: datetime
    actor: str
    verb: Verb
    #: What changed: a task id, or `calendar:<name>` for a named calendar.
    subject: str
    #: The tenant of the task it concerns (none: an operator's task, or a calendar): a tenant
    #: caller sees only its own tenant's records, whoever holds the task id now. A record
    #: written before records carried it has the field unset (`stamped` is False).
    tenant: str | None = None
    state: AuditState = AuditState.DONE
    instance_ids: list[str] = Field(default_factory=list)
    #: The task's version after the change (apply, rollback), or the one it acted on.
    version: int | None = None
    #: Field -> [before, after], JSON values; a field absent on one side is null there.
    diff: dict[str, list[Any]] = Field(default_factory=dict)
    note: str | None = None
    detail: str | None = None

    @property
    def day(self) -> date:
        return self.at.date()

    @property
    def stamped(self) -> bool:
        """Whether the record names its tenant (every record written since records do)."""
        return "tenant" in self.model_fields_set


class TaskVersion(Frozen):
    """One version of a task's definition, kept beside the task."""

    task_id: str
    version: int = Field(ge=1)
    definition: TaskDefinition
    at: datetime
    actor: str
    verb: Verb = Verb.APPLY


def new_audit(
    verb: Verb,
    subject: str,
    *,
    actor: str,
    at: datetime,
    tenant: str | None,
    state: AuditState = AuditState.DONE,
    **fields: Any,
) -> AuditRecord:
    """An audit record with a fresh id that sorts by time (`<at>#<random>`), of `tenant`'s
    task (None: an operator's task or a calendar)."""
    return AuditRecord(
        audit_id=f"{iso(at)}#{secrets.token_hex(4)}",
        at=at,
        actor=actor,
        verb=verb,
        subject=subject,
        tenant=tenant,
        state=state,
        **fields,
    )


def definition_diff(
    before: TaskDefinition | None, after: TaskDefinition | None
) -> dict[str, list[Any]]:
    """The fields of a task definition that differ, as field -> [before, after] (JSON values,
    nested fields dotted: `trigger.cron`); a whole side missing (a create, a delete) is null."""
    old = before.model_dump(mode="json", exclude_none=True) if before else {}
    new = after.model_dump(mode="json", exclude_none=True) if after else {}
    return dict_diff(old, new)


def dict_diff(
    old: Mapping[str, Any], new: Mapping[str, Any], prefix: str = ""
) -> dict[str, list[Any]]:
    """Field -> [before, after] over two JSON mappings, recursing into mappings on both sides."""
    diff: dict[str, list[Any]] = {}
    for key in sorted({*old, *new}):
        a, b = old.get(key), new.get(key)
        name = f"{prefix}{key}"
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            diff.update(dict_diff(a, b, f"{name}."))
        elif a != b:
            diff[name] = [a, b]
    return diff
