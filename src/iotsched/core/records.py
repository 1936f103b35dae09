"""What the scheduler records: tasks as stored, instances, shard executions, messages, alerts."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime, timedelta
from enum import StrEnum
from typing import Any

from pydantic import (
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
)
from pydantic.json_schema import SkipJsonSchema

from iotsched.core.logs import AttemptLog
from iotsched.core.model import (
    DEFAULT_RETENTION_DAYS,
    Abort,
    Alerts,
    Frozen,
    Priority,
    Rollout,
    TaskDefinition,
    TenantQuotas,
    Window,
)
from iotsched.core.sharding import ShardPlan
from iotsched.core.timeutil import slot_text


class InstanceStatus(StrEnum):
    """The status of an instance (final ones never change again).

    - `scheduled`: submitted for later (`iotsched submit`); the tick fires it when it is due.
    - `queued`: claimed while an earlier instance of the task runs (blocking `serial`); it starts
      when that one ends.
    - `planning`: claimed, its shard plan stored; its shard messages are not all sent yet (the
      next tick or the sweeper resends them if the dispatcher died).
    - `running`: every shard message was sent; shards run.
    - `reducing`: every shard succeeded; the task's reduce runs (once).
    - `succeeded` (final): every shard, and the reduce if any, succeeded.
    - `failed` (final): a shard ended failed or timed out (see `failed_shards`), the reduce
      failed, or the instance could not be planned or its messages not sent (see `reason`).
    - `timed_out` (final): the sweeper ended it at its `instance_timeout_s` deadline.
    - `cancelled` (final): an operator cancelled it (`iotsched cancel`, `tasks delete --force`)
      or a later firing replaced it (blocking `cover`), or its maintenance window closed
      (`window.on_close: cancel`).
    - `skipped` (final): never ran, by policy (see `reason`): `misfire`, `catch_up_limit`,
      blocked by a running instance (`discard`), `queue_full`, `upstream_failed`.
    - `aborted` (final): its abort criteria were met (`abort`): the failed share of its ended
      shards reached `failure_percent`; no shard started after the decision (see `reason`).
    """

    SCHEDULED = "scheduled"
    QUEUED = "queued"
    PLANNING = "planning"
    RUNNING = "running"
    REDUCING = "reducing"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"
    SKIPPED = "skipped"
    ABORTED = "aborted"

    @property
    def final(self) -> bool:
        """True once nothing will change the instance again."""
        return self in FINAL_INSTANCE


FINAL_INSTANCE = frozenset(
    {
        InstanceStatus.SUCCEEDED,
        InstanceStatus.FAILED,
        InstanceStatus.TIMED_OUT,
        InstanceStatus.CANCELLED,
        InstanceStatus.SKIPPED,
        InstanceStatus.ABORTED,
    }
)


class ShardStatus(StrEnum):
    """The status of one shard execution (final ones count against the instance's remaining
    shards and never change again).

    - `pending`: planned; no attempt holds it (none started yet, or the last attempt failed
      or timed out with attempts left: the next delivery of its message takes it).
    - `running`: an attempt holds the lease until `lease_until`.
    - `succeeded` (final): an attempt's handler returned.
    - `failed` (final): the last attempt's handler raised, or the message was dead-lettered
      (error `dead_lettered`).
    - `timed_out` (final): the last attempt ran past `timeout_s`, or its worker stopped
      renewing the lease with no attempt left.
    - `cancelled` (final): the instance ended (cancelled or timed out) before the shard did.
    """

    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"

    @property
    def final(self) -> bool:
        """True once the shard counted against the instance's remaining counter."""
        return self in FINAL_SHARD


FINAL_SHARD = frozenset(
    {ShardStatus.SUCCEEDED, ShardStatus.FAILED, ShardStatus.TIMED_OUT, ShardStatus.CANCELLED}
)


class AttemptOutcome(StrEnum):
    """How one attempt at a shard ended (null while it runs). The shard's status says what
    follows: `pending` again when attempts are left after `failed` or `timed_out`.

    - `succeeded`: the handler returned (set by the worker).
    - `failed`: the handler raised (set by the worker).
    - `timed_out`: the handler ran past `timeout_s` and was interrupted (set by the worker).
    - `cancelled`: the instance ended while the attempt ran; the handler saw
      `ctx.cancelled()` (set by the worker).
    - `lost`: the worker stopped renewing its lease (it died or hung) and the lease expired;
      set when the next attempt took the shard over, or when the sweeper or a later delivery
      ended the shard (`ended_at`: then); or its message was dead-lettered while it ran (set
      by the DLQ handler, error `dead_lettered`).
    """

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"
    LOST = "lost"


class TriggerKind(StrEnum):
    """Why an instance (or a skipped record) exists.

    - `scheduled`: the tick found its slot due on time (with misfire `fire_once`, missed slots
      collapsed into an on-time one).
    - `catch_up`: a missed slot fired late by misfire `catch_up` (or its slots beyond
      `max_catch_up`, recorded skipped), or by `fire_once` when no slot was on time.
    - `manual`: `iotsched run` (or the API's run): run now, for the current minute.
    - `submitted`: `iotsched submit` (or the API's submission): a one-time run at a given time.
    - `backfill`: `iotsched backfill`, one per slot of a range of business dates.
    - `dependency`: an `after` trigger: every parent succeeded for the business date.
    - `rerun`: `iotsched rerun` of an ended instance (run 2, 3, ...).
    """

    SCHEDULED = "scheduled"
    CATCH_UP = "catch_up"
    MANUAL = "manual"
    SUBMITTED = "submitted"
    BACKFILL = "backfill"
    DEPENDENCY = "dependency"
    RERUN = "rerun"


#: The longest pause note a task keeps (the task item also holds the whole definition).
MAX_NOTE_CHARS = 500


class TaskRecord(Frozen):
    """A task as stored: its definition plus the scheduling state the dispatcher keeps."""

    definition: TaskDefinition
    version: int = Field(ge=1)
    next_fire: datetime | None
    last_slot: datetime | None = None
    paused: bool = False
    updated_at: datetime
    updated_by: str | None = None  # who wrote this version (the audit record's actor)
    active: str | None = None  # the instance holding a non-parallel task (blocking)
    queue: list[str] = Field(default_factory=list)  # serial: instances waiting, oldest first
    pause_note: str | None = None  # why it was paused (an operator's note, or the scheduler's)
    runs: int = Field(default=0, ge=0)  # slots fired so far by its trigger (`max_runs`)
    # The dates of each named calendar its definition excludes, resolved when it was applied
    # (or when the calendar was), so that the tick reads no calendar item.
    calendars: dict[str, list[date]] = Field(default_factory=dict)
    # Its tenant's quotas, resolved when it was applied (or when the tenant's quotas were), so
    # that the tick reads no tenant item. None: the tenant has none.
    quotas: TenantQuotas | None = None

    @property
    def fires(self) -> bool:
        """True when the dispatcher may find the task due (enabled, not paused, a next fire)."""
        return self.definition.enabled and not self.paused and self.next_fire is not None

    @property
    def task_id(self) -> str:
        """The task's id."""
        return self.definition.id


def instance_id_for(task_id: str, slot: datetime) -> str:
    """The deterministic instance key: task id + scheduled slot in UTC."""
    return f"{task_id}@{slot_text(slot)}"


class FollowUp(StrEnum):
    """What an instance still owes once it is final, recorded by the write that ended it.

    Each is done by whoever finds it owed (the ender, the next finalizer, the sweeper), is
    idempotent, and is struck off with its own conditional write once done.
    """

    ALERT = "alert"  # publish the instance's alert (deduplicated by alert id)
    PAUSE = "pause"  # pause the task with a note (`abort.action: pause`, `pause_on_failure`)
    RELEASE = "release"  # pass the task's hold on (exclusive instances)
    DEPENDENTS = "dependents"  # fire or skip the tasks that depend on this one


#: The order follow-ups are done in.
FOLLOW_UP_ORDER = (FollowUp.ALERT, FollowUp.PAUSE, FollowUp.RELEASE, FollowUp.DEPENDENTS)


#: Covered slots listed on an instance; `covers_count` counts them all (the rest lie on the
#: trigger's grid between the last listed one and the instance's slot).
MAX_LISTED_COVERS = 100


class InstanceRecord(Frozen):
    """One firing of a task for one slot, with its stored shard plan.

    `covers` lists (up to MAX_LISTED_COVERS of) the missed slots a fire_once instance stands
    for, or the further slots a skipped record stands for; `covers_count` counts them all.
    """

    instance_id: str
    task_id: str
    tenant: str | None = None
    slot: datetime
    trigger_kind: TriggerKind = TriggerKind.SCHEDULED
    covers: list[datetime] = Field(default_factory=list, max_length=MAX_LISTED_COVERS)
    covers_count: int = Field(default=0, ge=0)
    business_date: date
    data_interval_start: datetime
    data_interval_end: datetime
    status: InstanceStatus
    reason: str | None = None
    plan: ShardPlan
    remaining: int = Field(ge=0)
    failed_shards: int = Field(default=0, ge=0)
    task_version: int
    handler: str
    params: dict[str, Any] = Field(default_factory=dict)
    timeout_s: int
    max_attempts: int
    backoff_s: int = 0
    severity: str = "high"
    exclusive: bool = False  # claimed under a non-parallel blocking policy: holds the task
    reduce: str | None = None  # the reduce handler, run once after every shard succeeded
    run: int = Field(default=1, ge=1)  # 1, then 2, 3... for reruns (`<base>~run<n>`)
    rerun_of: str | None = None  # the first run's instance id, for a rerun
    only: list[int] | None = None  # a rerun of some shards: their indexes (stored bounds)
    fire_at: datetime | None = None  # a submission's due instant (status scheduled)
    created_at: datetime
    finished_at: datetime | None = None
    deadline: datetime
    dispatch_lease_until: datetime | None = None
    # Shard messages sent so far, in send order (`iotsched.core.messages.send_order`): a
    # dispatch sent in steps records it after each step, and a resumed one starts there.
    sent: int = Field(default=0, ge=0)
    owed: list[FollowUp] = Field(default_factory=list)  # follow-ups not done yet (final only)
    retention_days: int = Field(default=DEFAULT_RETENTION_DAYS, ge=1)  # the task's retention
    # The task's fleet-safety policies as they were when the instance was claimed.
    rollout: Rollout | None = None
    abort: Abort | None = None
    window: Window | None = None
    shard_spread_s: int = Field(default=0, ge=0)
    pause_on_failure: bool = False  # the task's: an end failed, timed out or aborted pauses it
    # The task's alert policy (threshold, silences, recovery), only where it has one.
    alert_policy: Alerts | None = None
    # The shard queue its messages go to: the task's, or the run's, submission's or
    # backfill's own (a backfill's is low unless asked otherwise).
    priority: Priority = Priority.NORMAL
    # The tenant's `max_concurrent_shards` when the instance was claimed (from its task's
    # record): its shards start only in one of the tenant's in-flight slots. None: no cap.
    tenant_cap: int | None = Field(default=None, ge=1)
    # The tenant's `max_instances_per_minute` when it was claimed: its shards are sent only
    # once a minute of the tenant's counts it. None: no such quota.
    tenant_rate: int | None = Field(default=None, ge=1)
    # Why its send waits (a quota's name and value), while it waits; None otherwise.
    waiting: str | None = None

    @property
    def expires_at(self) -> datetime | None:
        """When the store's TTL may delete a final instance: its retention after its end."""
        if not self.status.final:
            return None
        return (self.finished_at or self.created_at) + timedelta(days=self.retention_days)


def listing_key(instance_id: str) -> str:
    """What instances are listed by, newest first: `<slot>[~suffix]#<id>` (the by_status index's
    sort key; within one task, the order of the instance items' sort keys too)."""
    return f"{instance_id.rpartition('@')[2]}#{instance_id}"


#: The error of an attempt closed `lost` by a takeover.
LOST_ERROR = "lease expired: the worker stopped renewing it"


#: Effect keys an attempt lists on its record (`Attempt.keys`); `key_count` counts them all.
#: Every effect is in the ledger (`EFFECT#<key>`, naming instance, shard and attempt); the
#: shard record stays small however many effects a shard has.
LISTED_KEYS = 20


class Attempt(Frozen):
    """One attempt at a shard: who ran it, when, and how it ended."""

    number: int = Field(ge=1)
    worker: str
    started_at: datetime
    ended_at: datetime | None = None
    duration_ms: int | None = None
    outcome: AttemptOutcome | None = None  # None while the attempt runs
    error: str | None = None
    keys: list[str] = Field(default_factory=list)  # its first LISTED_KEYS effect keys
    key_count: int | None = None  # every effect key it claimed (None: it never ended)
    # What its handler logged: the last lines, and where the whole log is (None: nothing).
    log: AttemptLog | None = None
    # The distribution its handler came from, and its version (None: a handler given
    # in-process, or one that was not found): what ran, beside the task's version.
    package: str | None = None
    version: str | None = None

    @property
    def keys_claimed(self) -> int:
        """How many effect keys it claimed (those listed, if it never ended)."""
        return len(self.keys) if self.key_count is None else max(self.key_count, len(self.keys))

    @field_validator("outcome", mode="before")
    @classmethod
    def _legacy(cls, value: Any) -> Any:
        # Records written before `failed` and `timed_out` named retried attempts too.
        return AttemptOutcome.FAILED if value == "released" else value

    def lost(self, at: datetime, error: str = LOST_ERROR) -> Attempt:
        """This attempt closed as `lost` at `at`: its lease expired without a renewal."""
        return self.model_copy(
            update={
                "ended_at": at,
                "duration_ms": max(0, int((at - self.started_at).total_seconds() * 1000)),
                "outcome": AttemptOutcome.LOST,
                "error": error,
            }
        )


class ShardRecord(Frozen):
    """The execution record of one shard of one instance."""

    instance_id: str
    index: int = Field(ge=0)
    bounds: dict[str, Any] = Field(default_factory=dict)
    status: ShardStatus
    attempt: int = Field(default=0, ge=0)
    max_attempts: int = Field(default=1, ge=1)
    owner: str | None = None
    lease_until: datetime | None = None
    attempts: list[Attempt] = Field(default_factory=list)
    error: str | None = None
    result: dict[str, Any] | None = None  # the handler's partial result, read by the reduce
    expires_at: datetime | None = None  # set by its final write: its instance's retention

    @property
    def keys_written(self) -> list[str]:
        """Effect keys written by all attempts, in order."""
        return [key for attempt in self.attempts for key in attempt.keys]

    @property
    def keys_count(self) -> int:
        """How many effect keys all attempts claimed (`keys_written` lists the first of each)."""
        return sum(attempt.keys_claimed for attempt in self.attempts)


class ShardMessage(Frozen):
    """The body of one shard message on the shard queue: everything a worker needs."""

    instance_id: str
    task_id: str
    shard: int = Field(ge=0)
    bounds: dict[str, Any]
    handler: str
    params: dict[str, Any] = Field(default_factory=dict)
    business_date: date
    data_interval_start: datetime
    data_interval_end: datetime
    timeout_s: int = Field(gt=0)
    max_attempts: int = Field(ge=1)
    backoff_s: int = Field(default=0, ge=0)
    tenant: str | None = None
    priority: Priority = Priority.NORMAL  # the shard queue it goes to (its instance's)
    reduce: bool = False  # the instance's reduce, not a shard (its index is the shard count)
    # The local tracer's context of the span that sent it (docs/design.md, section 16); absent
    # from the body when None, as on AWS, where X-Ray's own header carries the trace.
    trace: str | None = None

    @model_serializer(mode="wrap")
    def _without_absent_trace(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if data.get("trace") is None:
            data.pop("trace", None)
        return data


def with_trace(messages: Sequence[ShardMessage], trace: str | None) -> Sequence[ShardMessage]:
    """`messages`, each without a trace given `trace` (a tracer's carrier: its receiver's spans
    join the sender's trace); unchanged when `trace` is None (no tracer, or X-Ray's)."""
    if trace is None or all(m.trace is not None for m in messages):
        return messages
    return [m if m.trace is not None else m.model_copy(update={"trace": trace}) for m in messages]


#: Slots a `catch_up_dropped` alert lists (its reason counts them all).
MAX_ALERT_SLOTS = 100

#: The SNS message attributes of every alert (String), for subscription filter policies; named
#: with the JSON schema (docs/alert.schema.json) and docs/task-files.md, "Alert subscribers".
ALERT_ATTRIBUTES = {
    "type": "the alert's `type`: instance_failed, instance_timed_out, instance_aborted, "
    "instance_plan_too_large, shard_dead_lettered, queue_overflow, catch_up_dropped, "
    "task_dispatch_failed, malformed_dead_letter, failure_threshold, recovered, missed_run, "
    "quota_exceeded",
    "severity": "the task's `alerts.severity`: low, medium, high (the default), critical",
    "tenant": "the task's `tenant`, `-` when it has none",
    "task": "the task id (`task_id`)",
    "silenced": "`yes` for an alert held by a silence of its task and published when the "
    "silence ended, else `no`",
}

#: Instances a `failure_threshold` alert lists (`count` counts them all).
MAX_ALERT_INSTANCES = 20


class Alert(Frozen):
    """A JSON alert for the Alert Microservice; `attributes()` are the SNS filter attributes."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-sns-message-attributes": {
                name: {"DataType": "String", "description": text}
                for name, text in ALERT_ATTRIBUTES.items()
            },
            "x-sns-filter-policy-example": {
                "severity": ["critical", "high"],
                "tenant": ["acme"],
            },
        }
    )

    type: str
    severity: str
    task_id: str
    tenant: str | None
    instance_id: str
    business_date: date | None = None
    status: str
    reason: str | None = None
    failed_shards: list[dict[str, Any]] = Field(default_factory=list)  # the first few at most
    slots: list[dict[str, str]] = Field(
        default_factory=list,
        max_length=MAX_ALERT_SLOTS,
        description="`catch_up_dropped`: the dropped slots, oldest first, each "
        "`{slot, business_date}` (the first 100; `reason` counts them all).",
    )
    alert_id: str
    raised_at: datetime | None = None  # set when the alert is recorded (and deduplicated)
    # The task's retention: the record of the alert expires that long after it was raised.
    # Not part of the alert subscribers receive.
    retention_days: SkipJsonSchema[int | None] = Field(default=None, exclude=True)
    schema_version: int = 1
    # A bounded summary: `failed_shards` lists at most the first few; these count them all and
    # say how to list the rest.
    failed_shard_count: int | None = Field(
        default=None, description="Every failed shard of the instance, listed or not."
    )
    more_failed_shards: str | None = Field(
        default=None,
        description="How to list the failed shards `failed_shards` leaves out (CLI and API); "
        "null when it lists them all.",
    )

    # The alert policy's fields (`alerts:` on the task).
    count: int | None = Field(
        default=None, description="`failure_threshold`: the failures counted in its window."
    )
    window_start: datetime | None = Field(
        default=None,
        description="`failure_threshold`: the start of the window it counts; "
        "`quota_exceeded`: of the window its one alert stands for.",
    )
    window_s: int | None = Field(
        default=None,
        description="`failure_threshold`, `quota_exceeded`: the window's length in seconds.",
    )
    instances: list[str] = Field(
        default_factory=list,
        max_length=MAX_ALERT_INSTANCES,
        description="`failure_threshold`: the instances counted (the first 20).",
    )
    recovered_from: str | None = Field(
        default=None,
        description="`recovered`: the first failed instance of the failures it ends.",
    )
    fire_at: datetime | None = Field(
        default=None, description="`missed_run`: the fire time that passed with no instance."
    )
    silenced_until: datetime | None = Field(
        default=None,
        description="Set when a silence of the task held the alert: when the silence ended "
        "(the alert is published then).",
    )
    quota: str | None = Field(
        default=None,
        description="`quota_exceeded`: the tenant's quota its work met "
        "(`max_concurrent_shards`, `max_instances_per_minute`); `tenant` names the tenant, "
        "`instance_id` the work that "
        "waits, `window_start` the window of the one alert it raises.",
    )
    limit: int | None = Field(default=None, description="`quota_exceeded`: the quota's value.")

    def attributes(self) -> dict[str, str]:
        """Message attributes for SNS subscription filter policies."""
        return {
            "type": self.type,
            "severity": self.severity,
            "tenant": self.tenant or "-",
            "task": self.task_id,
            "silenced": "yes" if self.silenced_until is not None else "no",
        }
