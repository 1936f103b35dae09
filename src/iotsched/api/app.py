"""The management API: the CLI's verbs over HTTP, as a Powertools `APIGatewayRestResolver`.

`create_app(services_factory)` builds the resolver; the Lambda (`functions/api/app.py`) serves
it, and the local runtime can mount the same app (`strip_prefixes`, `iotsched.api.proxy`).
Every route is a thin call of a use-case in `iotsched.services`; the answers are the views
`iotsched ... --json` prints. The routes live by resource (`routes_tasks`, `routes_runs`,
`routes_instances`, `routes_calendars`, `routes_tenants`, `routes_audit`, `routes_overview`), their parameters and limits in `params`, the answers to failures in
`failures`, what they share in `routing`.

Errors: a request the schema or a use-case rejects is a 400 naming each field at fault (task
bodies with the task file's own messages), an unknown task or instance a 404, an action the
instance's state does not allow (cancel a finished instance) a 409. Only a fault of the server
or of AWS is a 5xx. A body is held to the input limits (docs/limits.md) before it is parsed
(its size) and as it is parsed (its depth): past one, a 400 naming it.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, content_types

from iotsched.api import (
    routes_audit,
    routes_calendars,
    routes_handlers,
    routes_instances,
    routes_overview,
    routes_runs,
    routes_tasks,
    routes_tenants,
)
from iotsched.api.failures import register_failures
from iotsched.api.identity import Identify, as_operator
from iotsched.api.models import ErrorBody
from iotsched.api.params import EXAMPLE_INSTANCE, EXAMPLE_TASK
from iotsched.api.routes_tasks import TASK_READS_IN_FLIGHT
from iotsched.api.routing import Api, WiringFactory
from iotsched.core.input_limits import MAX_FILE_BYTES, load_json, too_large

__all__ = [
    "EXAMPLE_INSTANCE",
    "EXAMPLE_TASK",
    "TASK_READS_IN_FLIGHT",
    "WiringFactory",
    "create_app",
]


class ScopedResolver(APIGatewayRestResolver):
    """The resolver, identifying each request's caller before anything else: a caller that
    holds no tenant gets 403 whatever it asks (before validation, so nothing is revealed
    about the routes' inputs); the others' `Caller` is in `app.context["caller"]`."""

    def __init__(self, *, identify: Identify, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._identify = identify

    def resolve(self, event: Mapping[str, Any], context: Any) -> dict[str, Any]:
        caller = self._identify(event)
        if not caller.operator and not caller.tenants:
            return _answer(
                HTTPStatus.FORBIDDEN,
                "forbidden",
                f"{caller.principal} holds no tenant of this scheduler",
            )
        if _body_bytes(event) > MAX_FILE_BYTES:  # before anything parses it
            message = too_large("a request body")
            return _answer(
                HTTPStatus.BAD_REQUEST,
                "bad_request",
                f"body: {message}",
                [{"field": "body", "message": message}],
            )
        self.context["caller"] = caller
        return super().resolve(event, context)


def _body_bytes(event: Mapping[str, Any]) -> int:
    """The size of the request's body as the routes read it (base64 decoded)."""
    body = event.get("body")
    if not isinstance(body, str):
        return 0
    if event.get("isBase64Encoded"):
        try:
            return len(base64.b64decode(body))
        except (binascii.Error, ValueError):
            return len(body)  # not base64: the route answers 400 for it
    return len(body.encode())


def _answer(
    status: HTTPStatus, error: str, message: str, problems: list[dict[str, str]] | None = None
) -> dict[str, Any]:
    """An error answered before routing, as the routes' errors are."""
    body = ErrorBody.model_validate(
        {"error": error, "message": message, "problems": problems or []}
    )
    return {
        "statusCode": status.value,
        "multiValueHeaders": {"Content-Type": [content_types.APPLICATION_JSON]},
        "body": json.dumps(body.model_dump(mode="json")),
        "isBase64Encoded": False,
    }


def create_app(
    services_factory: WiringFactory,
    *,
    identify: Identify = as_operator,
    strip_prefixes: list[str] | None = None,
) -> APIGatewayRestResolver:
    """The management API over the services `services_factory` returns (called per request;
    cache it). `identify` names each request's caller: the Lambda passes the IAM mapping
    (`identity.IamIdentity`); the default, every request the operator's, is for the local
    runtime and tests. `strip_prefixes` (e.g. `["/api"]`) serves the app under a path prefix."""
    app = ScopedResolver(
        identify=identify,
        # Bodies are parsed within the input limits: a body nesting too deep is a 400.
        json_body_deserializer=load_json,
        enable_validation=True,
        # A response that does not match its own model is our bug: a 500, never a 400.
        response_validation_error_http_code=HTTPStatus.INTERNAL_SERVER_ERROR,
        strip_prefixes=list(strip_prefixes or []),
    )
    api = Api(app, services_factory)
    register_failures(api)
    # in the order the OpenAPI document lists them
    for routes in (
        routes_overview,
        routes_tasks,
        routes_runs,
        routes_instances,
        routes_calendars,
        routes_handlers,
        routes_tenants,
        routes_audit,
    ):
        routes.register(api)
    return app
