"""Ports: what the use-cases need from the outside world, stated as guarantees.

Each port has an in-memory fake in `iotsched.adapters.memory` and an AWS adapter; the contract
suite in `tests/contract/` runs against both, so the fake cannot drift from DynamoDB's
conditional semantics.
"""

from __future__ import annotations

from iotsched.ports.audit import AuditLog, TaskConflictError
from iotsched.ports.devices import (
    Device,
    DeviceDirectory,
    DeviceGroup,
    DirectoryError,
    Tenant,
)
from iotsched.ports.messaging import (
    AlertEntry,
    AlertLog,
    AlertSink,
    DispatchQueue,
    Faults,
    NoFaults,
    QueueDepth,
    QueueGauge,
    ShardQueue,
)
from iotsched.ports.stores import (
    MAX_CLAIM_GROUP,
    AlertStateStore,
    BlockingStore,
    BucketTick,
    ClaimOutcome,
    Clock,
    CompletionResult,
    CompletionVerdict,
    EffectConditionError,
    ExclusiveClaim,
    FailureCount,
    InstanceStore,
    LeaseResult,
    MessageTooLargeError,
    ShardCompletion,
    StaleAttemptError,
    StartVerdict,
    StoreContendedError,
    TaskAdvance,
    TaskStore,
    TickLease,
    WriteRejectedError,
)
from iotsched.ports.tracing import Annotation, NoTracer, Span, Tracer

__all__ = [
    "MAX_CLAIM_GROUP",
    "AlertEntry",
    "AlertLog",
    "AlertSink",
    "AlertStateStore",
    "Annotation",
    "AuditLog",
    "BlockingStore",
    "BucketTick",
    "ClaimOutcome",
    "Clock",
    "CompletionResult",
    "CompletionVerdict",
    "Device",
    "DeviceDirectory",
    "DeviceGroup",
    "DirectoryError",
    "DispatchQueue",
    "EffectConditionError",
    "ExclusiveClaim",
    "FailureCount",
    "Faults",
    "InstanceStore",
    "LeaseResult",
    "MessageTooLargeError",
    "NoFaults",
    "NoTracer",
    "QueueDepth",
    "QueueGauge",
    "ShardCompletion",
    "ShardQueue",
    "Span",
    "StaleAttemptError",
    "StartVerdict",
    "StoreContendedError",
    "TaskAdvance",
    "TaskConflictError",
    "TaskStore",
    "Tenant",
    "TickLease",
    "Tracer",
    "WriteRejectedError",
]
