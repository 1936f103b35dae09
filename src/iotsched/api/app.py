"""The management API: the CLI's verbs over HTTP, as a Powertools `APIGatewayRestResolver`.

`create_app(services_factory)` builds the resolver; the Lambda (`functions/api/app.py`) and the
local runtime mount the same app. Every route is a thin call of a use-case in
`iotsched.services`; the answers are the views `iotsched ... --json` prints.

Errors: a request the schema or a use-case rejects is a 400 naming each field at fault (task
bodies with the task file's own messages), an unknown task or instance a 404, an action the
instance's state does not allow (cancel a finished instance) a 409. Only a fault of the server
or of AWS is a 5xx.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from datetime import timedelta
from http import HTTPStatus
from typing import Annotated, Any

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response, content_types
from aws_lambda_powertools.event_handler.exceptions import NotFoundError
from aws_lambda_powertools.event_handler.openapi.exceptions import (
    RequestValidationError,
    ResponseValidationError,
)
from aws_lambda_powertools.event_handler.openapi.params import Body, Path, Query

from iotsched.api.errors import (
    ApiInputError,
    split_task_problem,
    summary,
    task_file_problems,
    validation_problems,
)
from iotsched.api.models import (
    INSTANCE_ID_PATTERN,
    AppliedTasks,
    BackfillRequest,
    BackfillResult,
    CancelRequest,
    ErrorBody,
    InstanceView,
    Problem,
    RunOutcome,
    RunRequest,
    RunResult,
    ShardPage,
    SubmitRequest,
    TaskChange,
    TaskDetail,
    TaskView,
)
from iotsched.core.model import TASK_ID_PATTERN, TaskDefinition, TaskFile
from iotsched.core.records import InstanceRecord, InstanceStatus, TaskRecord
from iotsched.core.timeutil import iso
from iotsched.core.triggers import TriggerError, parse_rate
from iotsched.services import Services
from iotsched.services.admin import (
    InstanceConflictError,
    InstanceNotFoundError,
    TaskNotFoundError,
    cancel_instance,
    pause_task,
    resume_task,
)
from iotsched.services.dispatch import TickReport
from iotsched.services.manual import (
    ManualRunError,
    backfill_slots,
    plan_backfill,
    run_now,
    submit,
)
from iotsched.services.queries import instance_view, shard_views, task_view
from iotsched.services.tasks import TaskFileError, apply_tasks, parse_task_file

log = logging.getLogger(__name__)

ServicesFactory = Callable[[], Services]

#: Instances one request lists, and shards one page holds (a Lambda answer is at most 6 MB).
MAX_LIST_LIMIT = 500
MAX_SHARD_PAGE = 1000
#: Slots one backfill request claims: each claim is a few writes and a message batch, and API
#: Gateway gives a request 29 s. A longer range is split by the client (re-posting a range is
#: harmless: slots already claimed come back `exists`).
MAX_BACKFILL_CLAIMS = 100
#: Slots a backfill answer lists (a dry run counts them all).
MAX_LISTED_SLOTS = 1000
#: How far ahead a submission may be due.
MAX_SUBMIT_AHEAD = timedelta(days=366)

TaskId = Annotated[
    str, Path(pattern=TASK_ID_PATTERN, description="Task id, as in the task file.")
]
InstanceId = Annotated[
    str,
    Path(pattern=INSTANCE_ID_PATTERN, description="Instance id: `task@2026-11-29T12:00Z[~suffix]`."),
]

_ERRORS: dict[int, str] = {
    400: "The request is invalid: `problems` names each field at fault.",
    404: "No such task or instance.",
    409: "The instance's state does not allow the action (e.g. it has already ended).",
}


def _responses(*codes: int) -> dict[int, Any]:
    """OpenAPI responses for the error codes a route can answer."""
    return {
        code: {
            "description": _ERRORS[code],
            "content": {content_types.APPLICATION_JSON: {"model": ErrorBody}},
        }
        for code in codes
    }


def _error(status: HTTPStatus, error: str, message: str, problems: list[Problem] | None = None) -> Response[Any]:
    body = ErrorBody.model_validate({"error": error, "message": message, "problems": problems or []})
    return Response(
        status_code=status.value,
        content_type=content_types.APPLICATION_JSON,
        body=body.model_dump(mode="json"),
    )


def _bad_request(problems: list[Problem], message: str | None = None) -> Response[Any]:
    return _error(HTTPStatus.BAD_REQUEST, "bad_request", message or summary(problems), problems)


def _instance(inst: InstanceRecord) -> InstanceView:
    view = instance_view(inst)
    view.setdefault("fire_at", iso(inst.fire_at) if inst.fire_at else None)
    return InstanceView.model_validate(view)


def _task_detail(task: TaskRecord) -> TaskDetail:
    return TaskDetail.model_validate({**task_view(task), "definition": task.definition})


def _outcome(report: TickReport) -> RunOutcome:
    """What one claim came to (as `iotsched backfill` reports each slot)."""
    if report.claimed:
        return "claimed"
    if report.queued:
        return "queued"
    if report.skipped:
        return "skipped"
    if report.failed:
        return "failed"
    return "exists"


# (method, path) of the routes whose body is a task definition or a task file: their body
# problems are reported with the task file's messages.
_TASK_BODIES = {("PUT", "/tasks/<task_id>"): "task", ("POST", "/tasks"): "file"}


def create_app(
    services_factory: ServicesFactory, *, strip_prefixes: list[str] | None = None
) -> APIGatewayRestResolver:
    """The management API over the services `services_factory` returns (called per request;
    cache it). `strip_prefixes` (e.g. `["/api"]`) serves the app under a path prefix."""
    app = APIGatewayRestResolver(
        enable_validation=True,
        # A response that does not match its own model is our bug: a 500, never a 400.
        response_validation_error_http_code=HTTPStatus.INTERNAL_SERVER_ERROR,
        strip_prefixes=list(strip_prefixes or []),
    )
    routes: list[tuple[str, re.Pattern[str]]] = []

    def route(method: str, path: str, **kwargs: Any) -> Callable[[Callable[..., Any]], Any]:
        routes.append((method, re.compile(re.sub(r"<\w+>", "[^/]+", path))))
        return app.route(path, method=method, **kwargs)

    # -- errors -------------------------------------------------------------------------------

    @app.exception_handler(RequestValidationError)
    def _invalid(exc: RequestValidationError) -> Response[Any]:
        errors = list(exc.errors())
        body = [e for e in errors if tuple(e.get("loc", ()))[:1] == ("body",)]
        problems = validation_problems(e for e in errors if e not in body)
        current = app.context.get("_route")
        kind = _TASK_BODIES.get((current.method, current.path)) if current else None
        if body and kind and not any(e.get("type") == "json_invalid" for e in body):
            raw = app.current_event.json_body
            data = {"tasks": [raw]} if kind == "task" else raw
            problems += task_file_problems(data, handlers=services_factory().handlers) or (
                validation_problems(body)
            )
        else:
            problems += validation_problems(body)
        return _bad_request(problems)

    @app.exception_handler(TaskFileError)
    def _task_file(exc: TaskFileError) -> Response[Any]:
        return _bad_request([split_task_problem(p) for p in exc.problems])

    @app.exception_handler(ApiInputError)
    def _api_input(exc: ApiInputError) -> Response[Any]:
        return _bad_request(exc.problems, exc.message)

    @app.exception_handler(ManualRunError)
    def _manual(exc: ManualRunError) -> Response[Any]:
        return _bad_request([Problem(field="body", message=str(exc))], str(exc))

    @app.exception_handler(TaskNotFoundError)
    def _no_task(exc: TaskNotFoundError) -> Response[Any]:
        return _error(HTTPStatus.NOT_FOUND, "not_found", f"no task {exc.args[0]!r}")

    @app.exception_handler(InstanceNotFoundError)
    def _no_instance(exc: InstanceNotFoundError) -> Response[Any]:
        return _error(HTTPStatus.NOT_FOUND, "not_found", f"no instance {exc.args[0]!r}")

    @app.exception_handler(InstanceConflictError)
    def _conflict(exc: InstanceConflictError) -> Response[Any]:
        return _error(HTTPStatus.CONFLICT, "conflict", str(exc))

    @app.not_found
    def _no_route(exc: NotFoundError) -> Response[Any]:
        path = str(app.context.get("_path") or app.current_event.path)
        allowed = sorted({m for m, rule in routes if rule.fullmatch(path)})
        if allowed:
            response = _error(
                HTTPStatus.METHOD_NOT_ALLOWED,
                "method_not_allowed",
                f"{app.current_event.http_method} is not allowed on {path}",
            )
            response.headers["Allow"] = ", ".join(allowed)
            return response
        return _error(HTTPStatus.NOT_FOUND, "not_found", f"no route {path}")

    @app.exception_handler(ResponseValidationError)
    def _bad_response(exc: ResponseValidationError) -> Response[Any]:
        log.error("response does not match its model: %s", exc.errors())
        return _error(HTTPStatus.INTERNAL_SERVER_ERROR, "internal", "internal error")

    # -- tasks --------------------------------------------------------------------------------

    @route("GET", "/tasks", operation_id="listTasks", tags=["tasks"], summary="List tasks")
    def list_tasks() -> list[TaskView]:
        return [TaskView.model_validate(task_view(t)) for t in services_factory().tasks.list_tasks()]

    @route(
        "POST",
        "/tasks",
        operation_id="applyTasks",
        tags=["tasks"],
        summary="Apply a task file (create or update every task in it, or none)",
        description="The body is a task file as YAML files hold it, in JSON. It is validated "
        "whole first: any problem is a 400 listing each (`task 'x': field: problem`) and "
        "nothing is written.",
        responses=_responses(400),
    )
    def apply_task_file(
        task_file: Annotated[TaskFile, Body()],
        dry_run: Annotated[bool, Query(description="Validate only; write nothing.")] = False,
    ) -> AppliedTasks:
        svc = services_factory()
        definitions = parse_task_file(app.current_event.json_body, handlers=svc.handlers)
        ids = [d.id for d in definitions]
        if dry_run:
            return AppliedTasks(dry_run=True, valid=ids, created=[], updated=[], unchanged=[])
        applied = apply_tasks(definitions, svc.tasks, now=svc.clock.now())
        return AppliedTasks(
            dry_run=False,
            valid=ids,
            created=applied.created,
            updated=applied.updated,
            unchanged=applied.unchanged,
        )

    @route(
        "GET",
        "/tasks/<task_id>",
        operation_id="getTask",
        tags=["tasks"],
        summary="A task with its definition",
        responses=_responses(400, 404),
    )
    def get_task(task_id: TaskId) -> TaskDetail:
        task = services_factory().tasks.get_task(task_id)
        if task is None:
            raise TaskNotFoundError(task_id)
        return _task_detail(task)

    @route(
        "PUT",
        "/tasks/<task_id>",
        operation_id="putTask",
        tags=["tasks"],
        summary="Create or update one task",
        description="The body is one task-file entry; its `id` must be the path's. An unchanged "
        "definition keeps its version and clock.",
        responses=_responses(400),
    )
    def put_task(task_id: TaskId, definition: Annotated[TaskDefinition, Body()]) -> TaskChange:
        if definition.id != task_id:
            raise ApiInputError(
                f"the body's id {definition.id!r} is not the path's {task_id!r}",
                [Problem(field=f"task {definition.id!r}: id", message=f"must be {task_id!r}")],
            )
        svc = services_factory()
        (parsed,) = parse_task_file({"tasks": [app.current_event.json_body]}, handlers=svc.handlers)
        applied = apply_tasks([parsed], svc.tasks, now=svc.clock.now())
        change = "created" if applied.created else "updated" if applied.updated else "unchanged"
        stored = svc.tasks.get_task(task_id)
        if stored is None:  # deleted meanwhile
            raise TaskNotFoundError(task_id)
        return TaskChange(change=change, task=_task_detail(stored))

    @route(
        "POST",
        "/tasks/<task_id>/pause",
        operation_id="pauseTask",
        tags=["tasks"],
        summary="Pause a task (pausing a paused task is harmless)",
        responses=_responses(400, 404),
    )
    def pause(task_id: TaskId) -> TaskView:
        return TaskView.model_validate(task_view(pause_task(task_id, services_factory())))

    @route(
        "POST",
        "/tasks/<task_id>/resume",
        operation_id="resumeTask",
        tags=["tasks"],
        summary="Resume a task (resuming a running task is harmless)",
        description="Slots missed while paused follow the task's `misfire.on_resume`.",
        responses=_responses(400, 404),
    )
    def resume(task_id: TaskId) -> TaskView:
        return TaskView.model_validate(task_view(resume_task(task_id, services_factory())))

    # -- runs ---------------------------------------------------------------------------------

    @route(
        "POST",
        "/tasks/<task_id>/runs",
        operation_id="runTask",
        tags=["runs"],
        summary="Run a task now (trigger kind manual), through its blocking policy",
        description="Without a request id the run takes the current minute's slot, so it never "
        "doubles a scheduled firing of that minute (`exists`); with one it is its own "
        "instance, and the same request id always returns the same instance.",
        responses=_responses(400, 404),
    )
    def run(task_id: TaskId, request: Annotated[RunRequest | None, Body()] = None) -> RunResult:
        request = request or RunRequest()
        instance, report = run_now(
            task_id,
            services_factory(),
            business_date=request.business_date,
            params=request.params,
            request_id=request.request_id,
        )
        return RunResult(outcome=_outcome(report), instance=_instance(instance))

    @route(
        "POST",
        "/tasks/<task_id>/submissions",
        operation_id="submitRun",
        tags=["runs"],
        summary="Submit a one-time instance that the tick fires when due (status scheduled)",
        description="Give `at` (an instant, at most 366 days ahead) or `delay` (`30m`, `2h`, "
        "`1d`).",
        responses=_responses(400, 404),
    )
    def submit_run(task_id: TaskId, request: Annotated[SubmitRequest, Body()]) -> InstanceView:
        svc = services_factory()
        now = svc.clock.now()
        if request.delay is not None:
            try:
                delay = parse_rate(request.delay)
            except TriggerError as exc:
                raise ApiInputError(str(exc), [Problem(field="body.delay", message=str(exc))]) from None
            field = "body.delay"
            at = now + min(delay, MAX_SUBMIT_AHEAD + timedelta(days=1))
        else:
            assert request.at is not None
            field, at = "body.at", request.at
        if at > now + MAX_SUBMIT_AHEAD:
            message = "a submission is due at most 366 days ahead"
            raise ApiInputError(message, [Problem(field=field, message=message)])
        instance = submit(
            task_id,
            svc,
            at=at,
            business_date=request.business_date,
            params=request.params,
            request_id=request.request_id,
        )
        return _instance(instance)

    @route(
        "POST",
        "/tasks/<task_id>/backfills",
        operation_id="backfillTask",
        tags=["runs"],
        summary="Claim one instance per slot between two dates (trigger kind backfill)",
        description="Slots are claimed oldest first through the task's blocking policy; a slot "
        "that already has an instance is not doubled (`exists`). `dry_run` lists the slots, "
        f"the shard count and the estimated requests. One request claims at most "
        f"{MAX_BACKFILL_CLAIMS} slots (split longer ranges; the CLI paces with "
        "--max-concurrent).",
        responses=_responses(400, 404),
    )
    def backfill(task_id: TaskId, request: Annotated[BackfillRequest, Body()]) -> BackfillResult:
        svc = services_factory()
        plan = plan_backfill(task_id, svc, start=request.start, end=request.end)
        if not request.dry_run and len(plan.slots) > MAX_BACKFILL_CLAIMS:
            message = (
                f"the range holds {len(plan.slots)} slots; one request claims at most "
                f"{MAX_BACKFILL_CLAIMS}: split the range"
            )
            raise ApiInputError(message, [Problem(field="body.to", message=message)])
        results: dict[str, RunOutcome] = {}
        if not request.dry_run:
            for slot, what in backfill_slots(plan, svc):
                results[f"{task_id}@{slot:%Y-%m-%dT%H:%MZ}"] = what  # type: ignore[assignment]
        return BackfillResult(
            task_id=task_id,
            dry_run=request.dry_run,
            slot_count=len(plan.slots),
            slots=[iso(s) for s in plan.slots[:MAX_LISTED_SLOTS]],
            shards_per_instance=plan.shards_per_instance,
            estimated_requests=plan.estimated_requests,
            results=results,
        )

    # -- instances and shards ------------------------------------------------------------------

    @route(
        "GET",
        "/instances",
        operation_id="listInstances",
        tags=["instances"],
        summary="Instances, newest slot first, of one task and/or in one status",
        responses=_responses(400),
    )
    def list_instances(
        task_id: Annotated[str | None, Query(pattern=TASK_ID_PATTERN)] = None,
        status: Annotated[InstanceStatus | None, Query()] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_LIST_LIMIT)] = 50,
    ) -> list[InstanceView]:
        found = services_factory().instances.list_instances(
            task_id=task_id, status=status, limit=limit
        )
        return [_instance(i) for i in found]

    @route(
        "GET",
        "/instances/<instance_id>",
        operation_id="getInstance",
        tags=["instances"],
        summary="One instance",
        responses=_responses(400, 404),
    )
    def get_instance(instance_id: InstanceId) -> InstanceView:
        inst = services_factory().instances.get_instance(instance_id)
        if inst is None:
            raise InstanceNotFoundError(instance_id)
        return _instance(inst)

    @route(
        "GET",
        "/instances/<instance_id>/shards",
        operation_id="listShards",
        tags=["instances"],
        summary="An instance's shards: bounds, status, attempts (worker, times, outcome), keys",
        responses=_responses(400, 404),
    )
    def list_shards(
        instance_id: InstanceId,
        start: Annotated[int, Query(ge=0, description="First shard index of the page.")] = 0,
        limit: Annotated[int, Query(ge=1, le=MAX_SHARD_PAGE)] = MAX_SHARD_PAGE,
    ) -> ShardPage:
        svc = services_factory()
        inst = svc.instances.get_instance(instance_id)
        if inst is None:
            raise InstanceNotFoundError(instance_id)
        views = shard_views(inst, svc.instances.list_shards(instance_id))
        page = views[start : start + limit]
        following = start + len(page)
        return ShardPage.model_validate(
            {
                "instance": _instance(inst),
                "total": len(views),
                "start": start,
                "next_start": following if following < len(views) else None,
                "shards": page,
            }
        )

    @route(
        "POST",
        "/instances/<instance_id>/cancel",
        operation_id="cancelInstance",
        tags=["instances"],
        summary="Cancel an open instance",
        description="Shards not started never run; running handlers see `ctx.cancelled()`. "
        "Cancelling an instance that has ended is a 409.",
        responses=_responses(400, 404, 409),
    )
    def cancel(
        instance_id: InstanceId, request: Annotated[CancelRequest | None, Body()] = None
    ) -> InstanceView:
        request = request or CancelRequest()
        return _instance(cancel_instance(instance_id, services_factory(), reason=request.reason))

    return app
