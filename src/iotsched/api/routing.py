"""What every route shares: the resolver being built (`Api`), error answers, OpenAPI
responses, and the instance view."""

from __future__ import annotations

import re
from collections.abc import Callable
from http import HTTPStatus
from typing import Any, TypeVar

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response, content_types
from aws_lambda_powertools.event_handler.openapi.exceptions import (
    RequestValidationError,
)
from pydantic import BaseModel, ValidationError

from iotsched.api.errors import (
    summary,
)
from iotsched.api.identity import Caller
from iotsched.api.models import (
    ErrorBody,
    InstanceView,
    Problem,
)
from iotsched.core.input_limits import InputError
from iotsched.core.instance_record import InstanceRecord
from iotsched.core.timeutil import iso
from iotsched.services.operations.views import instance_view
from iotsched.services.wiring import Wiring

WiringFactory = Callable[[], Wiring]

_Body = TypeVar("_Body", bound=BaseModel)
_Exc = TypeVar("_Exc", bound=Exception)


_ERRORS: dict[int, str] = {
    400: "The request is invalid: `problems` names each field at fault.",
    403: "The caller holds no tenant, or the request writes a tenant it does not hold.",
    404: "No such task or instance, or one of a tenant the caller does not hold (or no route "
    "for the path).",
    409: "The state does not allow the action (e.g. the instance has already ended, the task "
    "has open instances or dependents).",
    415: "The body is not JSON (`Content-Type: application/json`).",
}


def responses(*codes: int) -> dict[int, Any]:
    """OpenAPI responses of a route: its model on 200, and the error codes it can answer (every
    route answers 403 to a caller that holds no tenant)."""
    responses: dict[int, Any] = {200: {"description": "Successful Response"}}
    for code in sorted({*codes, 403}):
        responses[code] = {
            "description": _ERRORS[code],
            "content": {content_types.APPLICATION_JSON: {"model": ErrorBody}},
        }
    return responses


def error(
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


def bad_request(problems: list[Problem], message: str | None = None) -> Response[Any]:
    return error(HTTPStatus.BAD_REQUEST, "bad_request", message or summary(problems), problems)


def instance_model(inst: InstanceRecord) -> InstanceView:
    view = instance_view(inst)
    view.setdefault("fire_at", iso(inst.fire_at) if inst.fire_at else None)
    return InstanceView.model_validate(view)


class Api:
    """The resolver being built, and what every route module asks of it."""

    def __init__(self, app: APIGatewayRestResolver, services: WiringFactory) -> None:
        self.app = app
        self.services = services
        # (method, rule) of every route, for the Allow header of a 405. The rules are the
        # resolver's own, so a path it cannot route (a segment with a control character) is a
        # 404.
        self.routes: list[tuple[str, re.Pattern[str]]] = []

    def route(self, method: str, path: str, **kwargs: Any) -> Callable[[Callable[..., Any]], Any]:
        """`app.route`, remembering the rule."""
        self.routes.append((method, APIGatewayRestResolver._compile_regex(path)))
        return self.app.route(path, method=method, **kwargs)

    def caller(self) -> Caller:
        """Who is calling (identified before routing: see `app.ScopedResolver`)."""
        caller = self.app.context.get("caller")
        if not isinstance(caller, Caller):  # fail closed: never serve an unidentified request
            raise RuntimeError("the request was routed without identifying its caller")
        return caller

    def actor(self) -> str:
        """Who makes this request, for the audit record of a change: the caller's principal
        (the IAM ARN API Gateway vouches for; `local` on the local runtime's port)."""
        return self.caller().principal

    def json_body(self) -> Any:
        """The request body as JSON (None when empty); not JSON is a 400, and so is a body past
        an input limit (`InputError`, answered by its own handler)."""
        try:
            return self.app.current_event.json_body
        except InputError:
            raise
        except ValueError as exc:
            raise RequestValidationError(
                [{"type": "json_invalid", "loc": ("body",), "msg": str(exc), "ctx": {}}]
            ) from None

    def strict_body(self, model: type[_Body], *, optional: bool = False) -> _Body | None:
        """The body validated as JSON, strictly.

        Powertools validates the body in pydantic's lax mode, on Python values: it would take
        `0` for a date, `"1"` for a number or `[null]` for no body. The API's own bodies are a
        new contract with no files to stay compatible with, so they are read again, as JSON, in
        strict mode. (Task bodies get the same check through `raise_strict_problems`.)
        """
        raw = self.app.current_event.decoded_body
        if optional and (raw is None or not raw.strip() or self.json_body() is None):
            return None
        try:
            return model.model_validate_json(raw or "null", strict=True)
        except ValidationError as exc:
            errors = [{**e, "loc": ("body", *e["loc"])} for e in exc.errors()]
            raise RequestValidationError(errors) from None

    def handles(
        self, exc_class: type[_Exc]
    ) -> Callable[[Callable[[_Exc], Response[Any]]], Callable[[_Exc], Response[Any]]]:
        """`app.exception_handler`, typed."""

        def register(handler: Callable[[_Exc], Response[Any]]) -> Callable[[_Exc], Response[Any]]:
            self.app.exception_handler(exc_class)(handler)
            return handler

        return register
