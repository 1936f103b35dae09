"""The audit trail's bodies: a task's versions, a rollback, and the audit records (the API's
`GET /tasks/{id}/versions`, `POST /tasks/{id}/rollback`, `GET /audit`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field

from iotsched.api.models import Request, View

#: The most records one audit listing answers.
MAX_AUDIT_PAGE = 1000


class VersionItem(View):
    """One version of a task: who wrote it, when, by which verb, what it changed."""

    version: int
    at: str
    actor: str = Field(description="The principal that wrote it (`scheduler` for its own).")
    verb: str = Field(description="apply or rollback")
    current: bool
    diff: dict[str, list[Any]] = Field(
        description="Field -> [before, after] against the version before (dotted nested fields)."
    )


class RollbackRequest(Request):
    """Which version's definition becomes the current one."""

    to: int = Field(ge=1)


class RollbackResult(View):
    """What a rollback did: `changed` false when that version's definition is the current one."""

    task_id: str
    rolled_back_to: int
    changed: bool
    version: int = Field(description="The task's version now.")


class AuditItem(View):
    """One change: who, when, what, and the difference it made."""

    audit_id: str
    at: datetime
    actor: str
    verb: str
    subject: str = Field(description="A task id, or `calendar:<name>`.")
    tenant: str | None = Field(
        default=None,
        description="The tenant of the task it concerns (none: an operator's task or a calendar, "
        "or a record written before records named their tenant).",
    )
    state: str = Field(
        description="`done`; `pending` for a change of several writes not confirmed (it may or "
        "may not have landed: see its instances); `failed` for one refused after its record."
    )
    instance_ids: list[str]
    version: int | None
    diff: dict[str, list[Any]]
    note: str | None
    detail: str | None
