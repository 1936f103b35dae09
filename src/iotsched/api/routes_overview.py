"""The overview's route: the figures the console's first page draws."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler.openapi.params import Query
from pydantic import Field

from iotsched.api.models import View
from iotsched.api.params import TENANT_FILTER_PATTERN
from iotsched.api.routing import Api, responses
from iotsched.services.overview import MAX_INSTANCES, overview

#: The `?tenant=` of records with no tenant, as the console's filter names them.
NO_TENANT = "-"


class HourItem(View):
    """The instances whose slot is in one hour, by status."""

    hour: str = Field(description="The hour's start (UTC).")
    total: int
    counts: dict[str, int] = Field(description="Status -> instances (statuses seen only).")


class DurationItem(View):
    """A task's durations (claim to end) over its instances that ended succeeded, failed,
    timed out or aborted in the window; nearest-rank percentiles, in seconds."""

    task_id: str
    tenant: str | None
    count: int
    p50_s: float
    p95_s: float
    max_s: float


class FailingItem(View):
    """A task whose latest outcome in the window is failed, timed out or aborted."""

    task_id: str
    tenant: str | None
    instance_id: str = Field(description="The instance of that latest outcome.")
    status: str
    reason: str | None
    finished_at: str
    failures: int = Field(description="Failed outcomes in a row up to it, in the window.")


class MissedItem(View):
    """A `missed_run` alert: a fire time passed by more than its grace with no instance."""

    alert_id: str
    task_id: str
    tenant: str | None
    instance_id: str = Field(description="`<task>@<missed fire time>`.")
    raised_at: str | None
    reason: str | None


class MissedRuns(View):
    """The missed-run alerts raised in the window."""

    count: int
    capped: bool = Field(
        description="The alert log's newest alerts read did not reach back to the window's "
        "start: older missed runs are not counted."
    )
    alerts: list[MissedItem] = Field(description="The newest 50.")


class QueueItem(View):
    """One queue's approximate counts, as SQS reports them."""

    queue: str = Field(description="`high`, `normal`, `low` (shard queues) or `dead_letter`.")
    visible: int
    in_flight: int
    delayed: int


class OverviewView(View):
    """The figures of a window of whole hours up to the current one."""

    now: str
    hours: int
    start: str
    end: str = Field(description="Exclusive: the end of the current hour.")
    statuses: list[str] = Field(description="The statuses counted in `hourly`, in order.")
    hourly: list[HourItem] = Field(description="One entry per hour, oldest first.")
    instances: int = Field(description="Instances counted (the caller's, in the window).")
    read: int = Field(description="Instances read to count them (every tenant's).")
    capped: bool = Field(description=f"The read stopped at {MAX_INSTANCES} instances.")
    complete_from: str | None = Field(
        description="When capped: the first hour whose instances were all read."
    )
    durations: list[DurationItem]
    failing: list[FailingItem] = Field(description="The tasks failing now, latest first.")
    missed_runs: MissedRuns
    queues: list[QueueItem] | None = Field(
        description="Operators only (the queues hold every tenant's work); null for others."
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
        tenant: Annotated[
            str | None,
            Query(
                pattern=TENANT_FILTER_PATTERN,
                description="Only this tenant's figures (the caller's are all it sees); `-`: "
                "those of records with no tenant (the operators').",
            ),
        ] = None,
    ) -> OverviewView:
        caller = api.caller()
        found = overview(
            api.services(),
            hours=hours,
            keep=lambda t: caller.sees(t) and (tenant is None or (t or NO_TENANT) == tenant),
            queues=caller.operator,
        )
        return OverviewView.model_validate(found)
