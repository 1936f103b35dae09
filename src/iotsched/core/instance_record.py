"""An instance as stored (`InstanceRecord`): one firing of a task for one slot, with its status,
why it exists (`TriggerKind`), what it still owes once final (`FollowUp`), and the keys it is
stored and listed by."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime, timedelta
from enum import StrEnum
from typing import Any

from pydantic import Field

from iotsched.core.sharding import ShardPlan
from iotsched.core.task_alerts import Alerts
from iotsched.core.task_definition import Priority
from iotsched.core.task_fleet_safety import Abort, Rollout, Window
from iotsched.core.task_policies import DEFAULT_RETENTION_DAYS
from iotsched.core.timeutil import slot_text
from iotsched.core.value_types import Frozen


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


def incarnation_mark(incarnation: int) -> str:
    """What a task's instance ids and request keys carry for its incarnation: nothing for the
    first, `~v<n>` for one created again at version n, so that no key of the task that held
    the id before is ever one of its own."""
    return "" if incarnation <= 1 else f"~v{incarnation}"


def incarnation_key(task_id: str, incarnation: int) -> str:
    """A task's name for what is its incarnation's own (`<task>[~v<n>]`): its request ids, its
    alert state and failure windows, none of which a task created again inherits."""
    return task_id + incarnation_mark(incarnation)


def series_of(instance: InstanceRecord) -> str:
    """`incarnation_key` of the task incarnation `instance` was claimed for."""
    return incarnation_key(instance.task_id, incarnation_of(instance.instance_id))


def incarnation_of(instance_id: str) -> int:
    """The incarnation of its task an instance id was claimed for (`incarnation_mark`)."""
    _, _, after_slot = instance_id.rpartition("@")[2].partition("~")
    mark = after_slot.partition("~")[0]
    return int(mark[1:]) if mark[:1] == "v" and mark[1:].isdigit() else 1


def incarnation_order(instance_id: str) -> str:
    """Where an instance sorts among its task's (what its item's sort key holds after `INST`):
    `#<slot>[~suffix]` for a first incarnation's, `~v<n>#<slot>[~suffix]` for incarnation n's,
    so that each incarnation's instances are one range of keys, newest slot last."""
    after = instance_id.rpartition("@")[2]
    n = incarnation_of(instance_id)
    if n == 1:
        return f"#{after}"
    slot, _, marked = after.partition("~")
    tail = marked.partition("~")[2]
    return f"~v{n}#{slot}" + (f"~{tail}" if tail else "")


def incarnation_range(incarnation: int) -> str:
    """What every `incarnation_order` of incarnation `incarnation`'s instances begins with."""
    return "#" if incarnation <= 1 else f"~v{incarnation}#"


def instance_id_in(task_id: str, order: str) -> str:
    """The instance id an `incarnation_order` of `task_id`'s stands for."""
    if order.startswith("#"):
        return f"{task_id}@{order[1:]}"
    mark, _, rest = order.partition("#")
    slot, _, tail = rest.partition("~")
    return f"{task_id}@{slot}{mark}" + (f"~{tail}" if tail else "")


def instance_id_for(task_id: str, slot: datetime, incarnation: int = 1) -> str:
    """The deterministic instance key: task id + scheduled slot in UTC (+ its incarnation's
    mark, `incarnation_mark`)."""
    return f"{task_id}@{slot_text(slot)}{incarnation_mark(incarnation)}"


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
    # Of `failed_shards`, those dead-lettered without a handler ever running: they fail the
    # instance (its work was not done) but are not the devices' failures an abort decides on.
    unrun_shards: int = Field(default=0, ge=0)
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
    # Its task's `instance_timeout_s`, kept by a capped instance: while its sends follow the
    # tenant's cap, each send moves its deadline that far on (`services.tenancy.pacing`).
    instance_timeout_s: int | None = Field(default=None, gt=0)
    # Why its send waits (a quota's name and value), while it waits; None otherwise.
    waiting: str | None = None

    def send_order(self) -> Sequence[int]:
        """The shard indexes the instance sends, in the order it sends them (a rerun of some
        shards: those it re-runs)."""
        if self.only is not None:
            return [i for i in self.only if 0 <= i < self.plan.count]
        return range(self.plan.count)

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
