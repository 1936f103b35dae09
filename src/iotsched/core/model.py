"""Moved: task definitions live in `task_definition`, `task_file` and their parts' modules."""

from __future__ import annotations

from iotsched.core.calendars import (
    CALENDAR_NAME_PATTERN as CALENDAR_NAME_PATTERN,  # rehome: temporary re-export
)
from iotsched.core.calendars import (
    MAX_CALENDAR_DATES as MAX_CALENDAR_DATES,  # rehome: temporary re-export
)
from iotsched.core.calendars import Calendar as Calendar  # rehome: temporary re-export
from iotsched.core.calendars import Exclude as Exclude  # rehome: temporary re-export
from iotsched.core.quotas import (
    MAX_CONCURRENT_SHARDS as MAX_CONCURRENT_SHARDS,  # rehome: temporary re-export
)
from iotsched.core.quotas import TenantQuotas as TenantQuotas  # rehome: temporary re-export
from iotsched.core.task_alerts import Alerts as Alerts  # rehome: temporary re-export
from iotsched.core.task_alerts import Silence as Silence  # rehome: temporary re-export
from iotsched.core.task_alerts import Threshold as Threshold  # rehome: temporary re-export
from iotsched.core.task_definition import (
    BusinessDateRule as BusinessDateRule,  # rehome: temporary re-export
)
from iotsched.core.task_definition import Priority as Priority  # rehome: temporary re-export
from iotsched.core.task_definition import (
    TaskDefinition as TaskDefinition,  # rehome: temporary re-export
)
from iotsched.core.task_file import TaskFile as TaskFile  # rehome: temporary re-export
from iotsched.core.task_file import TenantDefaults as TenantDefaults  # rehome: temporary re-export
from iotsched.core.task_file import (
    with_tenant_defaults as with_tenant_defaults,  # rehome: temporary re-export
)
from iotsched.core.task_fleet_safety import Abort as Abort  # rehome: temporary re-export
from iotsched.core.task_fleet_safety import Ramp as Ramp  # rehome: temporary re-export
from iotsched.core.task_fleet_safety import Rollout as Rollout  # rehome: temporary re-export
from iotsched.core.task_fleet_safety import Window as Window  # rehome: temporary re-export
from iotsched.core.task_policies import (
    DEFAULT_RETENTION_DAYS as DEFAULT_RETENTION_DAYS,  # rehome: temporary re-export
)
from iotsched.core.task_policies import (
    EFFECT_RETENTION_FLOOR_DAYS as EFFECT_RETENTION_FLOOR_DAYS,  # rehome: temporary re-export
)
from iotsched.core.task_policies import (
    MAX_RETENTION_DAYS as MAX_RETENTION_DAYS,  # rehome: temporary re-export
)
from iotsched.core.task_policies import Blocking as Blocking  # rehome: temporary re-export
from iotsched.core.task_policies import (
    BlockingPolicy as BlockingPolicy,  # rehome: temporary re-export
)
from iotsched.core.task_policies import Misfire as Misfire  # rehome: temporary re-export
from iotsched.core.task_policies import (
    MisfirePolicy as MisfirePolicy,  # rehome: temporary re-export
)
from iotsched.core.task_policies import Retention as Retention  # rehome: temporary re-export
from iotsched.core.task_policies import Retry as Retry  # rehome: temporary re-export
from iotsched.core.task_sharding import (
    CustomSharding as CustomSharding,  # rehome: temporary re-export
)
from iotsched.core.task_sharding import (
    GroupsSharding as GroupsSharding,  # rehome: temporary re-export
)
from iotsched.core.task_sharding import (
    IdRangeSharding as IdRangeSharding,  # rehome: temporary re-export
)
from iotsched.core.task_sharding import NoSharding as NoSharding  # rehome: temporary re-export
from iotsched.core.task_sharding import Sharding as Sharding  # rehome: temporary re-export
from iotsched.core.task_sharding import (
    ShardingStrategy as ShardingStrategy,  # rehome: temporary re-export
)
from iotsched.core.task_sharding import (
    StaticSharding as StaticSharding,  # rehome: temporary re-export
)
from iotsched.core.task_triggers import AfterTrigger as AfterTrigger  # rehome: temporary re-export
from iotsched.core.task_triggers import AtTrigger as AtTrigger  # rehome: temporary re-export
from iotsched.core.task_triggers import CronTrigger as CronTrigger  # rehome: temporary re-export
from iotsched.core.task_triggers import RateTrigger as RateTrigger  # rehome: temporary re-export
from iotsched.core.task_triggers import Trigger as Trigger  # rehome: temporary re-export
from iotsched.core.value_types import (
    TASK_ID_PATTERN as TASK_ID_PATTERN,  # rehome: temporary re-export
)
from iotsched.core.value_types import Aware as Aware  # rehome: temporary re-export
from iotsched.core.value_types import Cron as Cron  # rehome: temporary re-export
from iotsched.core.value_types import Duration as Duration  # rehome: temporary re-export
from iotsched.core.value_types import Frozen as Frozen  # rehome: temporary re-export
from iotsched.core.value_types import Zone as Zone  # rehome: temporary re-export
