"""What the scheduler records: tasks as stored, instances, shard executions, messages, alerts."""

from __future__ import annotations

from datetime import date, datetime
from enum import StrEnum
from typing import Any

from pydantic import Field

from iotsched.core.model import Frozen, TaskDefinition
from iotsched.core.sharding import ShardPlan
from iotsched.core.timeutil import slot_text


class InstanceStatus(StrEnum):
    """Life of an instance. Final statuses never change again."""

    SCHEDULED = "scheduled"  # submitted for later (`iotsched submit`); the tick fires it
    QUEUED = "queued"  # claimed behind a running instance of the task (blocking: serial)
    PLANNING = "planning"  # claimed; shard messages not all sent yet (resumable)
    RUNNING = "running"  # every shard message sent
    REDUCING = "reducing"  # every shard succeeded; the reduce runs (exactly once)
    SUCCEEDED = "succeeded"  # every shard (and the reduce, if any) succeeded
    FAILED = "failed"  # at least one shard failed (or could not be planned)
    TIMED_OUT = "timed_out"  # the instance passed its deadline
    CANCELLED = "cancelled"  # by an operator or a cover policy
    SKIPPED = "skipped"  # by policy (misfire, blocked); never ran

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
    }
)


class ShardStatus(StrEnum):
    """Life of one shard execution."""

    PENDING = "pending"  # planned, no attempt has taken the lease (or the last one released it)
    RUNNING = "running"  # an attempt holds the lease until `lease_until`
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


class TriggerKind(StrEnum):
    """Why an instance exists."""

    SCHEDULED = "scheduled"
    CATCH_UP = "catch_up"
    MANUAL = "manual"
    BACKFILL = "backfill"
    DEPENDENCY = "dependency"
    RERUN = "rerun"


class TaskRecord(Frozen):
    """A task as stored: its definition plus the scheduling state the dispatcher keeps."""

    definition: TaskDefinition
    version: int = Field(ge=1)
    next_fire: datetime | None
    last_slot: datetime | None = None
    paused: bool = False
    updated_at: datetime
    active: str | None = None  # the instance holding a non-parallel task (blocking)
    queue: list[str] = Field(default_factory=list)  # serial: instances waiting, oldest first

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
    RELEASE = "release"  # pass the task's hold on (exclusive instances)
    DEPENDENTS = "dependents"  # fire or skip the tasks that depend on this one


#: The order follow-ups are done in.
FOLLOW_UP_ORDER = (FollowUp.ALERT, FollowUp.RELEASE, FollowUp.DEPENDENTS)


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
    owed: list[FollowUp] = Field(default_factory=list)  # follow-ups not done yet (final only)


class Attempt(Frozen):
    """One attempt at a shard: who ran it, when, and how it ended."""

    number: int = Field(ge=1)
    worker: str
    started_at: datetime
    ended_at: datetime | None = None
    duration_ms: int | None = None
    outcome: str | None = None  # a ShardStatus value, or "released" for a retryable failure
    error: str | None = None
    keys: list[str] = Field(default_factory=list)


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

    @property
    def keys_written(self) -> list[str]:
        """Effect keys written by all attempts, in order."""
        return [key for attempt in self.attempts for key in attempt.keys]


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
    reduce: bool = False  # the instance's reduce, not a shard (its index is the shard count)


class Alert(Frozen):
    """A JSON alert for the Alert Microservice; `attributes()` are the SNS filter attributes."""

    type: str
    severity: str
    task_id: str
    tenant: str | None
    instance_id: str
    business_date: date | None = None
    status: str
    reason: str | None = None
    failed_shards: list[dict[str, Any]] = Field(default_factory=list)  # the first few at most
    alert_id: str
    raised_at: datetime | None = None  # set when the alert is recorded (and deduplicated)
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

    def attributes(self) -> dict[str, str]:
        """Message attributes for SNS subscription filter policies."""
        return {
            "type": self.type,
            "severity": self.severity,
            "tenant": self.tenant or "-",
            "task": self.task_id,
        }
