"""Task definitions: the contract shared by YAML task files, the CLI, the API and the console.

Field names are the task file's (docs/task-files.md). Every model forbids unknown fields so that a typo in a
task file is an error naming the field, never a silently ignored policy.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date, datetime, timedelta
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    model_validator,
)

from iotsched.core import triggers
from iotsched.core.timeutil import require_aware

TASK_ID_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,79}$"


def _zone(value: str) -> str:
    triggers.load_zone(value)
    return value


def _duration(value: str) -> str:
    triggers.parse_rate(value)
    return value


# Checked field types: the check is the type's, wherever a model uses it.
Cron = Annotated[str, AfterValidator(triggers.check_cron)]  # 5-field cron
Zone = Annotated[str, AfterValidator(_zone)]  # an IANA timezone
Duration = Annotated[str, AfterValidator(_duration)]  # `30m`, `2h`, `1d`
Aware = Annotated[datetime, AfterValidator(require_aware)]  # an instant with its offset


class Frozen(BaseModel):
    """Base for value objects: immutable, unknown fields rejected.

    `defer_build`: a model's validator is built on its first use rather than at import, so a
    Lambda cold start pays only for the models its function uses (about 45 ms less import time
    for the dispatcher; see bench/results.md, "Cold start").
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


class BlockingPolicy(StrEnum):
    """What a new firing does while an earlier instance of the same task is still open."""

    DISCARD = "discard"  # the new firing is recorded skipped (reason: blocked)
    SERIAL = "serial"  # the new firing waits, queued, at most `max_queued`
    COVER = "cover"  # the running instance is asked to stop; the new one starts
    PARALLEL = "parallel"  # both run


class Priority(StrEnum):
    """Which shard queue an instance's messages go to: workers always have room for `high`
    and `normal` work however much `low` work waits (docs/design.md, section 12)."""

    HIGH = "high"
    NORMAL = "normal"
    LOW = "low"


class MisfirePolicy(StrEnum):
    """What happens to slots missed while no tick reached the task."""

    SKIP = "skip"  # every missed slot is recorded skipped (reason: misfire)
    FIRE_ONCE = "fire_once"  # one instance for the latest slot, covering the missed ones
    CATCH_UP = "catch_up"  # each missed slot, oldest first, at most `max_catch_up`


class BusinessDateRule(StrEnum):
    """How an instance's business date follows from its slot, in the task's timezone."""

    PREVIOUS_DAY = (
        "previous_day"  # the day that just ended (a daily close at 00:05 reports yesterday)
    )
    SAME_DAY = "same_day"  # the local date of the slot


class ShardingStrategy(StrEnum):
    """How one instance is cut into shards; bounds are fixed at claim time."""

    NONE = "none"  # one shard, empty bounds
    STATIC = "static"  # one shard per listed bounds object (tenants, regions)
    GROUPS = "groups"  # one shard per group read from the Device Management System at fire time
    ID_RANGE = "id_range"  # N contiguous half-open ranges over a stable id space
    CUSTOM = "custom"  # a registered planner


# -- triggers ---------------------------------------------------------------------------------


class CronTrigger(Frozen):
    """5-field cron in an IANA timezone (DST rule in `iotsched.core.triggers`)."""

    cron: Cron
    timezone: Zone = "UTC"

    def slots_after(self, after: datetime) -> Iterator[datetime]:
        """Fire instants strictly after `after`, UTC, ascending."""
        return triggers.cron_slots_after(self.cron, self.timezone, after)


class RateTrigger(Frozen):
    """A fixed period anchored to `anchor` (default the Unix epoch), e.g. `15m`, `1h`."""

    rate: Duration
    anchor: Aware = triggers.RATE_EPOCH
    timezone: Zone = "UTC"

    @property
    def period(self) -> timedelta:
        """The period as a timedelta of whole minutes."""
        return triggers.parse_rate(self.rate)

    def slots_after(self, after: datetime) -> Iterator[datetime]:
        """Grid instants strictly after `after`, UTC, ascending."""
        return triggers.rate_slots_after(self.period, after, self.anchor)


class AtTrigger(Frozen):
    """A one-time instant; once fired it never fires again."""

    at: Aware
    timezone: Zone = "UTC"

    def slots_after(self, after: datetime) -> Iterator[datetime]:
        """The single instant if it lies after `after`."""
        if self.at.replace(second=0, microsecond=0) > after:
            yield require_aware(self.at).replace(second=0, microsecond=0)


class AfterTrigger(Frozen):
    """Fires for a business date once every parent's instance for that date succeeded."""

    after: list[Annotated[str, Field(pattern=TASK_ID_PATTERN)]] = Field(min_length=1)
    timezone: Zone = "UTC"

    def slots_after(self, after: datetime) -> Iterator[datetime]:
        """Dependency triggers have no clock grid: the dispatcher never finds them due."""
        return iter(())


def _trigger_kind(value: Any) -> str | None:
    """The trigger kind, told by the one key that names it (`cron:`, `rate:`, `at:`, `after:`)."""
    if isinstance(value, dict):
        kinds = [kind for kind in ("cron", "rate", "at", "after") if kind in value]
        return kinds[0] if len(kinds) == 1 else None
    for kind, cls in _TRIGGER_CLASSES.items():
        if isinstance(value, cls):
            return kind
    return None


_TRIGGER_CLASSES: dict[str, type[Frozen]] = {
    "cron": CronTrigger,
    "rate": RateTrigger,
    "at": AtTrigger,
    "after": AfterTrigger,
}

Trigger = Annotated[
    Annotated[CronTrigger, Tag("cron")]
    | Annotated[RateTrigger, Tag("rate")]
    | Annotated[AtTrigger, Tag("at")]
    | Annotated[AfterTrigger, Tag("after")],
    Discriminator(
        _trigger_kind,
        custom_error_type="trigger_kind",
        custom_error_message="a trigger needs exactly one of cron, rate, at or after",
    ),
]


# -- sharding ---------------------------------------------------------------------------------


class NoSharding(Frozen):
    """One shard."""

    strategy: Literal[ShardingStrategy.NONE] = ShardingStrategy.NONE


class StaticSharding(Frozen):
    """One shard per bounds object, in the order written."""

    strategy: Literal[ShardingStrategy.STATIC]
    shards: list[dict[str, Any]] = Field(min_length=1, max_length=10_000)


class IdRangeSharding(Frozen):
    """`shards` contiguous half-open ranges over the integer id space `[id_min, id_max)`.

    Ids are rendered as `prefix` + zero-padded number (`dev-000042`), so a bound stays the same
    when devices are added or removed: bounds never depend on a page or an offset.
    """

    strategy: Literal[ShardingStrategy.ID_RANGE]
    shards: int = Field(ge=1, le=100_000)
    key_space: str = "device_id"
    id_min: int = Field(default=0, ge=0)
    id_max: int = Field(default=1_000_000, gt=0)
    prefix: str = "dev-"
    width: int = Field(default=6, ge=1, le=20)

    @model_validator(mode="after")
    def _space(self) -> IdRangeSharding:
        if self.id_max <= self.id_min:
            raise ValueError("id_max must be greater than id_min")
        if self.shards > self.id_max - self.id_min:
            raise ValueError("more shards than ids in [id_min, id_max)")
        return self


class GroupsSharding(Frozen):
    """One shard per device group, read from the Device Management System at fire time."""

    strategy: Literal[ShardingStrategy.GROUPS]
    source: str = "device_directory"
    tenant: str | None = None


class CustomSharding(Frozen):
    """A registered planner by name, with its own parameters."""

    strategy: Literal[ShardingStrategy.CUSTOM]
    planner: str
    params: dict[str, Any] = Field(default_factory=dict)


Sharding = Annotated[
    NoSharding | StaticSharding | IdRangeSharding | GroupsSharding | CustomSharding,
    Field(discriminator="strategy"),
]


# -- policies ---------------------------------------------------------------------------------


class Blocking(Frozen):
    """Overlap policy; see `BlockingPolicy`."""

    policy: BlockingPolicy = BlockingPolicy.PARALLEL
    max_queued: int = Field(default=1, ge=0, le=100)


class Misfire(Frozen):
    """Missed-slot policy; slots older than `grace_s` at tick time count as missed."""

    policy: MisfirePolicy = MisfirePolicy.FIRE_ONCE
    grace_s: int = Field(default=300, ge=0)
    max_catch_up: int = Field(default=3, ge=1, le=500)
    # What resuming a paused task does with the slots missed while paused: `apply` the
    # policy above to them, or `skip` them silently (the task starts again from now).
    on_resume: Literal["apply", "skip"] = "apply"


class Retry(Frozen):
    """Attempts per shard and the delay before the next one."""

    max_attempts: int = Field(default=3, ge=1, le=100)
    backoff_s: int = Field(default=30, ge=0, le=43_200)


class Threshold(Frozen):
    """Alert on failures only once `count` of them ended in one window of `window_s` seconds
    (windows aligned on the epoch): one `failure_threshold` alert per window reached."""

    count: int = Field(ge=1, le=1000)
    window_s: int = Field(ge=60, le=86_400, multiple_of=60)  # whole minutes, as slots


class Silence(Frozen):
    """A period when the task's alerts are held: recorded, then published when it ends.

    Either recurring (`cron` + `duration`, in `timezone`, as a maintenance window) or one
    period (`start` to `end`)."""

    cron: Cron | None = None
    duration: Duration | None = None
    timezone: Zone = "UTC"
    start: Aware | None = None
    end: Aware | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> Silence:
        recurring = self.cron is not None or self.duration is not None
        period = self.start is not None or self.end is not None
        if recurring == period:
            raise ValueError("a silence is either `cron` with `duration`, or `start` with `end`")
        if recurring and (self.cron is None or self.duration is None):
            raise ValueError("a recurring silence needs both `cron` and `duration`")
        if period and (self.start is None or self.end is None or self.end <= self.start):
            raise ValueError("a silence period needs `start` before `end`")
        return self


class Alerts(Frozen):
    """Severity and routing attributes copied onto every SNS alert of the task, and its alert
    policy: a failure `threshold`, `silence` periods, and a `recovery` notice."""

    severity: Literal["low", "medium", "high", "critical"] = "high"
    route: str | None = None
    threshold: Threshold | None = None
    silence: list[Silence] = Field(default_factory=list, max_length=20)
    recovery: bool = False  # a `recovered` alert on the first success after a failure alert

    @property
    def has_policy(self) -> bool:
        """True when the task's alerts go through a policy (it costs the others nothing)."""
        return self.threshold is not None or bool(self.silence) or self.recovery


#: How long a task's finished records are kept when its file says nothing (`retention.days`).
DEFAULT_RETENTION_DAYS = 30
MAX_RETENTION_DAYS = 3650
#: Effect keys are kept at least this long, whatever the task's retention: a duplicate delivery
#: of a shard message may re-apply an effect for as long as the message can come back. The
#: shard queue keeps a message 4 days (template.yaml, ShardQueue's MessageRetentionPeriod) and
#: its DLQ 14 more (ShardDLQ's), from which an operator may redrive it.
EFFECT_RETENTION_FLOOR_DAYS = 18


class Retention(Frozen):
    """How long the records of a task's finished instances are kept before DynamoDB's TTL
    deletes them: the instance, its shard records and alerts, `days` after the end; its effect
    keys at least EFFECT_RETENTION_FLOOR_DAYS."""

    days: int = Field(default=DEFAULT_RETENTION_DAYS, ge=1, le=MAX_RETENTION_DAYS)


# -- fleet safety -----------------------------------------------------------------------------

CALENDAR_NAME_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,63}$"
#: Dates one calendar (or one task's inline exclusions) may list.
MAX_CALENDAR_DATES = 1000


class Ramp(Frozen):
    """An exponential rollout: the rate starts at `base` per minute and is multiplied by
    `factor` after every `every_succeeded` shards that succeeded, up to the rollout's maximum."""

    base: int = Field(ge=1, le=100_000)
    factor: float = Field(gt=1, le=10)
    every_succeeded: int = Field(ge=1, le=100_000)


class Rollout(Frozen):
    """How fast an instance's shards may start, counted across every worker and dispatcher.

    Exactly one of `max_shards_per_minute` and `max_devices_per_minute` (a shard counts its
    devices from its bounds) caps the rate; `ramp` starts lower and raises it as shards succeed.
    `scope: tenant` shares one budget between every instance of the task's tenant.
    """

    max_shards_per_minute: int | None = Field(default=None, ge=1, le=100_000)
    max_devices_per_minute: int | None = Field(default=None, ge=1, le=10_000_000)
    ramp: Ramp | None = None
    scope: Literal["instance", "tenant"] = "instance"

    @model_validator(mode="after")
    def _one_cap(self) -> Rollout:
        if (self.max_shards_per_minute is None) == (self.max_devices_per_minute is None):
            raise ValueError(
                "a rollout needs exactly one of max_shards_per_minute and max_devices_per_minute"
            )
        cap = self.max_shards_per_minute or self.max_devices_per_minute or 0
        if self.ramp is not None and self.ramp.base > cap:
            raise ValueError("a ramp's base must not exceed the rollout's maximum per minute")
        return self


class Abort(Frozen):
    """Stop an instance whose failed share of ended shards reaches `failure_percent` once at
    least `min_executed` shards ended: no further shard starts, the instance ends `aborted`;
    `action: pause` also pauses the task, with a note saying why."""

    failure_percent: float = Field(gt=0, le=100)
    min_executed: int = Field(default=1, ge=1, le=1_000_000)
    action: Literal["cancel", "pause"] = "cancel"


class Window(Frozen):
    """A recurring maintenance window: it opens at each instant of `cron` (in `timezone`) and
    stays open `duration` (`30m`, `2h`, `1d`). Firings and shard starts happen only while it is
    open; shards not started when it closes wait for the next opening (`defer`) or are cancelled
    (`cancel`, which ends the instance).

    `group_attribute` (groups sharding only) gives each shard its own window instead: that
    attribute of its device group (`{cron, duration[, timezone]}`), in the group's own timezone
    unless the attribute names one, fixed into the shard's bounds at the claim. Its `cron` and
    `duration` are then optional: the window of a group without the attribute (in that group's
    timezone); with neither, such a group fails the plan. It never moves firings."""

    cron: Cron | None = None
    duration: Duration | None = None
    timezone: Zone = "UTC"
    on_close: Literal["defer", "cancel"] = "defer"
    group_attribute: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.:-]{1,128}$")

    @model_validator(mode="after")
    def _shape(self) -> Window:
        if self.group_attribute is None:
            if self.cron is None or self.duration is None:
                raise ValueError("a window needs cron and duration (or group_attribute)")
            return self
        if (self.cron is None) != (self.duration is None):
            raise ValueError(
                "with group_attribute, cron and duration are the window of a group without the "
                "attribute: give both or neither"
            )
        if self.timezone != "UTC":
            raise ValueError(
                "with group_attribute, a window is in each group's own timezone (or the "
                "attribute's timezone): leave timezone out"
            )
        return self

    @property
    def per_group(self) -> bool:
        """True if each shard's window comes from its device group (`group_attribute`)."""
        return self.group_attribute is not None

    @property
    def schedule(self) -> str:
        """The cron of the window's openings (a per-group window without a default has none)."""
        if self.cron is None:
            raise ValueError("a per-group window without a default has no schedule of its own")
        return self.cron

    @property
    def length(self) -> timedelta:
        """How long the window stays open."""
        if self.duration is None:
            raise ValueError("a per-group window without a default has no duration of its own")
        return triggers.parse_rate(self.duration)


class Exclude(Frozen):
    """Dates the task never fires on, in its timezone: listed here, or in named calendars
    (a task file's `calendars:`), which tasks share."""

    dates: list[date] = Field(default_factory=list, max_length=MAX_CALENDAR_DATES)
    calendars: list[Annotated[str, Field(pattern=CALENDAR_NAME_PATTERN)]] = Field(
        default_factory=list, max_length=20
    )


class Calendar(Frozen):
    """A named list of dates (holidays, freeze days) that tasks exclude by name."""

    name: str = Field(pattern=CALENDAR_NAME_PATTERN)
    description: str = ""
    dates: list[date] = Field(max_length=MAX_CALENDAR_DATES)


class TaskDefinition(Frozen):
    """One task as operators write it in a task file."""

    id: str = Field(pattern=TASK_ID_PATTERN)
    tenant: str | None = None
    description: str = ""
    enabled: bool = True
    priority: Priority = Priority.NORMAL
    handler: str = Field(min_length=1)
    trigger: Trigger
    params: dict[str, Any] = Field(default_factory=dict)
    business_date: BusinessDateRule = BusinessDateRule.PREVIOUS_DAY
    sharding: Sharding = Field(default_factory=NoSharding)
    blocking: Blocking = Field(default_factory=Blocking)
    misfire: Misfire = Field(default_factory=Misfire)
    retry: Retry = Field(default_factory=Retry)
    timeout_s: int = Field(default=300, gt=0, le=900)
    instance_timeout_s: int = Field(default=3600, gt=0)
    reduce: str | None = None
    alerts: Alerts = Field(default_factory=Alerts)
    retention: Retention = Field(default_factory=Retention)
    # Fleet safety (docs/design.md, "Fleet safety").
    rollout: Rollout | None = None
    abort: Abort | None = None
    window: Window | None = None
    exclude: Exclude = Field(default_factory=Exclude)
    jitter_s: int = Field(default=0, ge=0, le=86_400)
    shard_spread_s: int = Field(default=0, ge=0, le=900)
    pause_on_failure: bool = False
    max_runs: int | None = Field(default=None, ge=1)
    end_at: Aware | None = None

    @property
    def timezone(self) -> str:
        """The zone business dates are computed in."""
        return self.trigger.timezone


#: The highest `max_concurrent_shards`: its slot items are read in one query of one partition.
MAX_CONCURRENT_SHARDS = 1000


class TenantQuotas(Frozen):
    """A tenant's quotas, each optional (None: no such quota). They are the tenant's, stored on
    an item of their own (`TENANT#<name>`), not on its tasks' definitions."""

    max_concurrent_shards: int | None = Field(default=None, ge=1, le=MAX_CONCURRENT_SHARDS)
    max_instances_per_minute: int | None = Field(default=None, ge=1, le=100_000)
    max_tasks: int | None = Field(default=None, ge=1, le=1_000_000)

    @property
    def empty(self) -> bool:
        """True if no quota is set."""
        return (
            self.max_concurrent_shards is None
            and self.max_instances_per_minute is None
            and self.max_tasks is None
        )


class TenantDefaults(Frozen):
    """A tenant's part of a task file: the `alerts:` fields its tasks do not set, and its
    `quotas:` (stored on the tenant's own item at apply)."""

    name: str = Field(min_length=1, max_length=100)
    alerts: Alerts = Field(default_factory=Alerts)
    quotas: TenantQuotas | None = None


class TaskFile(Frozen):
    """A YAML task file: `tasks:` followed by a list of task definitions, and optionally
    `calendars:`, the named calendars its tasks (and others) exclude by name, and `tenants:`,
    each tenant's defaults for its tasks of the file (merged into them by
    `with_tenant_defaults` before validation, and stored on each task)."""

    tasks: list[TaskDefinition] = Field(default_factory=list)
    calendars: list[Calendar] = Field(default_factory=list)
    tenants: list[TenantDefaults] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique(self) -> TaskFile:
        seen: set[str] = set()
        for task in self.tasks:
            if task.id in seen:
                raise ValueError(f"task id {task.id!r} appears twice")
            seen.add(task.id)
        names = [calendar.name for calendar in self.calendars]
        for name in names:
            if names.count(name) > 1:
                raise ValueError(f"calendar {name!r} appears twice")
        tenants = [tenant.name for tenant in self.tenants]
        for name in tenants:
            if tenants.count(name) > 1:
                raise ValueError(f"tenant {name!r} appears twice")
        return self


def with_tenant_defaults(data: Any) -> Any:
    """A parsed task file with each task's `alerts` filled from its tenant's defaults
    (`tenants:`): every field the task does not set. Done on the raw file, before validation,
    so that a task's own fields win field by field; a malformed part is left as written, for
    the validation to name."""
    if not isinstance(data, dict) or not isinstance(data.get("tenants"), list):
        return data
    defaults = {
        t["name"]: t["alerts"]
        for t in data["tenants"]
        if isinstance(t, dict)
        and isinstance(t.get("name"), str)
        and isinstance(t.get("alerts"), dict)
    }
    if not defaults or not isinstance(data.get("tasks"), list):
        return data
    tasks = []
    for raw in data["tasks"]:
        if isinstance(raw, dict) and isinstance(raw.get("tenant"), str):
            own = raw.get("alerts", {})
            default = defaults.get(raw["tenant"])
            if default is not None and isinstance(own, dict):
                raw = {**raw, "alerts": {**default, **own}}
        tasks.append(raw)
    return {**data, "tasks": tasks}
