"""DynamoDB adapter: one table holds tasks, instances, shard records, effect keys and alerts.

The key schema, the indexes and their partitions are in `keys`. The adapter is one public
class, `DynamoDBStore`, composed of one mixin per aggregate, each in its own module:

| module        | holds                                                                  |
|---------------|------------------------------------------------------------------------|
| `keys`        | key schema: prefixes, partition and key functions                      |
| `codec`       | items to records and back (typed attributes to plain values)           |
| `transactions`| lost-response tokens, transaction packing                              |
| `gather`      | scatter-gather over buckets, BatchGetItem (unprocessed keys retried)   |
| `base`        | `Table`: single conditional writes, transactions, the shared readers   |
| `tasks`       | task items (TaskStore)                                                 |
| `instances`   | instance items, status moves, readers of instances                     |
| `followups`   | the sweeper's readers: open instances, owed follow-ups                 |
| `counter`     | the remaining-shard counter, finalize, reduce                          |
| `claims`      | claims of instances, one by one or in batches                          |
| `blocking`    | the task's hold (BlockingStore)                                        |
| `ticks`       | the fanned-out tick's bucket leases                                    |
| `shards`      | shard leases and readers                                               |
| `completions` | shard completions and dead letters                                     |
| `effects`     | effect keys                                                            |
| `gates`       | shard-start gates: starts per minute, the fence of an instance         |
| `slots`       | a tenant's in-flight slots (`max_concurrent_shards`)                   |
| `audit`       | task versions and audit records (AuditLog)                             |
| `alerts`      | the alert log (`DynamoDBAlertLog`, a class of its own)                 |
| `alertstate`  | the alert policy's state: threshold windows, a task failing            |

Why mixins rather than delegation: the aggregates share one table, one client and one set
of write helpers, and several operations span aggregates in one transaction (a claim writes
the instance, its counter and its task; a completion writes a shard and the counter). As
mixins over the shared `Table` base they call each other as plain methods, each part
inheriting the ones it builds on (so mypy checks every call across parts), and the store
stays the one object the ports see; delegation would thread each part through the others.

Retention: `expires_at` (the table's TTL attribute, epoch seconds) is written by the write that
ends an item: an instance's final status (from the `retention_s` its claim stored), a shard's
final or dead-letter write, an effect key's claim, an alert's record.

Every transactional write reads DynamoDB's answer with `transact.classify` (see
iotsched.adapters.dynamodb.transact_outcomes): committed, a condition failed on action i, retry, or invalid.
"""

from __future__ import annotations

from iotsched.adapters.dynamodb.alertstate import AlertStates
from iotsched.adapters.dynamodb.blocking import Blocking
from iotsched.adapters.dynamodb.codec import _TASK_RECORD_FIELDS, DAY_S
from iotsched.adapters.dynamodb.completions import Completions
from iotsched.adapters.dynamodb.effects import Effects
from iotsched.adapters.dynamodb.followups import FollowUps
from iotsched.adapters.dynamodb.gates import Gates
from iotsched.adapters.dynamodb.keys import (
    COUNTER_SK,
    DUE_PARTITION,
    LEASE_PREFIX,
    LEGACY_DUE_BUCKET,
    LEGACY_OWED_SHARDS,
    OPEN_PREFIX,
    OWED_PREFIX,
    STATUS_PREFIX,
    SUBMISSION_PARTITION,
    TASKS_PREFIX,
    due_partition,
    owed_partition,
    owed_partitions,
    submission_partition,
)
from iotsched.adapters.dynamodb.partition_reads import (
    BATCH_GET_KEYS,
    GATHER_THREADS,
    batch_get,
    gather_page,
)
from iotsched.adapters.dynamodb.slots import TenantSlots
from iotsched.adapters.dynamodb.ticks import TickLeases
from iotsched.adapters.dynamodb.transactions import (
    TRANSACTION_ACTIONS,
    TRANSACTION_BYTES,
    TRANSACTION_ROUNDS,
)

__all__ = [
    "BATCH_GET_KEYS",
    "COUNTER_SK",
    "DAY_S",
    "DUE_PARTITION",
    "GATHER_THREADS",
    "LEASE_PREFIX",
    "LEGACY_DUE_BUCKET",
    "LEGACY_OWED_SHARDS",
    "OPEN_PREFIX",
    "OWED_PREFIX",
    "STATUS_PREFIX",
    "SUBMISSION_PARTITION",
    "TASKS_PREFIX",
    "TRANSACTION_ACTIONS",
    "TRANSACTION_BYTES",
    "TRANSACTION_ROUNDS",
    "_TASK_RECORD_FIELDS",
    "DynamoDBStore",
    "batch_get",
    "due_partition",
    "gather_page",
    "owed_partition",
    "owed_partitions",
    "submission_partition",
]


class DynamoDBStore(
    Blocking, Completions, Effects, TickLeases, FollowUps, Gates, TenantSlots, AlertStates
):
    """TaskStore, InstanceStore and BlockingStore on one DynamoDB table (see the package
    docstring)."""
