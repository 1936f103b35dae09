"""One task as operators write it (`TaskDefinition`): its handler, trigger, sharding and
policies, under the task file's field names (docs/task-files.md). Every model of a definition
rejects unknown fields: a typo is an error naming the field, never a silently ignored policy."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from iotsched.core.calendars import Exclude
from iotsched.core.task_alerts import Alerts
from iotsched.core.task_fleet_safety import Abort, Rollout, Window
from iotsched.core.task_policies import Blocking, Misfire, Retention, Retry
from iotsched.core.task_sharding import NoSharding, Sharding
from iotsched.core.task_triggers import Trigger
from iotsched.core.value_types import TASK_ID_PATTERN, Aware, Frozen, Params, Tenant

#: The longest an instance may run: its deadline (the fire instant plus this, plus a rollout's
#: least time) must be an instant the scheduler computes with; 30 days outlast a weekly window's
#: wait.
MAX_INSTANCE_TIMEOUT_S = 30 * 86_400
#: The most firings `max_runs` may allow (a task firing every minute takes 1,900 years to).
MAX_RUNS = 1_000_000_000


class Priority(StrEnum):
    """Which shard queue an instance's messages go to: workers always have room for `high`
    and `normal` work however much `low` work waits (docs/design.md, section 12)."""

    HIGH = "high"
    NORMAL = "normal"
    LOW = "low"


class BusinessDateRule(StrEnum):
    """How an instance's business date follows from its slot, in the task's timezone."""

    PREVIOUS_DAY = (
        "previous_day"  # the day that just ended (a daily close at 00:05 reports yesterday)
    )
    SAME_DAY = "same_day"  # the local date of the slot


class TaskDefinition(Frozen):
    """One task as operators write it in a task file."""

    id: str = Field(pattern=TASK_ID_PATTERN)
    tenant: Tenant | None = None
    description: str = ""
    enabled: bool = True
    priority: Priority = Priority.NORMAL
    handler: str = Field(min_length=1)
    trigger: Trigger
    params: Params = Field(default_factory=dict)
    business_date: BusinessDateRule = BusinessDateRule.PREVIOUS_DAY
    sharding: Sharding = Field(default_factory=NoSharding)
    blocking: Blocking = Field(default_factory=Blocking)
    misfire: Misfire = Field(default_factory=Misfire)
    retry: Retry = Field(default_factory=Retry)
    timeout_s: int = Field(default=300, gt=0, le=900)
    instance_timeout_s: int = Field(default=3600, gt=0, le=MAX_INSTANCE_TIMEOUT_S)
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
    max_runs: int | None = Field(default=None, ge=1, le=MAX_RUNS)
    end_at: Aware | None = None

    @property
    def timezone(self) -> str:
        """The zone business dates are computed in."""
        return self.trigger.timezone
