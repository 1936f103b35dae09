"""Routes of the audit trail: a task's versions, a rollback, and the audit records."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler.openapi.params import Body, Query

from iotsched.api.audit_views import (
    MAX_AUDIT_PAGE,
    AuditItem,
    RollbackRequest,
    RollbackResult,
    VersionItem,
)
from iotsched.api.errors import ApiInputError
from iotsched.api.identity import Caller
from iotsched.api.models import Problem
from iotsched.api.params import TaskId
from iotsched.api.routing import Api, responses
from iotsched.api.scope import require_task, require_tenant
from iotsched.core.audit import AuditRecord
from iotsched.services.definitions.history import (
    audit_window,
    rollback_task,
    task_history,
)
from iotsched.services.wiring import Wiring

__all__ = [
    "MAX_AUDIT_PAGE",
    "AuditItem",
    "RollbackRequest",
    "RollbackResult",
    "VersionItem",
    "register",
]


def register(api: Api) -> None:
    """Add these routes to `api`."""
    route = api.route
    services_factory = api.services
    strict_body = api.strict_body

    @route(
        "GET",
        "/tasks/<task_id>/versions",
        operation_id="listTaskVersions",
        tags=["tasks"],
        summary="A task's versions, oldest first, each with who wrote it and what it changed",
        responses=responses(400, 404),
    )
    def versions(task_id: TaskId) -> list[VersionItem]:
        svc = services_factory()
        require_task(api.caller(), svc, task_id)
        views = task_history(task_id, svc.tasks)
        return [VersionItem.model_validate(v.as_json()) for v in views]

    @route(
        "POST",
        "/tasks/<task_id>/rollback",
        operation_id="rollbackTask",
        tags=["tasks"],
        summary="Make an earlier version's definition the current one, as a new version",
        description="Goes through the same checks as an apply; history is never rewritten.",
        responses=responses(400, 404, 409, 415),
    )
    def rollback(
        task_id: TaskId,
        request: Annotated[RollbackRequest, Body(openapi_examples={"v2": {"value": {"to": 2}}})],
    ) -> RollbackResult:
        request = strict_body(RollbackRequest) or request
        svc = services_factory()
        caller = api.caller()
        require_task(caller, svc, task_id)
        current = svc.tasks.get_task(task_id)
        if not caller.operator and current is not None:
            # the version restored must be of a tenant the caller holds (one of an earlier
            # incarnation is refused as unknown by the rollback itself)
            for v in svc.tasks.task_versions(task_id):
                if v.version == request.to >= current.incarnation:
                    require_tenant(caller, task_id, v.definition.tenant)
        applied = rollback_task(
            task_id,
            svc.tasks,
            to=request.to,
            handlers=svc.handlers,
            now=svc.clock.now,
            stamp=svc.record_clock.now,
            actor=api.actor(),
        )
        task = svc.tasks.get_task(task_id)
        return RollbackResult(
            task_id=task_id,
            rolled_back_to=request.to,
            changed=bool(applied.updated),
            version=task.version if task else 0,
        )

    @route(
        "GET",
        "/audit",
        operation_id="listAudit",
        tags=["audit"],
        summary="Who changed what and when, oldest first: of one task, or of every task",
        responses=responses(400),
    )
    def list_audit(
        task: Annotated[
            str | None, Query(description="A task id, or `calendar:<name>`.", max_length=200)
        ] = None,
        since: Annotated[
            str | None, Query(description="ISO date or instant; default a day before `until`.")
        ] = None,
        until: Annotated[
            str | None, Query(description="ISO date or instant, exclusive; default now.")
        ] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_AUDIT_PAGE)] = 200,
    ) -> list[AuditItem]:
        svc = services_factory()
        try:
            start, end = audit_window(since, until, now=svc.record_clock.now())
        except ValueError as exc:
            raise ApiInputError(str(exc), [Problem(field="query", message=str(exc))]) from None
        caller = api.caller()
        if task is not None:
            require_task(caller, svc, task)
        found = svc.tasks.list_audit(since=start, until=end, subject=task, limit=limit)
        if not caller.operator:
            seen: dict[tuple[str, int], bool] = {}
            found = [r for r in found if _sees(caller, svc, r, seen)]
        return [AuditItem.model_validate(r.model_dump(mode="json")) for r in found]


def _sees(
    caller: Caller, svc: Wiring, record: AuditRecord, seen: dict[tuple[str, int], bool]
) -> bool:
    """Whether a record is the caller's: of a tenant it holds, by the tenant the record names
    (whoever holds its task id now); named calendars are the operators'. A record from before
    records named their tenant is decided by its task's then: the current task's for a
    version of its incarnation, else the version's own (a deleted task's last one for a
    record without a version); one read per subject and version."""
    if record.stamped:
        return caller.sees(record.tenant)
    subject, version = record.subject, record.version or 0
    if subject.startswith("calendar:"):
        return False
    if (subject, version) not in seen:
        task = svc.tasks.get_task(subject)
        owner: list[str | None]
        if task is not None and version >= task.incarnation:
            owner = [task.definition.tenant]
        else:
            kept = svc.tasks.task_versions(subject)
            owner = [v.definition.tenant for v in kept if v.version == version]
            if not owner and task is None and kept:  # a deleted task's: its last version's
                owner = [kept[-1].definition.tenant]
        seen[(subject, version)] = bool(owner) and caller.sees(owner[0])
    return seen[(subject, version)]
