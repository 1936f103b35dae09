"""Routes of tasks: list, apply a file, get, put, pause, resume, delete."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Any

from aws_lambda_powertools.event_handler.openapi.params import Query

from iotsched.api.errors import (
    ApiInputError,
    strict_task_file_problems,
    summary,
)
from iotsched.api.models import (
    AppliedTasks,
    PauseRequest,
    Problem,
    TaskChange,
    TaskDeleted,
    TaskDetail,
    TaskView,
)
from iotsched.api.params import (
    MAX_TASK_PAGE,
    PauseBody,
    TaskBody,
    TaskFileBody,
    TaskId,
    TenantFilter,
)
from iotsched.api.routing import Api, responses
from iotsched.api.scope import (
    require_task,
    require_task_file,
    require_tenant,
    visible_task,
    wanted,
)
from iotsched.core.paging import filled_page
from iotsched.core.task_record import TaskRecord
from iotsched.core.timeutil import iso
from iotsched.core.value_types import TASK_ID_PATTERN
from iotsched.services.definitions.apply import (
    AppliedFile,
    apply_task_file,
)
from iotsched.services.definitions.control import (
    TaskNotFoundError,
    delete_task,
    pause_task,
    resume_task,
)
from iotsched.services.operations.views import (
    task_view,
    upcoming_fires,
)
from iotsched.services.wiring import Wiring


def _console_fields(task: TaskRecord, svc: Wiring) -> dict[str, Any]:
    """What the console shows beside a task: its next fires and its newest instance (one
    consistent Query on the task's partition)."""
    newest = svc.instances.list_instances(
        task_id=task.task_id, limit=1, incarnation=task.incarnation
    )
    last = (
        {
            "instance_id": newest[0].instance_id,
            "status": newest[0].status.value,
            "trigger_kind": newest[0].trigger_kind.value,
            "business_date": newest[0].business_date.isoformat(),
            "finished_at": iso(newest[0].finished_at) if newest[0].finished_at else None,
            "failed_shards": newest[0].failed_shards,
        }
        if newest
        else None
    )
    return {
        **task_view(task),
        "next_fires": [iso(slot) for slot in upcoming_fires(task)],
        "last_instance": last,
    }


def _task(task: TaskRecord, svc: Wiring) -> TaskView:
    return TaskView.model_validate(_console_fields(task, svc))


#: Tasks whose newest instance `GET /tasks` reads at once (one Query each: a deployment with
#: thousands of tasks would otherwise spend their sum in one request, past API Gateway's 29 s).
TASK_READS_IN_FLIGHT = 16


def _tasks(tasks: list[TaskRecord], svc: Wiring) -> list[TaskView]:
    """Every task's view, in order, their newest-instance reads `TASK_READS_IN_FLIGHT` at once."""
    if len(tasks) <= 1:
        return [_task(t, svc) for t in tasks]
    from concurrent.futures import ThreadPoolExecutor  # only this route needs threads

    # The first view alone: it builds TaskView's deferred validator before threads share it
    # (pydantic versions before the rebuild lock race on a concurrent first build).
    first = _task(tasks[0], svc)
    with ThreadPoolExecutor(max_workers=min(TASK_READS_IN_FLIGHT, len(tasks) - 1)) as pool:
        return [first, *pool.map(lambda t: _task(t, svc), tasks[1:])]


def _task_detail(task: TaskRecord, svc: Wiring) -> TaskDetail:
    return TaskDetail.model_validate({**_console_fields(task, svc), "definition": task.definition})


def raise_strict_problems(raw: str, data: Any) -> None:
    """A task body that only lax (task-file) validation accepts is a 400, like any other."""
    problems = strict_task_file_problems(raw, data)
    if problems:
        raise ApiInputError(summary(problems), problems)


def _apply(data: Any, svc: Wiring, *, actor: str, dry_run: bool = False) -> AppliedFile:
    """`iotsched tasks apply`'s use-case on a task file (or one entry as `{"tasks": [...]}`)."""
    return apply_task_file(
        data,
        handlers=svc.handlers,
        store=lambda: svc.tasks,
        now=svc.clock.now,
        stamp=svc.record_clock.now,
        dry_run=dry_run,
        actor=actor,
    )


def register(api: Api) -> None:
    """Add these routes to `api`."""
    app = api.app
    route = api.route
    services_factory = api.services
    json_body = api.json_body
    strict_body = api.strict_body

    @route(
        "GET",
        "/tasks",
        operation_id="listTasks",
        tags=["tasks"],
        summary="List tasks, in id order, a page at a time",
        description="At most `limit` tasks whose id sorts after `after`; the next page is "
        "`after=<the last id of this one>`, until a page is shorter than `limit`.",
        responses=responses(400),
    )
    def list_tasks(
        after: Annotated[str | None, Query(pattern=TASK_ID_PATTERN)] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_TASK_PAGE)] = MAX_TASK_PAGE,
        tenant: TenantFilter = None,
    ) -> list[TaskView]:
        svc = services_factory()
        caller = api.caller()
        if caller.operator and tenant is None:
            return _tasks(svc.tasks.list_tasks(after=after, limit=limit), svc)
        found = filled_page(
            lambda cursor, n: svc.tasks.list_tasks(after=cursor, limit=n),
            lambda t: wanted(caller, t.definition.tenant, tenant),
            lambda t: t.task_id,
            limit,
            start=after,
        )
        return _tasks(found, svc)

    @route(
        "POST",
        "/tasks",
        operation_id="applyTasks",
        tags=["tasks"],
        summary="Apply a task file (create or update every task in it, or none)",
        description="The body is a task file as YAML files hold it, in JSON. It is validated "
        "whole first: any problem is a 400 listing each (`task 'x': field: problem`) and "
        "nothing is written.",
        responses=responses(400, 415),
    )
    def apply_task_file(
        task_file: TaskFileBody,
        dry_run: Annotated[bool, Query(description="Validate only; write nothing.")] = False,
    ) -> AppliedTasks:
        data = json_body()
        raise_strict_problems(app.current_event.decoded_body or "null", data)
        svc = services_factory()
        require_task_file(api.caller(), svc, data)
        return AppliedTasks.model_validate(
            asdict(_apply(data, svc, dry_run=dry_run, actor=api.actor()))
        )

    @route(
        "GET",
        "/tasks/<task_id>",
        operation_id="getTask",
        tags=["tasks"],
        summary="A task with its definition",
        responses=responses(400, 404),
    )
    def get_task(task_id: TaskId) -> TaskDetail:
        svc = services_factory()
        return _task_detail(visible_task(api.caller(), svc.tasks.get_task(task_id), task_id), svc)

    @route(
        "PUT",
        "/tasks/<task_id>",
        operation_id="putTask",
        tags=["tasks"],
        summary="Create or update one task",
        description="The body is one task-file entry; its `id` must be the path's. An unchanged "
        "definition keeps its version and clock.",
        responses=responses(400, 404, 415),
    )
    def put_task(
        task_id: TaskId,
        definition: TaskBody,
    ) -> TaskChange:
        if definition.id != task_id:
            raise ApiInputError(
                f"the body's id {definition.id!r} is not the path's {task_id!r}",
                [Problem(field=f"task {definition.id!r}: id", message=f"must be {task_id!r}")],
            )
        svc = services_factory()
        data = {"tasks": [json_body()]}
        raise_strict_problems(f'{{"tasks": [{app.current_event.decoded_body}]}}', data)
        caller = api.caller()
        require_tenant(caller, task_id, definition.tenant)
        require_task_file(caller, svc, data)
        applied = _apply(data, svc, actor=caller.principal)
        change = "created" if applied.created else "updated" if applied.updated else "unchanged"
        stored = svc.tasks.get_task(task_id)
        if stored is None:  # deleted meanwhile
            raise TaskNotFoundError(task_id)
        return TaskChange(change=change, task=_task_detail(stored, svc))

    @route(
        "POST",
        "/tasks/<task_id>/pause",
        operation_id="pauseTask",
        tags=["tasks"],
        summary="Pause a task (pausing a paused task is harmless)",
        description='An optional body `{"note": "..."}` says why; the task shows it until '
        "it is resumed.",
        responses=responses(400, 404, 415),
    )
    def pause(task_id: TaskId, request: PauseBody = None) -> TaskView:
        request = strict_body(PauseRequest, optional=True) or PauseRequest()
        svc = services_factory()
        require_task(api.caller(), svc, task_id)
        return _task(pause_task(task_id, svc, note=request.note, actor=api.actor()), svc)

    @route(
        "POST",
        "/tasks/<task_id>/resume",
        operation_id="resumeTask",
        tags=["tasks"],
        summary="Resume a task (resuming a running task is harmless)",
        description="Slots missed while paused follow the task's `misfire.on_resume`.",
        responses=responses(400, 404),
    )
    def resume(task_id: TaskId) -> TaskView:
        svc = services_factory()
        require_task(api.caller(), svc, task_id)
        return _task(resume_task(task_id, svc, actor=api.actor()), svc)

    @route(
        "DELETE",
        "/tasks/<task_id>",
        operation_id="deleteTask",
        tags=["tasks"],
        summary="Delete a task (its instances stay as history)",
        description="Refused with 409 while the task has open instances (scheduled, queued, "
        "planning, running, reducing) unless `force`, which cancels them first; always refused "
        "while other tasks name it in `trigger.after`.",
        responses=responses(400, 404, 409),
    )
    def delete(
        task_id: TaskId,
        force: Annotated[
            bool, Query(description="Cancel the task's open instances, then delete it.")
        ] = False,
    ) -> TaskDeleted:
        svc = services_factory()
        require_task(api.caller(), svc, task_id)
        deleted = delete_task(task_id, svc, force=force, actor=api.actor())
        return TaskDeleted(
            task_id=deleted.task_id, version=deleted.version, cancelled=deleted.cancelled
        )
