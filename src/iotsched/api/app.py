"""The management API: the CLI's verbs over HTTP, as a Powertools `APIGatewayRestResolver`.

`create_app(services_factory)` builds the resolver; the Lambda (`functions/api/app.py`) serves
it, and the local runtime can mount the same app (`strip_prefixes`, `iotsched.api.proxy`).
Every route is a thin call of a use-case in `iotsched.services`; the answers are the views
`iotsched ... --json` prints. The routes live by resource (`routes_tasks`, `routes_runs`,
`routes_instances`, `routes_calendars`, `routes_audit`), their parameters and limits in `params`, the answers to failures in
`failures`, what they share in `routing`.

Errors: a request the schema or a use-case rejects is a 400 naming each field at fault (task
bodies with the task file's own messages), an unknown task or instance a 404, an action the
instance's state does not allow (cancel a finished instance) a 409. Only a fault of the server
or of AWS is a 5xx.
"""

from __future__ import annotations

from http import HTTPStatus

from aws_lambda_powertools.event_handler import APIGatewayRestResolver

from iotsched.api import (
    routes_audit,
    routes_calendars,
    routes_instances,
    routes_runs,
    routes_tasks,
)
from iotsched.api.failures import register_failures
from iotsched.api.params import EXAMPLE_INSTANCE, EXAMPLE_TASK
from iotsched.api.routes_tasks import TASK_READS_IN_FLIGHT
from iotsched.api.routing import Api, ServicesFactory

__all__ = [
    "EXAMPLE_INSTANCE",
    "EXAMPLE_TASK",
    "TASK_READS_IN_FLIGHT",
    "ServicesFactory",
    "create_app",
]


def create_app(
    services_factory: ServicesFactory,
    *,
    strip_prefixes: list[str] | None = None,
    unsigned: str = "anonymous",
) -> APIGatewayRestResolver:
    """The management API over the services `services_factory` returns (called per request;
    cache it). `strip_prefixes` (e.g. `["/api"]`) serves the app under a path prefix.
    `unsigned`: the actor audit records name for a request no principal signed."""
    app = APIGatewayRestResolver(
        enable_validation=True,
        # A response that does not match its own model is our bug: a 500, never a 400.
        response_validation_error_http_code=HTTPStatus.INTERNAL_SERVER_ERROR,
        strip_prefixes=list(strip_prefixes or []),
    )
    api = Api(app, services_factory, unsigned=unsigned)
    register_failures(api)
    # in the order the OpenAPI document lists them
    for routes in (routes_tasks, routes_runs, routes_instances, routes_calendars, routes_audit):
        routes.register(api)
    return app
