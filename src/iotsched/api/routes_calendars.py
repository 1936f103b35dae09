"""Routes of named calendars: list them (a task file's `calendars:` writes them)."""

from __future__ import annotations

from iotsched.api.routing import Api, responses
from iotsched.core.calendars import Calendar


def register(api: Api) -> None:
    """Add these routes to `api`."""
    route = api.route
    services_factory = api.services

    @route(
        "GET",
        "/calendars",
        operation_id="listCalendars",
        tags=["calendars"],
        summary="List the named calendars, by name",
        description="The dates each named calendar excludes, in the timezone of each task that "
        "names it. A task file's `calendars:` writes them (`POST /tasks`).",
        responses=responses(),
    )
    def list_calendars() -> list[Calendar]:
        return services_factory().tasks.list_calendars()
