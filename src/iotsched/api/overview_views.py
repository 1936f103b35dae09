"""The overview's body (`GET /overview`): the figures the console's first page draws."""

from __future__ import annotations

from pydantic import Field

from iotsched.api.models import View

#: The most instances one overview reads (`services.overview.MAX_INSTANCES`; a unit test holds
#: them equal): the API's models do not import the use-cases.
MAX_INSTANCES = 5000


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
    read: int = Field(
        description="Instances read to count them (every tenant's; to a tenant caller, its own)."
    )
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
