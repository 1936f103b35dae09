"""Request and response bodies of the management API.

Task bodies are the task-file models themselves (`iotsched.core.task_definition.TaskDefinition`,
`TaskFile`): the API, the CLI and the YAML files share one contract. The response views mirror
`iotsched.services.operations.views` (what `iotsched ... --json` prints); they allow extra fields so that a
field added to a view reaches API clients without a change here.
"""

from __future__ import annotations

from datetime import date
from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, model_validator

from iotsched.core.attempt_record import Attempt
from iotsched.core.instance_record import (
    InstanceStatus,
    TriggerKind,
)
from iotsched.core.logs import LogLine
from iotsched.core.shard_record import ShardStatus
from iotsched.core.task_definition import (
    Priority,
    TaskDefinition,
)
from iotsched.core.task_record import MAX_NOTE_CHARS
from iotsched.core.value_types import (
    FIRST_BUSINESS_DATE,
    LAST_BUSINESS_DATE,
    TASK_ID_PATTERN,
    Params,
)

#: Client request ids become part of an instance key (`task@slot~manual-<id>`), so they keep to
#: characters that cannot be confused with the key's separators.
REQUEST_ID_PATTERN = r"^[A-Za-z0-9._-]{1,64}$"
#: `task@2026-11-29T12:00Z`, then the incarnation's mark of a task created again (`~v3`), then
#: up to two `~suffix`es: a manual run's or a submission's (`~manual-<request id>`), and a
#: rerun's (`~run2`).
INSTANCE_ID_PATTERN = (
    TASK_ID_PATTERN.removesuffix("$")
    + r"@\d{4}-\d{2}-\d{2}T\d{2}:\d{2}Z(~v\d{1,10})?(~[A-Za-z0-9._-]{1,80}){0,2}$"
)

#: Business dates and backfill ranges (the use-cases check the same for the CLI).
BusinessDate = Annotated[
    date,
    Field(
        ge=FIRST_BUSINESS_DATE,
        le=LAST_BUSINESS_DATE,
        description="A date in the task's timezone (1970-01-01 to 2999-12-31).",
    ),
]
RequestId = Annotated[
    str,
    Field(
        pattern=REQUEST_ID_PATTERN,
        description="Client request id: the same id always returns the same instance.",
    ),
]
RunParams = Annotated[
    Params,
    Field(description="Merged over the task's params for this instance only."),
]


class Request(BaseModel):
    """A request body: unknown fields are errors, as in task files."""

    model_config = ConfigDict(extra="forbid", defer_build=True)


class View(BaseModel):
    """A response body: fields a newer server adds are passed through."""

    model_config = ConfigDict(extra="allow", defer_build=True)


# -- errors -----------------------------------------------------------------------------------


class Problem(BaseModel):
    """One thing wrong with a request: where, and what."""

    model_config = ConfigDict(defer_build=True)

    field: str = Field(
        description="Where: `body.tasks.0.trigger`, `query.limit`, `path.task_id`, or a task "
        "file location such as `task 'device-scan': trigger.cron`."
    )
    message: str


class ErrorBody(BaseModel):
    """Every 4xx (and the rare 5xx) answer."""

    model_config = ConfigDict(defer_build=True)

    error: Literal[
        "bad_request",
        "forbidden",
        "not_found",
        "method_not_allowed",
        "conflict",
        "unsupported_media_type",
        "internal",
    ]
    message: str
    problems: list[Problem] = Field(default_factory=list)


# -- tasks ------------------------------------------------------------------------------------


class LastInstance(View):
    """A task's newest instance, in brief."""

    instance_id: str
    status: InstanceStatus
    trigger_kind: TriggerKind
    business_date: str
    finished_at: str | None
    failed_shards: int


class TaskView(View):
    """A task as `iotsched tasks list --json` shows it."""

    id: str
    tenant: str | None
    handler: str
    trigger: dict[str, Any]
    timezone: str
    enabled: bool
    paused: bool
    pause_note: str | None = Field(
        default=None,
        description="Why it is paused: an operator's note, or the scheduler's when an instance "
        "paused it (`abort.action: pause`, `pause_on_failure`); null once resumed.",
    )
    sharding: str
    version: int
    next_fire: str | None
    last_slot: str | None
    trigger_text: str = Field(
        default="", description="The trigger in words: `every day at 02:00 (Europe/Berlin)`."
    )
    next_fires: list[str] = Field(
        default_factory=list,
        description="The next 5 fire instants (UTC); empty while paused, for a one-time task "
        "that has fired, and for an after-trigger.",
    )
    last_instance: LastInstance | None = Field(
        default=None, description="The task's newest instance (by slot), for its outcome."
    )
    runs: int = Field(
        default=0, description="Slots fired by its trigger so far (what `max_runs` counts)."
    )
    stop_reason: str | None = Field(
        default=None,
        description="Why it fires no more: `max_runs reached (...)`, `end_at passed (...)`.",
    )
    excluded_dates: dict[str, str] = Field(
        default_factory=dict,
        description="Dates it never fires on, each with what excludes it: `exclude.dates` or "
        "`calendar:<name>`.",
    )


class TaskDetail(TaskView):
    """A task with its full definition (the task-file entry), for editing."""

    definition: TaskDefinition


class AppliedTasks(View):
    """What applying a task file did (`valid` only, with nothing written, on a dry run)."""

    dry_run: bool
    valid: list[str]
    created: list[str]
    updated: list[str]
    unchanged: list[str]
    calendars: list[str] = Field(
        default_factory=list, description="The file's named calendars written (those changed)."
    )


class TaskChange(View):
    """What putting one task did, and the task as stored."""

    change: Literal["created", "updated", "unchanged"]
    task: TaskDetail


class TaskDeleted(View):
    """A deleted task: its definition is gone; its instances stay as history."""

    task_id: str
    version: int = Field(description="The version that was deleted.")
    cancelled: list[str] = Field(
        description="Open instances that `force` cancelled before the delete."
    )


# -- instances and shards ---------------------------------------------------------------------


class InstanceView(View):
    """An instance as `iotsched instances --json` shows it."""

    instance_id: str
    task_id: str
    tenant: str | None
    slot: str
    trigger_kind: TriggerKind
    business_date: str
    status: InstanceStatus
    reason: str | None
    shards: int
    remaining: int
    failed_shards: int
    covers: list[str]
    covers_count: int
    created_at: str
    finished_at: str | None
    duration_s: float | None
    task_version: int
    fire_at: str | None = Field(default=None, description="A submission's due instant.")
    run: int = Field(default=1, description="1, then 2, 3... for reruns.")
    rerun_of: str | None = Field(default=None, description="A rerun's first run.")
    rerun_shards: list[int] | None = Field(
        default=None, description="The shards a partial rerun re-did (null: all of them)."
    )
    priority: Priority = Field(
        default=Priority.NORMAL, description="The shard queue its shards went to."
    )
    waiting: str | None = Field(
        default=None,
        description="Why its shards are not sent yet, while they wait: the tenant's quota it "
        "met (`max_instances_per_minute`); null otherwise.",
    )


class LogSummary(View):
    """An attempt's log in a shard listing: its counts and whereabouts; its lines come from
    `GET /instances/{id}/shards/{n}/logs`."""

    line_count: int
    byte_count: int
    truncated: bool
    object_key: str | None = None
    object_error: str | None = None
    log_group: str | None = None
    log_stream: str | None = None
    insights_query: str | None = None


class AttemptEntry(Attempt):
    """One attempt of a shard, as the shard listings give it."""

    log: LogSummary | None = Field(  # type: ignore[assignment]
        default=None, description="What the attempt logged (null: nothing)."
    )


class ShardView(View):
    """One planned shard with its execution record (pending or cancelled if it never started)."""

    index: int
    bounds: dict[str, Any]
    status: ShardStatus | Literal["not_rerun", "waiting"] = Field(
        description="`not_rerun`: a partial rerun re-did other shards (see the earlier runs); "
        "`waiting`: held back: not sent yet (its rollout rate or maintenance window), or its "
        "window (the instance's or its device group's) closed now."
    )
    attempt: int
    owner: str | None
    error: str | None
    keys_written: list[str] = Field(
        description="Effect keys the attempts claimed: each attempt's first 20 (see keys_count)."
    )
    keys_count: int = Field(
        description="Effect keys all attempts claimed; the ledger (`EFFECT#<key>`) holds each."
    )
    attempts: list[AttemptEntry]
    result: dict[str, Any] | None = Field(
        default=None,
        description="What the handler returned (its JSON object), once the shard succeeded.",
    )


class ShardPage(View):
    """Shards `start` .. `start + len(shards) - 1` of an instance's `total`."""

    instance: InstanceView
    total: int
    start: int
    next_start: int | None = Field(description="Where the next page starts; null at the end.")
    shards: list[ShardView]


class AttemptLogView(View):
    """What one attempt of a shard logged (`attempt` null: the shard has not started)."""

    instance_id: str
    shard: int
    attempt: int | None
    outcome: str | None = Field(description="The attempt's outcome; null while it runs.")
    status: str = Field(description="The shard's status.")
    final: bool = Field(description="The shard is final: nothing more will be logged for it.")
    source: Literal["object", "inline", "none"] = Field(
        description="`object`: the whole log, read from the data bucket; `inline`: the tail "
        "the execution record keeps; `none`: the attempt logged nothing (or has not ended)."
    )
    complete: bool = Field(description="`lines` are the whole log.")
    line_count: int = Field(description="Lines the whole log has.")
    byte_count: int = Field(description="Bytes the whole log has (JSON Lines).")
    truncated: bool = Field(description="The record's tail lacks some of the log.")
    object_key: str | None = Field(description="The log object's key in the data bucket.")
    object_error: str | None = Field(
        description="Why the log object was not written (the tail alone is kept)."
    )
    log_group: str | None = Field(description="On AWS: the worker's CloudWatch log group.")
    log_stream: str | None = Field(description="On AWS: the worker's log stream.")
    insights_query: str | None = Field(
        description="On AWS: a Logs Insights query for the worker's lines of the attempt."
    )
    note: str | None = Field(description="Why a written log object was not read.")
    lines: list[LogLine]


# -- runs ---------------------------------------------------------------------------------------

RunOutcome = Literal["claimed", "queued", "skipped", "failed", "exists"]


class RunRequest(Request):
    """A manual run of a task for the current minute."""

    business_date: BusinessDate | None = None
    params: RunParams | None = None
    request_id: RequestId | None = None
    priority: Priority | None = Field(
        default=None, description="The shard queue its shards go to (default: the task's)."
    )


class RunResult(View):
    """The instance a manual run claimed, or the one it collided with (`exists`)."""

    outcome: RunOutcome
    instance: InstanceView


class SubmitRequest(Request):
    """A one-time instance that the tick fires once due: `at` an instant, or after `delay`."""

    at: AwareDatetime | None = Field(default=None, description="ISO 8601 with an offset.")
    delay: str | None = Field(
        default=None, max_length=32, description="From now: a number and m, h or d (`2h`)."
    )
    business_date: BusinessDate | None = None
    params: RunParams | None = None
    request_id: RequestId | None = None
    priority: Priority | None = Field(
        default=None, description="The shard queue its shards go to (default: the task's)."
    )

    @model_validator(mode="after")
    def _one_time(self) -> SubmitRequest:
        if (self.at is None) == (self.delay is None):
            raise ValueError("give exactly one of at and delay")
        return self


class BackfillRequest(Request):
    """One instance per slot whose business date lies in [from, to], both inclusive (task
    timezone; the business date per the task's `business_date` rule, so with `previous_day` a
    daily 00:05 slot of 12-01 belongs to 11-30)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, defer_build=True)

    start: BusinessDate = Field(alias="from", description="The first business date.")
    end: BusinessDate = Field(alias="to", description="The last business date, inclusive.")
    dry_run: bool = Field(
        default=False,
        description="List each slot with its business date and data interval, and the "
        "estimated requests; write nothing.",
    )
    priority: Priority = Field(
        default=Priority.LOW,
        description="The shard queue its instances' shards go to: low unless asked otherwise, "
        "so that a backfill never holds up other work.",
    )


class BackfillSlot(View):
    """One slot of a backfill and the business date and data interval its instance works on."""

    slot: str = Field(description="The slot (UTC); the instance id is `<task>@<slot>`.")
    business_date: str
    data_interval_start: str = Field(description="Start of the data interval (UTC), inclusive.")
    data_interval_end: str = Field(description="End of the data interval (UTC), exclusive.")


class BackfillResult(View):
    """A backfill's plan and, unless a dry run, what happened to each slot."""

    task_id: str
    dry_run: bool
    slot_count: int
    slots: list[BackfillSlot] = Field(
        description="The slots, oldest first (the first 1000 at most)."
    )
    shards_per_instance: int
    estimated_requests: dict[str, int]
    results: dict[str, RunOutcome] = Field(
        default_factory=dict, description="Instance id to what its claim came to."
    )


class RerunRequest(Request):
    """Which part of an ended instance to run again: all of it (no field), one shard, or the
    shards that did not succeed."""

    shard: int | None = Field(default=None, ge=0, description="Re-run this shard only.")
    failed_only: bool = Field(default=False, description="Re-run the shards that did not succeed.")

    @model_validator(mode="after")
    def _one_selection(self) -> RerunRequest:
        if self.shard is not None and self.failed_only:
            raise ValueError("give shard or failed_only, not both")
        return self


class PauseRequest(Request):
    """Why an operator pauses a task."""

    note: str | None = Field(
        default=None,
        max_length=MAX_NOTE_CHARS,
        description="Why it is paused, shown with the task until it is resumed (resuming "
        "clears it); none clears the note a paused task had.",
    )


class CancelRequest(Request):
    """Why an operator cancels an instance."""

    reason: str = Field(default="cancelled by operator", min_length=1, max_length=500)


class TenantItem(View):
    """A tenant as `GET /tenants` and `iotsched tenants --json` show it."""

    name: str
    tasks: list[str] = Field(description="Its tasks, by id.")
    quotas: dict[str, int] = Field(
        description="Its quotas set (`max_concurrent_shards`, `max_instances_per_minute`, "
        "`max_tasks`); `{}` for none."
    )
    task_count: int | None = Field(
        default=None,
        description="Its tasks as counted for `max_tasks` (null while it has no such quota).",
    )


# -- handlers ---------------------------------------------------------------------------------


class HandlerView(View):
    """A handler task files can name: where it comes from (its package, from the entry-point
    group `iotsched.handlers`), what it does, and why it cannot be loaded if it cannot."""

    name: str
    package: str | None = Field(description="Its distribution (null: given in-process).")
    version: str | None = Field(description="The distribution's version.")
    entry_point: str | None = Field(description="`module:function`.")
    summary: str | None = Field(description="The first paragraph of its docstring.")
    params: str | None = Field(description="Its params model's name (null: any params).")
    error: str | None = Field(
        description="Why it cannot be loaded (null: it loads); a task naming it is refused."
    )


class HandlerDetail(HandlerView):
    """A handler with its params' JSON Schema."""

    params_schema: dict[str, Any] | None = Field(
        description="The JSON Schema of its params model (null: no model, any params)."
    )
