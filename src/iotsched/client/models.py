"""The client's typed results: the management API's own request and response models.

They are the models the API validates its answers with (`iotsched.api.models`,
`audit_views`, `overview_views`) and the records they embed, so a field the API documents is a
field here. Views allow extra fields: a field a newer server adds is kept (`model_extra`).
"""

from __future__ import annotations

from iotsched.api.audit_views import AuditItem, RollbackResult, VersionItem
from iotsched.api.models import (
    AppliedTasks,
    AttemptEntry,
    AttemptLogView,
    BackfillResult,
    BackfillSlot,
    ErrorBody,
    InstanceView,
    LastInstance,
    LogSummary,
    Problem,
    RunOutcome,
    RunResult,
    ShardPage,
    ShardView,
    TaskChange,
    TaskDeleted,
    TaskDetail,
    TaskView,
    TenantItem,
)
from iotsched.api.overview_views import (
    DurationItem,
    FailingItem,
    HourItem,
    MissedItem,
    MissedRuns,
    OverviewView,
    QueueItem,
)
from iotsched.core.alert_message import Alert
from iotsched.core.calendars import Calendar
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
from iotsched.core.task_file import TaskFile

__all__ = [
    "Alert",
    "AppliedTasks",
    "AttemptEntry",
    "AttemptLogView",
    "AuditItem",
    "BackfillResult",
    "BackfillSlot",
    "Calendar",
    "DurationItem",
    "ErrorBody",
    "FailingItem",
    "HourItem",
    "InstanceStatus",
    "InstanceView",
    "LastInstance",
    "LogLine",
    "LogSummary",
    "MissedItem",
    "MissedRuns",
    "OverviewView",
    "Priority",
    "Problem",
    "QueueItem",
    "RollbackResult",
    "RunOutcome",
    "RunResult",
    "ShardPage",
    "ShardStatus",
    "ShardView",
    "TaskChange",
    "TaskDefinition",
    "TaskDeleted",
    "TaskDetail",
    "TaskFile",
    "TaskView",
    "TenantItem",
    "TriggerKind",
    "VersionItem",
]
