"""In-memory fakes of every port, for unit tests and the contract suite.

They enforce the same conditions as the DynamoDB/SQS/SNS adapters (the contract tests run one
suite on both) and record what tests need to see: sent messages and published alerts.

One module per part: `tasks` (the task store), `instances` and `shards` (the instance store,
its records and its shards), `store` (the stores as the ports see them, and MemoryStore with
the task's hold), `queues` (the queues and the alert sink).
"""

from __future__ import annotations

from iotsched.adapters.memory.instances import FaultHook
from iotsched.adapters.memory.queues import (
    MAX_MESSAGE_BYTES,
    MemoryAlertSink,
    MemoryDispatchQueue,
    MemoryQueueGauge,
    MemoryShardQueue,
)
from iotsched.adapters.memory.store import MemoryInstanceStore, MemoryStore
from iotsched.adapters.memory.tasks import MemoryTaskStore

__all__ = [
    "MAX_MESSAGE_BYTES",
    "FaultHook",
    "MemoryAlertSink",
    "MemoryDispatchQueue",
    "MemoryInstanceStore",
    "MemoryQueueGauge",
    "MemoryShardQueue",
    "MemoryStore",
    "MemoryTaskStore",
]
