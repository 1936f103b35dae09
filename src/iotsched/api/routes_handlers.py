"""Routes of the handlers: those the deployment has installed (entry-point group
`iotsched.handlers`), each with its package, version and params schema. Any caller the API
admits may read them: they are code, not a tenant's data."""

from __future__ import annotations

from iotsched.api.models import HandlerDetail, HandlerView
from iotsched.api.routing import Api, responses
from iotsched.registry import HandlerNotFoundError, describe, handlers_of


def register(api: Api) -> None:
    """Add these routes to `api`."""
    route = api.route
    services_factory = api.services

    @route(
        "GET",
        "/handlers",
        operation_id="listHandlers",
        tags=["handlers"],
        summary="List the installed handlers, by name",
        description="Every handler task files can name: its package and version, "
        "`module:function`, what it does, and `error` for one that cannot be loaded (a task "
        "naming it is refused).",
        responses=responses(),
    )
    def list_handlers() -> list[HandlerView]:
        registry = handlers_of(services_factory().handlers)
        return [HandlerView.model_validate(describe(registry, name)) for name in registry]

    @route(
        "GET",
        "/handlers/<name>",
        operation_id="getHandler",
        tags=["handlers"],
        summary="Show one handler with its params' JSON Schema",
        description="The handler as `GET /handlers` lists it, with the JSON Schema of its "
        "params model (a task's `params` are validated against it when applied).",
        responses=responses(400, 404),
    )
    def get_handler(name: str) -> HandlerDetail:
        registry = handlers_of(services_factory().handlers)
        try:
            view = describe(registry, name, schema=True)
        except KeyError:
            raise HandlerNotFoundError(name) from None
        return HandlerDetail.model_validate(view)
