"""How the API answers a failure: the status, the error code and the problems at fault."""

from __future__ import annotations

import logging
from http import HTTPStatus
from typing import Any

from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.event_handler.exceptions import NotFoundError
from aws_lambda_powertools.event_handler.openapi.exceptions import (
    RequestUnsupportedContentType,
    RequestValidationError,
    ResponseValidationError,
)
from botocore.exceptions import ClientError

from iotsched.api.errors import (
    ApiInputError,
    split_task_problem,
    task_file_problems,
    validation_problems,
)
from iotsched.api.identity import ForbiddenError
from iotsched.api.models import (
    Problem,
)
from iotsched.api.routing import Api, bad_request, error
from iotsched.core.input_limits import InputError
from iotsched.ports.audit import (
    TaskConflictError,
    TaskQuotaError,
)
from iotsched.ports.store_errors import UnreadableRecordError
from iotsched.registry import HandlerNotFoundError
from iotsched.services.definitions.control import (
    TaskInUseError,
    TaskNotFoundError,
)
from iotsched.services.definitions.history import VersionNotFoundError
from iotsched.services.definitions.task_file import TaskFileError
from iotsched.services.operations.actions import (
    InstanceConflictError,
    InstanceNotFoundError,
    NothingToRerunError,
)
from iotsched.services.operations.logs import AttemptNotFoundError
from iotsched.services.operations.on_demand import ManualRunError

log = logging.getLogger(__name__)

# (method, path) of the routes whose body is a task definition or a task file: their body
# problems are reported with the task file's messages.
_TASK_BODIES = {("PUT", "/tasks/<task_id>"): "task", ("POST", "/tasks"): "file"}


def register_failures(api: Api) -> None:
    """Register the answer to every failure a route may raise, and to an unknown route."""
    app = api.app
    services_factory = api.services
    routes = api.routes
    json_body = api.json_body
    handles = api.handles

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
        return bad_request(problems)

    def not_json() -> Response[Any]:
        content_type = app.current_event.headers.get("content-type", "")
        message = f"the body must be JSON (Content-Type: application/json), not {content_type!r}"
        return error(
            HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            message,
            [Problem(field="header.Content-Type", message=message)],
        )

    @handles(RequestUnsupportedContentType)
    def _not_json(exc: RequestUnsupportedContentType) -> Response[Any]:
        return not_json()

    @handles(InputError)
    def _past_a_limit(exc: InputError) -> Response[Any]:
        return bad_request([Problem(field="body", message=str(exc))])

    @handles(UnicodeDecodeError)
    def _not_text(exc: UnicodeDecodeError) -> Response[Any]:
        return bad_request([Problem(field="body", message="not UTF-8 text")])

    @handles(OverflowError)
    def _out_of_range(exc: OverflowError) -> Response[Any]:
        # A number or an instant past what the scheduler can compute with that no bound of
        # the models caught (they bound the known ones: docs/limits.md): the input's fault.
        log.warning("request value out of range: %s", exc)
        return bad_request([Problem(field="body", message=f"a value is out of range ({exc})")])

    @handles(ClientError)
    def _aws(exc: ClientError) -> Response[Any]:
        detail = exc.response.get("Error", {})
        message = str(detail.get("Message", ""))
        if detail.get("Code") == "ValidationException" and "size" in message.lower():
            # DynamoDB stores a task or an instance as one item of at most 400 KB: params (or
            # static shard lists) that large are the request's, and nothing was written.
            return bad_request([Problem(field="body", message=f"too large to store ({message})")])
        log.exception("AWS request failed")
        return error(HTTPStatus.INTERNAL_SERVER_ERROR, "internal", "internal error")

    @handles(TaskFileError)
    def _task_file(exc: TaskFileError) -> Response[Any]:
        return bad_request([split_task_problem(p) for p in exc.problems])

    @handles(ApiInputError)
    def _api_input(exc: ApiInputError) -> Response[Any]:
        return bad_request(exc.problems, exc.message)

    @handles(ManualRunError)
    def _manual(exc: ManualRunError) -> Response[Any]:
        return bad_request([Problem(field="body", message=str(exc))], str(exc))

    @handles(NothingToRerunError)
    def _nothing_to_rerun(exc: NothingToRerunError) -> Response[Any]:
        return bad_request([Problem(field="body", message=str(exc))], str(exc))

    @handles(ForbiddenError)
    def _forbidden(exc: ForbiddenError) -> Response[Any]:
        return error(HTTPStatus.FORBIDDEN, "forbidden", str(exc))

    @handles(TaskNotFoundError)
    def _no_task(exc: TaskNotFoundError) -> Response[Any]:
        return error(HTTPStatus.NOT_FOUND, "not_found", f"no task {exc.args[0]!r}")

    @handles(InstanceNotFoundError)
    def _no_instance(exc: InstanceNotFoundError) -> Response[Any]:
        return error(HTTPStatus.NOT_FOUND, "not_found", f"no instance {exc.args[0]!r}")

    @handles(AttemptNotFoundError)
    def _no_attempt(exc: AttemptNotFoundError) -> Response[Any]:
        return error(HTTPStatus.NOT_FOUND, "not_found", str(exc))

    @handles(VersionNotFoundError)
    def _no_version(exc: VersionNotFoundError) -> Response[Any]:
        return error(HTTPStatus.NOT_FOUND, "not_found", str(exc))

    @handles(HandlerNotFoundError)
    def _no_handler(exc: HandlerNotFoundError) -> Response[Any]:
        return error(HTTPStatus.NOT_FOUND, "not_found", f"no handler {exc.args[0]!r}")

    @handles(TaskConflictError)
    def _changed_meanwhile(exc: TaskConflictError) -> Response[Any]:
        return error(HTTPStatus.CONFLICT, "conflict", str(exc))

    @handles(TaskQuotaError)
    def _over_quota(exc: TaskQuotaError) -> Response[Any]:
        return error(HTTPStatus.CONFLICT, "conflict", str(exc))

    @handles(TaskInUseError)
    def _task_in_use(exc: TaskInUseError) -> Response[Any]:
        return error(HTTPStatus.CONFLICT, "conflict", str(exc))

    @handles(InstanceConflictError)
    def _conflict(exc: InstanceConflictError) -> Response[Any]:
        return error(HTTPStatus.CONFLICT, "conflict", str(exc))

    @handles(UnreadableRecordError)
    def _unreadable(exc: UnreadableRecordError) -> Response[Any]:
        # A record written by another version, or by hand: named, with the way out, never a
        # bare "internal error"; lists and the tick skip it and serve the rest.
        log.error("stored record cannot be read: %s", exc)
        return error(
            HTTPStatus.INTERNAL_SERVER_ERROR,
            "internal",
            f"{exc}: apply the task again, or delete it with force (`?force=true`)",
        )

    @app.not_found
    def _no_route(exc: NotFoundError) -> Response[Any]:
        path = str(app.context.get("_path") or app.current_event.path)
        allowed = sorted({m for m, rule in routes if rule.match(path)})
        if allowed:
            response = error(
                HTTPStatus.METHOD_NOT_ALLOWED,
                "method_not_allowed",
                f"{app.current_event.http_method} is not allowed on {path}",
            )
            response.headers["Allow"] = ", ".join(allowed)
            return response
        return error(HTTPStatus.NOT_FOUND, "not_found", f"no route {path}")

    @handles(ResponseValidationError)
    def _bad_response(exc: ResponseValidationError) -> Response[Any]:
        log.error("response does not match its model: %s", exc.errors())
        return error(HTTPStatus.INTERNAL_SERVER_ERROR, "internal", "internal error")

    @handles(Exception)
    def _unexpected(exc: Exception) -> Response[Any]:
        if not sent_json():
            # Powertools parses form and multipart bodies itself, and raises a bare ValueError
            # on a malformed one (a multipart body without a boundary): the client's fault.
            return not_json()
        # AWS errors past botocore's retries, or a bug: logged with the request's correlation id.
        log.exception("request failed")
        return error(HTTPStatus.INTERNAL_SERVER_ERROR, "internal", "internal error")
