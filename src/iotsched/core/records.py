"""Moved: the records live in `task_record`, `instance_record`, `shard_record`,
`attempt_record`, `shard_message` and `alert_message`."""

from __future__ import annotations

from iotsched.core.alert_message import (
    ALERT_ATTRIBUTES as ALERT_ATTRIBUTES,  # rehome: temporary re-export
)
from iotsched.core.alert_message import (
    MAX_ALERT_INSTANCES as MAX_ALERT_INSTANCES,  # rehome: temporary re-export
)
from iotsched.core.alert_message import (
    MAX_ALERT_SLOTS as MAX_ALERT_SLOTS,  # rehome: temporary re-export
)
from iotsched.core.alert_message import Alert as Alert  # rehome: temporary re-export
from iotsched.core.attempt_record import LISTED_KEYS as LISTED_KEYS  # rehome: temporary re-export
from iotsched.core.attempt_record import LOST_ERROR as LOST_ERROR  # rehome: temporary re-export
from iotsched.core.attempt_record import Attempt as Attempt  # rehome: temporary re-export
from iotsched.core.attempt_record import (
    AttemptOutcome as AttemptOutcome,  # rehome: temporary re-export
)
from iotsched.core.instance_record import (
    FINAL_INSTANCE as FINAL_INSTANCE,  # rehome: temporary re-export
)
from iotsched.core.instance_record import (
    FOLLOW_UP_ORDER as FOLLOW_UP_ORDER,  # rehome: temporary re-export
)
from iotsched.core.instance_record import (
    MAX_LISTED_COVERS as MAX_LISTED_COVERS,  # rehome: temporary re-export
)
from iotsched.core.instance_record import FollowUp as FollowUp  # rehome: temporary re-export
from iotsched.core.instance_record import (
    InstanceRecord as InstanceRecord,  # rehome: temporary re-export
)
from iotsched.core.instance_record import (
    InstanceStatus as InstanceStatus,  # rehome: temporary re-export
)
from iotsched.core.instance_record import TriggerKind as TriggerKind  # rehome: temporary re-export
from iotsched.core.instance_record import (
    instance_id_for as instance_id_for,  # rehome: temporary re-export
)
from iotsched.core.instance_record import listing_key as listing_key  # rehome: temporary re-export
from iotsched.core.shard_message import ShardMessage as ShardMessage  # rehome: temporary re-export
from iotsched.core.shard_message import with_trace as with_trace  # rehome: temporary re-export
from iotsched.core.shard_record import FINAL_SHARD as FINAL_SHARD  # rehome: temporary re-export
from iotsched.core.shard_record import ShardRecord as ShardRecord  # rehome: temporary re-export
from iotsched.core.shard_record import ShardStatus as ShardStatus  # rehome: temporary re-export
from iotsched.core.task_record import (
    MAX_NOTE_CHARS as MAX_NOTE_CHARS,  # rehome: temporary re-export
)
from iotsched.core.task_record import TaskRecord as TaskRecord  # rehome: temporary re-export
