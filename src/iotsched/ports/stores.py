"""Former home of the store ports, now split by aggregate (tasks, instances, shards, start
limits, effects, ...): each name is re-exported from its new module until its importers
import it from there."""

from __future__ import annotations

from iotsched.ports.alert_state import (
    AlertStateStore,  # rehome: temporary re-export
    FailureCount,  # rehome: temporary re-export
)
from iotsched.ports.blocking import (
    BlockingStore,  # rehome: temporary re-export
    ClaimOutcome,  # rehome: temporary re-export
    ExclusiveClaim,  # rehome: temporary re-export
)
from iotsched.ports.clock import Clock  # rehome: temporary re-export
from iotsched.ports.effects import EffectConditionError  # rehome: temporary re-export
from iotsched.ports.instances import (
    MAX_CLAIM_GROUP,  # rehome: temporary re-export
    InstanceStore,  # rehome: temporary re-export
)
from iotsched.ports.messaging import (
    BucketTick,  # rehome: temporary re-export
    MessageTooLargeError,  # rehome: temporary re-export
)
from iotsched.ports.shards import (
    CompletionResult,  # rehome: temporary re-export
    CompletionVerdict,  # rehome: temporary re-export
    LeaseResult,  # rehome: temporary re-export
    ShardCompletion,  # rehome: temporary re-export
    StaleAttemptError,  # rehome: temporary re-export
)
from iotsched.ports.start_limits import StartVerdict  # rehome: temporary re-export
from iotsched.ports.store_errors import (
    StoreContendedError,  # rehome: temporary re-export
    WriteRejectedError,  # rehome: temporary re-export
)
from iotsched.ports.tasks import (
    TaskAdvance,  # rehome: temporary re-export
    TaskStore,  # rehome: temporary re-export
)
from iotsched.ports.ticks import TickLease  # rehome: temporary re-export

__all__ = [
    "MAX_CLAIM_GROUP",
    "AlertStateStore",
    "BlockingStore",
    "BucketTick",
    "ClaimOutcome",
    "Clock",
    "CompletionResult",
    "CompletionVerdict",
    "EffectConditionError",
    "ExclusiveClaim",
    "FailureCount",
    "InstanceStore",
    "LeaseResult",
    "MessageTooLargeError",
    "ShardCompletion",
    "StaleAttemptError",
    "StartVerdict",
    "StoreContendedError",
    "TaskAdvance",
    "TaskStore",
    "TickLease",
    "WriteRejectedError",
]
