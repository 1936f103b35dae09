"""The overview's route: the figures the console's first page draws."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler.openapi.params import Query

from iotsched.api.overview_views import OverviewView
from iotsched.api.params import TenantFilter
from iotsched.api.routing import Api, responses
from iotsched.api.scope import wanted
from iotsched.services.operations.overview import (
    MAX_INSTANCES,
    overview,
)


def register(api: Api) -> None:
    """Add the route to `api`."""

    @api.route(
        "GET",
        "/overview",
        operation_id="getOverview",
        tags=["overview"],
        summary="The overview: instances per hour by status, durations per task, the tasks "
        "failing now, missed runs and queue depths, over the last hours",
        description="Counted at read time from the instance listing (no item is written for "
        f"statistics), reading at most {MAX_INSTANCES} instances: `capped` says when the "
        "oldest hours are partial. An instance counts in the hour of its slot.",
        responses=responses(400),
    )
    def get_overview(
        hours: Annotated[
            int,
            Query(ge=1, le=168, description="The window: whole hours up to the current one."),
        ] = 24,
        tenant: TenantFilter = None,
    ) -> OverviewView:
        caller = api.caller()
        found = overview(
            api.services(),
            hours=hours,
            keep=lambda t: wanted(caller, t, tenant),
            operator=caller.operator,
        )
        return OverviewView.model_validate(found)
