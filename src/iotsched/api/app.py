"""The management API: the CLI's verbs over HTTP, as a Powertools `APIGatewayRestResolver`.

`create_app(services_factory)` builds the resolver; the Lambda (`functions/api/app.py`) serves
it, and the local runtime can mount the same app (`strip_prefixes`, `iotsched.api.proxy`). Every route is a thin call of a use-case in
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
from dataclasses import asdict
from datetime import timedelta
from http import HTTPStatus
from typing import Annotated, Any, TypeVar, cast

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response, content_types
from aws_lambda_powertools.event_handler.exceptions import NotFoundError
from aws_lambda_powertools.event_handler.openapi.exceptions import (
    RequestUnsupportedContentType,
    RequestValidationError,
    ResponseValidationError,
)
from aws_lambda_powertools.event_handler.openapi.params import Body, Path, Query
from botocore.exceptions import ClientError
from pydantic import BaseModel, ValidationError

from iotsched.api.errors import (
    ApiInputError,
    split_task_problem,
    strict_task_file_problems,
    summary,
    task_file_problems,
    validation_problems,
)
from iotsched.api.models import (
    INSTANCE_ID_PATTERN,
    AppliedTasks,
    BackfillRequest,
    BackfillResult,
    BackfillSlot,
    CancelRequest,
    ErrorBody,
    InstanceView,
    Problem,
    RerunRequest,
    RunOutcome,
    RunRequest,
    RunResult,
    ShardPage,
    SubmitRequest,
    TaskChange,
    TaskDeleted,
    TaskDetail,
    TaskView,
)
from iotsched.core.model import TASK_ID_PATTERN, TaskDefinition, TaskFile
from iotsched.core.records import Alert, InstanceRecord, InstanceStatus, TaskRecord
from iotsched.core.timeutil import iso
from iotsched.core.triggers import TriggerError, parse_rate
from iotsched.services import Services
from iotsched.services.admin import (
    InstanceConflictError,
    InstanceNotFoundError,
    NothingToRerunError,
    TaskInUseError,
    TaskNotFoundError,
    cancel_instance,
    delete_task,
    pause_task,
    rerun_instance,
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
from iotsched.services.queries import instance_view, shard_views, task_view, upcoming_fires
from iotsched.services.tasks import AppliedFile, TaskFileError, apply_task_file

log = logging.getLogger(__name__)

ServicesFactory = Callable[[], Services]
_Body = TypeVar("_Body", bound=BaseModel)
_Exc = TypeVar("_Exc", bound=Exception)

#: Instances one request lists, and shards one page holds (a Lambda answer is at most 6 MB).
MAX_LIST_LIMIT = 500
MAX_SHARD_PAGE = 1000
#: Slots one backfill request claims: each claim is a few writes and a message batch, and API
#: Gateway gives a request 29 s. A longer range is split by the client (re-posting a range is
#: harmless: slots already claimed come back `exists`).
MAX_BACKFILL_CLAIMS = 100
#: Slots a backfill answer lists (a dry run counts them all).
MAX_LISTED_SLOTS = 1000
#: Alerts one request lists.
MAX_ALERTS = 200
#: Tasks one page of GET /tasks holds (each view reads the task's newest instance).
MAX_TASK_PAGE = 100
#: How far ahead a submission may be due.
MAX_SUBMIT_AHEAD = timedelta(days=366)

EXAMPLE_TASK: dict[str, Any] = {
    "id": "device-scan",
    "handler": "noop",
    "trigger": {"rate": "1h"},
    "sharding": {"strategy": "id_range", "shards": 8, "key_space": "device_id", "id_max": 120000},
    "misfire": {"policy": "fire_once", "grace_s": 300},
    "retry": {"max_attempts": 3, "backoff_s": 30},
    "timeout_s": 300,
}
EXAMPLE_INSTANCE = "device-scan@2026-11-29T12:00Z"

TaskId = Annotated[
    str,
    Path(
        pattern=TASK_ID_PATTERN,
        description="Task id, as in the task file.",
        openapi_examples={"device-scan": {"value": EXAMPLE_TASK["id"]}},
    ),
]
InstanceId = Annotated[
    str,
    Path(
        pattern=INSTANCE_ID_PATTERN,
        description="Instance id: `task@2026-11-29T12:00Z`, with `~suffix` for a manual run or a "
        "submission with a request id.",
        openapi_examples={"scheduled": {"value": EXAMPLE_INSTANCE}},
    ),
]

# Bodies, with the examples the document shows (and the fuzz test starts from).
TaskFileBody = Annotated[
    TaskFile, Body(openapi_examples={"one task": {"value": {"tasks": [EXAMPLE_TASK]}}})
]
TaskBody = Annotated[
    TaskDefinition, Body(openapi_examples={"device-scan": {"value": EXAMPLE_TASK}})
]
RunBody = Annotated[
    RunRequest | None,
    Body(
        openapi_examples={
            "for a date": {"value": {"business_date": "2026-11-28", "request_id": "r-1"}}
        }
    ),
]
SubmitBody = Annotated[
    SubmitRequest, Body(openapi_examples={"in two hours": {"value": {"delay": "2h"}}})
]
BackfillBody = Annotated[
    BackfillRequest,
    Body(
        openapi_examples={
            "dry run": {"value": {"from": "2026-11-01", "to": "2026-11-02", "dry_run": True}}
        }
    ),
]
RerunBody = Annotated[
    RerunRequest | None,
    Body(openapi_examples={"failed shards": {"value": {"failed_only": True}}}),
]
CancelBody = Annotated[
    CancelRequest | None,
    Body(openapi_examples={"with a reason": {"value": {"reason": "wrong parameters"}}}),
]

_ERRORS: dict[int, str] = {
    400: "The request is invalid: `problems` names each field at fault.",
    404: "No such task or instance (or no route for the path).",
    409: "The state does not allow the action (e.g. the instance has already ended, the task "
    "has open instances or dependents).",
    415: "The body is not JSON (`Content-Type: application/json`).",
}


def _responses(*codes: int) -> dict[int, Any]:
    """OpenAPI responses of a route: its model on 200, and the error codes it can answer."""
    responses: dict[int, Any] = {200: {"description": "Successful Response"}}
    for code in codes:
        responses[code] = {
            "description": _ERRORS[code],
            "content": {content_types.APPLICATION_JSON: {"model": ErrorBody}},
        }
    return responses


def _error(
    status: HTTPStatus, error: str, message: str, problems: list[Problem] | None = None
) -> Response[Any]:
    body = ErrorBody.model_validate(
        {"error": error, "message": message, "problems": problems or []}
    )
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


def _console_fields(task: TaskRecord, svc: Services) -> dict[str, Any]:
    """What the console shows beside a task: its next fires and its newest instance (one
    consistent Query on the task's partition)."""
    newest = svc.instances.list_instances(task_id=task.task_id, limit=1)
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


def _task(task: TaskRecord, svc: Services) -> TaskView:
    return TaskView.model_validate(_console_fields(task, svc))


#: Tasks whose newest instance `GET /tasks` reads at once (one Query each: a deployment with
#: thousands of tasks would otherwise spend their sum in one request, past API Gateway's 29 s).
TASK_READS_IN_FLIGHT = 16


def _tasks(tasks: list[TaskRecord], svc: Services) -> list[TaskView]:
    """Every task's view, in order, their newest-instance reads `TASK_READS_IN_FLIGHT` at once."""
    if len(tasks) <= 1:
        return [_task(t, svc) for t in tasks]
    from concurrent.futures import ThreadPoolExecutor  # only this route needs threads

    # The first view alone: it builds TaskView's deferred validator before threads share it
    # (pydantic versions before the rebuild lock race on a concurrent first build).
    first = _task(tasks[0], svc)
    with ThreadPoolExecutor(max_workers=min(TASK_READS_IN_FLIGHT, len(tasks) - 1)) as pool:
        return [first, *pool.map(lambda t: _task(t, svc), tasks[1:])]


def _task_detail(task: TaskRecord, svc: Services) -> TaskDetail:
    return TaskDetail.model_validate({**_console_fields(task, svc), "definition": task.definition})


def raise_strict_problems(raw: str, data: Any) -> None:
    """A task body that only lax (task-file) validation accepts is a 400, like any other."""
    problems = strict_task_file_problems(raw, data)
    if problems:
        raise ApiInputError(summary(problems), problems)


def _apply(data: Any, svc: Services, *, dry_run: bool = False) -> AppliedFile:
    """`iotsched tasks apply`'s use-case on a task file (or one entry as `{"tasks": [...]}`)."""
    return apply_task_file(
        data, handlers=svc.handlers, store=lambda: svc.tasks, now=svc.clock.now, dry_run=dry_run
    )


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
    # (method, rule) of every route, for the Allow header of a 405. The rules are the resolver's
    # own, so a path it cannot route (a segment with a control character) is a 404.
    routes: list[tuple[str, re.Pattern[str]]] = []

    def route(method: str, path: str, **kwargs: Any) -> Callable[[Callable[..., Any]], Any]:
        routes.append((method, APIGatewayRestResolver._compile_regex(path)))
        return app.route(path, method=method, **kwargs)

    def json_body() -> Any:
        """The request body as JSON (None when empty); not JSON is a 400."""
        try:
            return app.current_event.json_body
        except ValueError as exc:
            raise RequestValidationError(
                [{"type": "json_invalid", "loc": ("body",), "msg": str(exc), "ctx": {}}]
            ) from None

    def strict_body(model: type[_Body], *, optional: bool = False) -> _Body | None:
        """The body validated as JSON, strictly.

        Powertools validates the body in pydantic's lax mode, on Python values: it would take
        `0` for a date, `"1"` for a number or `[null]` for no body. The API's own bodies are a
        new contract with no files to stay compatible with, so they are read again, as JSON, in
        strict mode. (Task bodies get the same check through `raise_strict_problems`.)
        """
        raw = app.current_event.decoded_body
        if optional and (raw is None or not raw.strip() or json_body() is None):
            return None
        try:
            return model.model_validate_json(raw or "null", strict=True)
        except ValidationError as exc:
            errors = [{**e, "loc": ("body", *e["loc"])} for e in exc.errors()]
            raise RequestValidationError(errors) from None

    def handles(
        exc_class: type[_Exc],
    ) -> Callable[[Callable[[_Exc], Response[Any]]], Callable[[_Exc], Response[Any]]]:
        """`app.exception_handler`, typed."""

        def register(handler: Callable[[_Exc], Response[Any]]) -> Callable[[_Exc], Response[Any]]:
            app.exception_handler(exc_class)(handler)
            return handler

        return register

    # -- errors -------------------------------------------------------------------------------

    def sent_json() -> bool:
        content_type = app.current_event.headers.get("content-type", "").strip()
        return not content_type or content_type.startswith(content_types.APPLICATION_JSON)

    @handles(RequestValidationError)
    def _invalid(exc: RequestValidationError) -> Response[Any]:
        errors = list(exc.errors())
        body = [e for e in errors if tuple(e.get("loc", ()))[:1] == ("body",)]
        if body and not sent_json():
            # Powertools reads form and multipart bodies too; this API takes JSON only.
            return not_json()
        problems = validation_problems(e for e in errors if e not in body)
        current = app.context.get("_route")
        kind = _TASK_BODIES.get((current.method, current.path)) if current else None
        if body and kind and not any(e.get("type") == "json_invalid" for e in body):
            raw = json_body()
            data = {"tasks": [raw]} if kind == "task" else raw
            problems += task_file_problems(data, handlers=services_factory().handlers) or (
                validation_problems(body)
            )
        else:
            problems += validation_problems(body)
        return _bad_request(problems)

    def not_json() -> Response[Any]:
        content_type = app.current_event.headers.get("content-type", "")
        message = f"the body must be JSON (Content-Type: application/json), not {content_type!r}"
        return _error(
            HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            message,
            [Problem(field="header.Content-Type", message=message)],
        )

    @handles(RequestUnsupportedContentType)
    def _not_json(exc: RequestUnsupportedContentType) -> Response[Any]:
        return not_json()

    @handles(UnicodeDecodeError)
    def _not_text(exc: UnicodeDecodeError) -> Response[Any]:
        return _bad_request([Problem(field="body", message="not UTF-8 text")])

    @handles(OverflowError)
    def _out_of_range(exc: OverflowError) -> Response[Any]:
        # A number or an instant past what the scheduler can compute with (a rate of 10^15
        # days, an `at` in year 9999 plus a timeout): the input's fault, though no validator
        # names the field yet.
        log.warning("request value out of range: %s", exc)
        return _bad_request([Problem(field="body", message=f"a value is out of range ({exc})")])

    @handles(ClientError)
    def _aws(exc: ClientError) -> Response[Any]:
        error = exc.response.get("Error", {})
        message = str(error.get("Message", ""))
        if error.get("Code") == "ValidationException" and "size" in message.lower():
            # DynamoDB stores a task or an instance as one item of at most 400 KB: params (or
            # static shard lists) that large are the request's, and nothing was written.
            return _bad_request([Problem(field="body", message=f"too large to store ({message})")])
        log.exception("AWS request failed")
        return _error(HTTPStatus.INTERNAL_SERVER_ERROR, "internal", "internal error")

    @handles(TaskFileError)
    def _task_file(exc: TaskFileError) -> Response[Any]:
        return _bad_request([split_task_problem(p) for p in exc.problems])

    @handles(ApiInputError)
    def _api_input(exc: ApiInputError) -> Response[Any]:
        return _bad_request(exc.problems, exc.message)

    @handles(ManualRunError)
    def _manual(exc: ManualRunError) -> Response[Any]:
        return _bad_request([Problem(field="body", message=str(exc))], str(exc))

    @handles(NothingToRerunError)
    def _nothing_to_rerun(exc: NothingToRerunError) -> Response[Any]:
        return _bad_request([Problem(field="body", message=str(exc))], str(exc))

    @handles(TaskNotFoundError)
    def _no_task(exc: TaskNotFoundError) -> Response[Any]:
        return _error(HTTPStatus.NOT_FOUND, "not_found", f"no task {exc.args[0]!r}")

    @handles(InstanceNotFoundError)
    def _no_instance(exc: InstanceNotFoundError) -> Response[Any]:
        return _error(HTTPStatus.NOT_FOUND, "not_found", f"no instance {exc.args[0]!r}")

    @handles(TaskInUseError)
    def _task_in_use(exc: TaskInUseError) -> Response[Any]:
        return _error(HTTPStatus.CONFLICT, "conflict", str(exc))

    @handles(InstanceConflictError)
    def _conflict(exc: InstanceConflictError) -> Response[Any]:
        return _error(HTTPStatus.CONFLICT, "conflict", str(exc))

    @app.not_found
    def _no_route(exc: NotFoundError) -> Response[Any]:
        path = str(app.context.get("_path") or app.current_event.path)
        allowed = sorted({m for m, rule in routes if rule.match(path)})
        if allowed:
            response = _error(
                HTTPStatus.METHOD_NOT_ALLOWED,
                "method_not_allowed",
                f"{app.current_event.http_method} is not allowed on {path}",
            )
            response.headers["Allow"] = ", ".join(allowed)
            return response
        return _error(HTTPStatus.NOT_FOUND, "not_found", f"no route {path}")

    @handles(ResponseValidationError)
    def _bad_response(exc: ResponseValidationError) -> Response[Any]:
        log.error("response does not match its model: %s", exc.errors())
        return _error(HTTPStatus.INTERNAL_SERVER_ERROR, "internal", "internal error")

    @handles(Exception)
    def _unexpected(exc: Exception) -> Response[Any]:
        if not sent_json():
            # Powertools parses form and multipart bodies itself, and raises a bare ValueError
            # on a malformed one (a multipart body without a boundary): the client's fault.
            return not_json()
        # AWS errors past botocore's retries, or a bug: logged with the request's correlation id.
        log.exception("request failed")
        return _error(HTTPStatus.INTERNAL_SERVER_ERROR, "internal", "internal error")

    # -- tasks --------------------------------------------------------------------------------

    @route(
        "GET",
        "/tasks",
        operation_id="listTasks",
        tags=["tasks"],
        summary="List tasks, in id order, a page at a time",
        description="At most `limit` tasks whose id sorts after `after`; the next page is "
        "`after=<the last id of this one>`, until a page is shorter than `limit`.",
        responses=_responses(400),
    )
    def list_tasks(
        after: Annotated[str | None, Query(pattern=TASK_ID_PATTERN)] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_TASK_PAGE)] = MAX_TASK_PAGE,
    ) -> list[TaskView]:
        svc = services_factory()
        return _tasks(svc.tasks.list_tasks(after=after, limit=limit), svc)

    @route(
        "POST",
        "/tasks",
        operation_id="applyTasks",
        tags=["tasks"],
        summary="Apply a task file (create or update every task in it, or none)",
        description="The body is a task file as YAML files hold it, in JSON. It is validated "
        "whole first: any problem is a 400 listing each (`task 'x': field: problem`) and "
        "nothing is written.",
        responses=_responses(400, 415),
    )
    def apply_task_file(
        task_file: TaskFileBody,
        dry_run: Annotated[bool, Query(description="Validate only; write nothing.")] = False,
    ) -> AppliedTasks:
        data = json_body()
        raise_strict_problems(app.current_event.decoded_body or "null", data)
        return AppliedTasks.model_validate(
            asdict(_apply(data, services_factory(), dry_run=dry_run))
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
        svc = services_factory()
        task = svc.tasks.get_task(task_id)
        if task is None:
            raise TaskNotFoundError(task_id)
        return _task_detail(task, svc)

    @route(
        "PUT",
        "/tasks/<task_id>",
        operation_id="putTask",
        tags=["tasks"],
        summary="Create or update one task",
        description="The body is one task-file entry; its `id` must be the path's. An unchanged "
        "definition keeps its version and clock.",
        responses=_responses(400, 404, 415),
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
        applied = _apply(data, svc)
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
        responses=_responses(400, 404),
    )
    def pause(task_id: TaskId) -> TaskView:
        svc = services_factory()
        return _task(pause_task(task_id, svc), svc)

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
        svc = services_factory()
        return _task(resume_task(task_id, svc), svc)

    @route(
        "DELETE",
        "/tasks/<task_id>",
        operation_id="deleteTask",
        tags=["tasks"],
        summary="Delete a task (its instances stay as history)",
        description="Refused with 409 while the task has open instances (scheduled, queued, "
        "planning, running, reducing) unless `force`, which cancels them first; always refused "
        "while other tasks name it in `trigger.after`.",
        responses=_responses(400, 404, 409),
    )
    def delete(
        task_id: TaskId,
        force: Annotated[
            bool, Query(description="Cancel the task's open instances, then delete it.")
        ] = False,
    ) -> TaskDeleted:
        deleted = delete_task(task_id, services_factory(), force=force)
        return TaskDeleted(
            task_id=deleted.task_id, version=deleted.version, cancelled=deleted.cancelled
        )

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
        responses=_responses(400, 404, 415),
    )
    def run(
        task_id: TaskId,
        request: RunBody = None,
    ) -> RunResult:
        request = strict_body(RunRequest, optional=True) or RunRequest()
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
        summary="Submit a one-time instance that the tick fires when due (status scheduled, "
        "trigger kind submitted)",
        description="Give `at` (an instant, at most 366 days ahead) or `delay` (`30m`, `2h`, "
        "`1d`).",
        responses=_responses(400, 404, 415),
    )
    def submit_run(
        task_id: TaskId,
        request: SubmitBody,
    ) -> InstanceView:
        request = strict_body(SubmitRequest) or request
        svc = services_factory()
        now = svc.clock.now()
        if request.delay is not None:
            try:
                delay = parse_rate(request.delay)
            except (TriggerError, OverflowError) as exc:
                raise ApiInputError(
                    str(exc), [Problem(field="body.delay", message=str(exc))]
                ) from None
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
        summary="Claim one instance per slot whose business date lies in [from, to] "
        "(trigger kind backfill)",
        description="Every slot whose business date (per the task's `business_date` rule) "
        "lies in the range, both ends included, is claimed oldest first through the task's "
        "blocking policy; a slot that already has an instance is not doubled (`exists`). "
        "`dry_run` lists each slot with its business date and data interval, the shard count "
        f"and the estimated requests. One request claims at most "
        f"{MAX_BACKFILL_CLAIMS} slots (split longer ranges; the CLI paces with "
        "--max-concurrent).",
        responses=_responses(400, 404, 415),
    )
    def backfill(
        task_id: TaskId,
        request: BackfillBody,
    ) -> BackfillResult:
        request = strict_body(BackfillRequest) or request
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
                results[f"{task_id}@{slot:%Y-%m-%dT%H:%MZ}"] = cast("RunOutcome", what)
        return BackfillResult(
            task_id=task_id,
            dry_run=request.dry_run,
            slot_count=len(plan.slots),
            slots=[
                BackfillSlot(
                    slot=iso(d.slot),
                    business_date=d.business_date.isoformat(),
                    data_interval_start=iso(d.data_interval_start),
                    data_interval_end=iso(d.data_interval_end),
                )
                for d in plan.slots[:MAX_LISTED_SLOTS]
            ],
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
        summary="Instances, newest slot first, of one task and/or in one status, a page at a time",
        responses=_responses(400),
    )
    def list_instances(
        task_id: Annotated[str | None, Query(pattern=TASK_ID_PATTERN)] = None,
        status: Annotated[InstanceStatus | None, Query()] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_LIST_LIMIT)] = 50,
        before: Annotated[
            str | None,
            Query(
                pattern=INSTANCE_ID_PATTERN,
                description="The last instance id of the previous page: the next page "
                "starts after it.",
            ),
        ] = None,
    ) -> list[InstanceView]:
        found = services_factory().instances.list_instances(
            task_id=task_id, status=status, limit=limit, before=before
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
        responses=_responses(400, 404, 409, 415),
    )
    def cancel(instance_id: InstanceId, request: CancelBody = None) -> InstanceView:
        request = strict_body(CancelRequest, optional=True) or CancelRequest()
        return _instance(cancel_instance(instance_id, services_factory(), reason=request.reason))

    @route(
        "POST",
        "/instances/<instance_id>/rerun",
        operation_id="rerunInstance",
        tags=["instances"],
        summary="Run an ended instance again: all of it, one shard, or its failed shards",
        description="The new run (`<first run>~run<n>`, trigger kind `rerun`) reuses the stored "
        "plan, bounds, params and business date; earlier runs stay in the history. A rerun "
        "while the latest run is still open is a 409.",
        responses=_responses(400, 404, 409, 415),
    )
    def rerun(instance_id: InstanceId, request: RerunBody = None) -> InstanceView:
        request = strict_body(RerunRequest, optional=True) or RerunRequest()
        started = rerun_instance(
            instance_id,
            services_factory(),
            shard=request.shard,
            failed_only=request.failed_only,
        )
        return _instance(started)

    # -- alerts ---------------------------------------------------------------------------------

    @route(
        "GET",
        "/alerts",
        operation_id="listAlerts",
        tags=["alerts"],
        summary="Recent alerts, newest first (published to the alert topic, or recorded and still pending publication)",
        description="Each alert is the JSON the alert topic carried (docs/alert.schema.json), "
        "with the instant it was raised.",
        responses=_responses(400),
    )
    def list_alerts(
        limit: Annotated[int, Query(ge=1, le=MAX_ALERTS)] = 20,
    ) -> list[Alert]:
        return services_factory().alert_log.recent(limit=limit)

    return app
