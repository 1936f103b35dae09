"""Routes of tenants: list the tenants the caller holds, with their quotas (a task file's
`tenants:` sets them)."""

from __future__ import annotations

from iotsched.api.models import TenantItem
from iotsched.api.routing import Api, responses
from iotsched.services.tenancy.quotas import tenant_views


def register(api: Api) -> None:
    """Add these routes to `api`."""
    route = api.route
    services_factory = api.services

    @route(
        "GET",
        "/tenants",
        operation_id="listTenants",
        tags=["tenants"],
        summary="List the tenants the caller holds, by name, with their quotas",
        description="The tenants the stored tasks name (those the caller holds; all for an "
        "operator), each with its tasks, its quotas and the task count `max_tasks` holds "
        "against. A task file's `tenants:` sets the quotas (`POST /tasks`, operators only).",
        responses=responses(),
    )
    def list_tenants() -> list[TenantItem]:
        caller = api.caller()
        return [
            TenantItem.model_validate(view.as_json())
            for view in tenant_views(services_factory().tasks)
            if caller.sees(view.name)
        ]
