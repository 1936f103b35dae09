"""DynamoDB adapter: `DynamoDBStore`, the TaskStore, InstanceStore and BlockingStore on one
table (tasks, instances, shard records, effect keys, alerts), one mixin per aggregate.

Every write is conditional or idempotent, so a retried request never applies twice; every
transactional write reads DynamoDB's answer one way (`transact_outcomes`): committed, a
condition failed on action i, retry later (`StoreContendedError`), or invalid
(`WriteRejectedError`). An item that expires gets its TTL (`expires_at`) from the write
that ends it (an instance's final status, a shard's final write) or, for effect keys and
alerts, from the write that makes it.

| module             | holds                                                                |
|--------------------|----------------------------------------------------------------------|
| `keys`             | key schema: prefixes, partition and key functions                    |
| `codec`            | items to records and back (typed attributes to plain values)         |
| `transactions`     | lost-response tokens, transaction packing                            |
| `transact_outcomes`| one reading of a TransactWriteItems outcome                          |
| `partition_reads`  | scatter-gather over buckets, BatchGetItem (unprocessed keys retried) |
| `batches`          | BatchGetItem and BatchWriteItem under one retry policy               |
| `base`             | `Table`: single conditional writes, transactions, the shared readers |
| `tasks`            | task definitions                                                     |
| `task_clock`       | the due index, pauses and clock moves                                |
| `calendars`        | named calendars and the dates resolved onto tasks                    |
| `tenants`          | a tenant's quotas and task count (`max_tasks`)                       |
| `audit`            | task versions and audit records (AuditLog)                           |
| `alertstate`       | the alert policy's state: threshold windows, a task failing          |
| `ticks`            | the fanned-out tick's bucket leases                                  |
| `instances`        | instance items, status moves, readers of instances                   |
| `followups`        | the sweeper's readers: open instances, owed follow-ups               |
| `counter`          | the remaining-shard counter, finalize, reduce                        |
| `claims`           | claims of instances, one by one or in batches                        |
| `blocking`         | the task's hold (BlockingStore)                                      |
| `shards`           | shard leases and readers                                             |
| `completions`      | shard completions and dead letters                                   |
| `effects`          | effect keys                                                          |
| `gates`            | shard-start gates: starts per minute, the fence of an instance       |
| `slots`            | a tenant's in-flight slots (`max_concurrent_shards`)                 |
| `alerts`           | the alert log (`DynamoDBAlertLog`, a class of its own)               |
| `devices`          | the Device Management System on its own table                        |
"""

from __future__ import annotations

from iotsched.adapters.dynamodb.alertstate import AlertStates
from iotsched.adapters.dynamodb.blocking import Blocking
from iotsched.adapters.dynamodb.completions import Completions
from iotsched.adapters.dynamodb.effects import Effects
from iotsched.adapters.dynamodb.followups import FollowUps
from iotsched.adapters.dynamodb.gates import Gates
from iotsched.adapters.dynamodb.slots import TenantSlots
from iotsched.adapters.dynamodb.ticks import TickLeases


class DynamoDBStore(
    Blocking, Completions, Effects, TickLeases, FollowUps, Gates, TenantSlots, AlertStates
):
    """TaskStore, InstanceStore and BlockingStore on one DynamoDB table (see the package
    docstring)."""
