"""DynamoDB adapter: one table holds tasks, instances, shard records, effect keys and alerts.

Key schema (`pk`, `sk`), and the sparse indexes the ops questions use (the README's "Ops on the
records" has the same table):

| item     | pk                   | sk                       | index keys |
|----------|----------------------|--------------------------|------------|
| task     | `TASK#<task>`        | `DEF`                    | by_due: `due_pk=DUE#<k>`, `due_sk=<next fire>#<task>` (fireable tasks only); by_date (keys only): `date_pk=TASKS#<k>`, `sk` (the task list) |
| instance | `TASK#<task>`        | `INST#<slot>[~<suffix>]` | by_status: `status_pk=STATUS#<status>#<k>`, `status_sk=<slot>#<id>`; by_deadline: `open_pk=OPEN#<k>`, `open_sk=<deadline>#<id>` (open only); once final with follow-ups owed (`owed`, a string set) `open_pk=OWED#<k>`, `open_sk=<finished at>#<id>`; by_date (keys only): `date_pk=<task>#<business date>`, `sk`; while `scheduled` (submitted) by_due: `due_pk=SUBMITTED#<k>`, `due_sk=<fire at>#<id>` |
| counter  | `INST#<instance id>` | `COUNT`                  | - (`remaining`, `failed_shards`: the instance's counter) |
| shard    | `INST#<instance id>` | `SHARD#<000042>`         | by_deadline: `open_pk=LEASE#<k>`, `open_sk=<lease end>#<instance id>#<000042>` (running, from the attempt's first renewal on, or its take: see `_lease_pk`) |
| effect   | `EFFECT#<key>`       | `EFFECT`                 | - (names `instance_id`, `idx`, `attempt`) |
| alert    | `ALERT#<alert id>`   | `ALERT`                  | by_status: `status_pk=ALERTS#<day raised>#<k>`, `status_sk=<raised at>#<id>`; by_deadline: `open_pk=OWED#<k>`, `open_sk=<raised at>#ALERT#<id>` (until published) |
| tick lease | `TICK#<k>`         | `LEASE`                  | - (a bucket dispatcher's lease: `owner`, `until_ms`, `minute_ms`, `done_ms`) |

`<k>` in `DUE#<k>` and `SUBMITTED#<k>` is the bucket of the task id (of the instance id for a
submission) over the store's bucket count (`iotsched.core.buckets`): one bucket dispatcher
reads one bucket. Items a deployment wrote under the former constant keys (`DUE`,
`SUBMITTED`) are still read, by bucket 0's dispatcher (and by every all-bucket read), and move
to their bucket's key at their next write (a clock advance, a re-apply, a pause).

`<k>` is the bucket of the item's own id over the deployment's bucket count (the store's
`buckets`; see iotsched.core.buckets): `_open_pk`, `_status_pk`, `_tasks_pk`, `owed_partition`.
Readers query every bucket and merge in the index's order (`_gather`); owing items are also
read from the four fixed partitions `OWED#0`..`OWED#3` of earlier versions. Alert items are
written by `iotsched.adapters.alerting`.

Retention: `expires_at` (the table's TTL attribute, epoch seconds) is written by the write that
ends an item: an instance's final status (from the `retention_s` its claim stored), a shard's
final or dead-letter write, an effect key's claim, an alert's record.

The counter. An instance's remaining-shard counter and failed count are an item of their own,
beside its shard records, carrying no index key: a completion (one shard, a worker batch, a
dead letter) writes its shard records and this ~60-byte item in one transaction, 2 write units
for the counter whatever the instance's size, and no index entry. The instance item (its body
with the shard plan, its index entries) is written per instance only: the claim, the status
moves, the follow-ups; its `planned` is the counter's first value, never rewritten. The claim
creates the counter with the instance (in the claim's transaction, or a plain conditional put
after a single put: a transaction would double both items' write units). start_reduce is a
transaction of the move to reducing and the counter's update from zero to one (marking it the
reduce's); finalize_instance reads the counter (at zero) and writes the instance item once,
conditioned on the status that phase allows (see there). A counter write refused for want of
the item (the claimer died between its puts; an instance written by the previous version,
whose counter is on the instance item) makes it from the instance item, exactly
(`_ensure_counter`).

Index projections: by_status keys only, by_deadline keys and `kind`, by_date keys only, by_due
the attributes the tick reads of a task (INCLUDE): a status change writes key-sized entries,
and an update that changes no projected attribute writes no index at all. Readers of whole
items after a keys-only query read them by key (`batch_get`: BatchGetItem, unprocessed keys
sent again); an instance is always read with its counter.

Every transactional write reads DynamoDB's answer with `transact.classify` (see
iotsched.adapters.transact): committed, a condition failed on action i, retry, or invalid.

Instances of a task by time are one Query on the task's partition. Instance ids are
`<task>@<slot>[~<suffix>]` (a rerun, a request id, ...), so an id names its item without an index.
"""

from __future__ import annotations

import dataclasses
import heapq
import json
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, date, datetime
from decimal import Decimal
from itertools import islice
from typing import TYPE_CHECKING, Any, TypeVar, cast

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.exceptions import ClientError

from iotsched.adapters import transact
from iotsched.adapters.transact import Kind, Outcome
from iotsched.core.buckets import DEFAULT_BUCKETS, partition, partitions
from iotsched.core.model import DEFAULT_RETENTION_DAYS, AfterTrigger, TaskDefinition
from iotsched.core.records import (
    FINAL_INSTANCE,
    Attempt,
    FollowUp,
    InstanceRecord,
    InstanceStatus,
    ShardRecord,
    ShardStatus,
    TaskRecord,
    listing_key,
)
from iotsched.core.timeutil import from_ms, iso, parse_iso, slot_text, to_ms
from iotsched.ports import (
    MAX_CLAIM_GROUP,
    ClaimOutcome,
    CompletionResult,
    CompletionVerdict,
    EffectConditionError,
    ExclusiveClaim,
    LeaseResult,
    ShardCompletion,
    StaleAttemptError,
    StoreContendedError,
    TaskAdvance,
    TickLease,
    WriteRejectedError,
)

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

#: The due keys' prefixes: `DUE#<k>`, `SUBMITTED#<k>` (see the module docstring). The bare
#: prefixes are the keys a deployment before the buckets wrote; they are still read.
DUE_PARTITION = "DUE"
#: Running shards' leases sit in `by_deadline` under `LEASE#<k>` (k a hash of the instance id
#: and shard index over the store's buckets: `iotsched.core.buckets`); earlier versions wrote
#: them under the one `LEASE` partition, which the sweeper still reads.
LEASE_PREFIX = "LEASE"
SUBMISSION_PARTITION = "SUBMITTED"
#: Open instances sit in `by_deadline` under `OPEN#<k>` (k the bucket of the instance id, see
#: iotsched.core.buckets); the sweeper reads every bucket, merged in deadline order.
OPEN_PREFIX = "OPEN"
#: Instances by status (`by_status`, `STATUS#<status>#<k>`), newest slot first when read.
STATUS_PREFIX = "STATUS"
#: Task items in `by_date` (`date_pk=TASKS#<k>`, keys only): tasks are listed without a table
#: scan. (Task ids are lower case: no `<task>#<date>` of an instance is ever `TASKS#<k>`.)
TASKS_PREFIX = "TASKS"
#: The bucket whose dispatcher also reads the former constant due keys.
LEGACY_DUE_BUCKET = 0
#: Final instances with follow-ups owed, and alerts recorded but not yet published, sit in the
#: `by_deadline` index under `OWED#<k>` (k the bucket of the item's id) until what they owe is
#: done; the sweeper reads every bucket.
OWED_PREFIX = "OWED"
#: Owing items were once spread over 4 fixed partitions (`OWED#0`..`OWED#3`): readers keep
#: reading those, whatever the bucket count, so that nothing written then is left owing.
LEGACY_OWED_SHARDS = 4
#: Concurrent queries of one scatter-gather read (one per bucket).
GATHER_THREADS = 16
DAY_S = 86_400
_INSTANCE_TOP_LEVEL = ("status", "reason", "finished_at")
#: The counter item's sort key, in the instance's shard partition (`INST#<instance id>`): its
#: writers are the completions of those shards; under the task's partition (`TASK#<task>`)
#: every instance of a task would share one partition key's throughput, and the task's
#: instance listing (and the README's query of it) would meet counters among instances.
COUNTER_SK = "COUNT"
#: Keys per BatchGetItem request, and the rounds its unprocessed keys are sent again.
BATCH_GET_KEYS = 100
BATCH_GET_ROUNDS = 8

#: The task item's attributes `DynamoDBStore._task_from` reads (the due query asks for these).
_TASK_RECORD_FIELDS = (
    "definition",
    "version",
    "next_fire",
    "last_slot",
    "paused",
    "updated_at",
    "active",
    "queue",
)
_TASK_PROJECTION_NAMES = {f"#p{n}": name for n, name in enumerate(_TASK_RECORD_FIELDS)}
_TASK_PROJECTION = ", ".join(_TASK_PROJECTION_NAMES)

_T = TypeVar("_T")
_ser = TypeSerializer()
_deser = TypeDeserializer()


def _to_item(values: dict[str, Any]) -> dict[str, Any]:
    return {k: _ser.serialize(v) for k, v in values.items() if v is not None}


def _from_item(item: dict[str, Any]) -> dict[str, Any]:
    return {k: _plain(_deser.deserialize(v)) for k, v in item.items()}


def _plain(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _conditional_failure(exc: ClientError) -> bool:
    return exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException"


# Lost responses. botocore retries a request whose response was lost (a 5xx, a read timeout);
# if the first try had landed, the retry fails its own condition. Every conditional update
# therefore stamps the item with a token chosen before the call, and asks for the item back on
# failure: a failure that shows our own token is our write having landed, not a lost race.
#   try 1: UpdateItem(SET ..., write_token = T) ── lands, response lost
#   try 2: same request ── ConditionalCheckFailed + ALL_OLD(write_token = T) ──► success
def _token() -> str:
    return uuid.uuid4().hex


def _with_token(expression: str) -> str:
    if expression.startswith("SET "):
        return "SET write_token = :wtok, " + expression[4:]
    return "SET write_token = :wtok " + expression


def _rejected(outcome: Outcome, what: str) -> Exception:
    """The error for an INVALID outcome. A request DynamoDB refused as a whole keeps its own
    ClientError (callers read a ValidationException about size as "too large to store"); a
    cancellation's reasons become WriteRejectedError."""
    if not outcome.reasons and isinstance(outcome.cause, ClientError):
        return outcome.cause
    return WriteRejectedError(f"{what}: {outcome.describe()}")


def _leasable(shard: ShardRecord, *, now: datetime, max_attempts: int) -> bool:
    """Whether the lease update's condition holds for this shard record (read just before)."""
    if shard.attempt >= max_attempts:
        return False
    if shard.status is ShardStatus.PENDING:
        return True
    return (
        shard.status is ShardStatus.RUNNING
        and shard.lease_until is not None
        and to_ms(shard.lease_until) <= to_ms(now)
    )


def _landed(exc: ClientError, token: str) -> bool:
    old: Any = exc.response.get("Item") or {}
    return bool(old.get("write_token", {}).get("S") == token)


def owed_partition(item_id: str, buckets: int = DEFAULT_BUCKETS) -> str:
    """The `by_deadline` partition an owing item sits in (stable for the id)."""
    return partition(OWED_PREFIX, item_id, buckets)


def owed_partitions(buckets: int) -> list[str]:
    """Every owing partition a reader queries: the buckets, and at least the 4 legacy ones."""
    return partitions(OWED_PREFIX, max(buckets, LEGACY_OWED_SHARDS))


def _open_pk(instance_id: str, buckets: int) -> str:
    """The `by_deadline` partition of an open instance."""
    return partition(OPEN_PREFIX, instance_id, buckets)


def _status_pk(status: InstanceStatus, instance_id: str, buckets: int) -> str:
    """The `by_status` partition of an instance in `status`."""
    return partition(f"{STATUS_PREFIX}#{status.value}", instance_id, buckets)


def _item_id(item: Mapping[str, Any]) -> str | None:
    value = item.get("instance_id", {}).get("S")
    return str(value) if value is not None else None


def gather_page(limit: int, buckets: int) -> int:
    """The page size of each bucket's query in a scatter-gather read of `limit` items."""
    return min(limit, max(10, 2 * -(-limit // max(buckets, 1))))


def _epoch_s(at: datetime) -> int:
    """`expires_at`, the table's TTL attribute: epoch seconds."""
    return int(at.timestamp())


def _tasks_pk(task_id: str, buckets: int) -> str:
    """The `by_date` partition of a task item (the task list's sparse index entry)."""
    return partition(TASKS_PREFIX, task_id, buckets)


def _task_key(task_id: str) -> dict[str, Any]:
    return {"pk": {"S": f"TASK#{task_id}"}, "sk": {"S": "DEF"}}


def _instance_key(instance_id: str) -> dict[str, Any]:
    task_id, _, slot = instance_id.rpartition("@")
    if not task_id or not slot:
        raise KeyError(f"not an instance id: {instance_id!r}")
    return {"pk": {"S": f"TASK#{task_id}"}, "sk": {"S": f"INST#{slot}"}}


def _date_pk(task_id: str, day: date) -> str:
    """The by_date partition of a task's instances for one business date."""
    return f"{task_id}#{day.isoformat()}"


def _lease_sk(instance_id: str, index: int, lease_until: datetime) -> str:
    return f"{iso(lease_until)}#{instance_id}#{index:06d}"


# The lease index is lazy. A lease enters `by_deadline` with its attempt's first renewal (or
# any later move of its end), never with the take: most shards end within one renewal period
# and so never write the index (an entry costs a put on entering and a delete on leaving, and
# a delete plus a put each time its end moves). Until then the attempt's worker is covered by
# its message: the worker holds every record of its invocation on a visibility of one lease
# (services.work.VisibilityHold), so a worker that dies before its first renewal has its
# record back within a lease; the delivery that finds the lease still live indexes it (a
# move of its end to the same end), and the sweeper takes it from there. A lease shorter than
# that hold (a short timeout_s) is indexed with its take (`take_lease(indexed=True)`).
def _lease_pk(instance_id: str, index: int, buckets: int) -> str:
    return partition(LEASE_PREFIX, f"{instance_id}#{index:06d}", buckets)


def _shard_key(instance_id: str, index: int) -> dict[str, Any]:
    return {"pk": {"S": f"INST#{instance_id}"}, "sk": {"S": f"SHARD#{index:06d}"}}


def _counter_key(instance_id: str) -> dict[str, Any]:
    return {"pk": {"S": f"INST#{instance_id}"}, "sk": {"S": COUNTER_SK}}


def _counter_item(instance_id: str, remaining: int, failed: int) -> dict[str, Any]:
    """An instance's counter item. It carries no index key: a decrement writes this small
    item alone, never an index entry."""
    return {
        **_counter_key(instance_id),
        "kind": {"S": "counter"},
        "remaining": {"N": str(remaining)},
        "failed_shards": {"N": str(failed)},
    }


def _key_of(key: Mapping[str, Any]) -> tuple[str, str]:
    return (key["pk"]["S"], key["sk"]["S"])


#: TransactWriteItems limits: 100 actions, 4 MB in all (a margin for the request's own fields).
TRANSACTION_ACTIONS = 100
TRANSACTION_BYTES = 3_500_000
#: Rounds of `_write_groups` before contended groups are given up (False: one by one).
TRANSACTION_ROUNDS = 5


def _action_key(action: Mapping[str, Any]) -> str:
    """The item an action touches (a transaction may touch each item once)."""
    ((kind, body),) = action.items()
    key = body["Item"] if kind == "Put" else body["Key"]
    return f"{key['pk']['S']}\n{key['sk']['S']}"


def _pack(pending: list[int], groups: list[list[Any]]) -> Iterator[list[int]]:
    """Cut the pending groups into transactions: at most 100 actions and ~3.5 MB each, no item
    twice in one (a group that would touch an item already in the transaction starts the next);
    a group never split. Groups are at most 100 actions (callers drop larger ones)."""
    chunk: list[int] = []
    actions = size = 0
    keys: set[str] = set()
    for n in pending:
        group_keys = [_action_key(a) for a in groups[n]]
        group_size = sum(len(json.dumps(a, separators=(",", ":"))) for a in groups[n])
        if chunk and (
            actions + len(groups[n]) > TRANSACTION_ACTIONS
            or size + group_size > TRANSACTION_BYTES
            or not keys.isdisjoint(group_keys)
        ):
            yield chunk
            chunk, actions, size, keys = [], 0, 0, set()
        chunk.append(n)
        actions += len(groups[n])
        size += group_size
        keys.update(group_keys)
    if chunk:
        yield chunk


def batch_get(
    client: DynamoDBClient,
    table: str,
    keys: Sequence[Mapping[str, Any]],
    *,
    consistent: bool = True,
) -> dict[tuple[str, str], Any]:
    """The items of `keys` that exist, by (pk, sk): BatchGetItem requests of 100 keys
    (strongly consistent unless not `consistent`: half the read units, for the sweeper, whose
    every write is conditional); unprocessed keys (throttling, the 16 MB response limit) are
    sent again with backoff, a few rounds, then StoreContendedError. For readers of a
    keys-only index."""
    found: dict[tuple[str, str], Any] = {}
    unique = list({_key_of(k): k for k in keys}.values())
    for first in range(0, len(unique), BATCH_GET_KEYS):
        pending: list[Any] = unique[first : first + BATCH_GET_KEYS]
        for round_ in range(BATCH_GET_ROUNDS):
            answer: Any = client.batch_get_item(
                RequestItems={table: {"Keys": pending, "ConsistentRead": consistent}}
            )
            for item in answer.get("Responses", {}).get(table, []):
                found[_key_of(item)] = item
            pending = list(answer.get("UnprocessedKeys", {}).get(table, {}).get("Keys", []))
            if not pending:
                break
            if round_ + 1 == BATCH_GET_ROUNDS:
                raise StoreContendedError(
                    f"read of {len(pending)} items: unprocessed after {BATCH_GET_ROUNDS} tries"
                )
            time.sleep(transact.backoff_s(round_))
    return found


def due_partition(task_id: str, buckets: int) -> str:
    """A task's due key: `DUE#<k>`, k its bucket."""
    return partition(DUE_PARTITION, task_id, buckets)


def submission_partition(instance_id: str, buckets: int) -> str:
    """A submitted instance's due key: `SUBMITTED#<k>`, k the bucket of its id."""
    return partition(SUBMISSION_PARTITION, instance_id, buckets)


def _advance(
    task_id: str,
    *,
    expected_next_fire: datetime | None,
    next_fire: datetime | None,
    last_slot: datetime | None,
    buckets: int,
) -> tuple[str, str, dict[str, str], dict[str, Any]]:
    """A task's clock move: (update expression, condition, names, values)."""
    names = {"#nf": "next_fire"}
    values: dict[str, Any] = {}
    sets = []
    removes = []
    if expected_next_fire is None:
        condition = "attribute_exists(pk) AND attribute_not_exists(#nf)"
    else:
        condition = "#nf = :expected"
        values[":expected"] = {"S": iso(expected_next_fire)}
    if next_fire is None:
        removes += ["#nf", "due_pk", "due_sk"]
    else:
        # due_pk is set again in case the task had no next fire time (an `at` task moved,
        # a re-applied trigger); due_tasks filters paused tasks out.
        sets += ["#nf = :nf", "due_pk = :due_pk", "due_sk = :due_sk"]
        values[":nf"] = {"S": iso(next_fire)}
        values[":due_pk"] = {"S": due_partition(task_id, buckets)}
        values[":due_sk"] = {"S": f"{slot_text(next_fire)}#{task_id}"}
    if last_slot is not None:
        sets.append("last_slot = :ls")
        values[":ls"] = {"S": iso(last_slot)}
    # A task stored by a version without the task list's key gets it at its next fire (the
    # same value afterwards: no index write).
    sets.append("date_pk = if_not_exists(date_pk, :tasks_pk)")
    values[":tasks_pk"] = {"S": _tasks_pk(task_id, buckets)}
    expression = ""
    if sets:
        expression += "SET " + ", ".join(sets)
    if removes:
        expression += " REMOVE " + ", ".join(removes)
    return expression.strip(), condition, names, values


def _status_change(
    instance_id: str,
    status: InstanceStatus,
    *,
    reason: str | None = None,
    finished_at: datetime | None = None,
    owed: Sequence[FollowUp] = (),
    buckets: int = DEFAULT_BUCKETS,
) -> tuple[dict[str, Any], str, dict[str, Any]]:
    """An instance's move to `status`, its index keys with it: (key, expression, values).

    A final status with follow-ups `owed` records them in the same write, and moves the item
    from the open partition to an owing one (see `OWED_PREFIX`) rather than out of the index.
    """
    key = _instance_key(instance_id)
    slot = key["sk"]["S"].removeprefix("INST#")
    sets = ["#st = :status", "status_pk = :status_pk", "status_sk = :status_sk"]
    values: dict[str, Any] = {
        ":status": {"S": status.value},
        ":status_pk": {"S": _status_pk(status, instance_id, buckets)},
        ":status_sk": {"S": f"{slot}#{instance_id}"},
    }
    if reason is not None:
        sets.append("reason = :reason")
        values[":reason"] = {"S": reason}
    if finished_at is not None:
        sets.append("finished_at = :fin")
        values[":fin"] = {"S": iso(finished_at)}
        if status in FINAL_INSTANCE:
            # The TTL, in the write that ends it: its retention (stored at the claim) after its
            # end; an item claimed before retention existed takes the default.
            sets.append("expires_at = if_not_exists(retention_s, :default_retention) + :fin_s")
            values[":default_retention"] = {"N": str(DEFAULT_RETENTION_DAYS * DAY_S)}
            values[":fin_s"] = {"N": str(_epoch_s(finished_at))}
    owing = bool(owed) and status in FINAL_INSTANCE
    if owing:
        sets += ["owed = :owed", "open_pk = :owed_pk", "open_sk = :owed_sk"]
        values[":owed"] = {"SS": sorted(step.value for step in owed)}
        values[":owed_pk"] = {"S": owed_partition(instance_id, buckets)}
        values[":owed_sk"] = {"S": f"{iso(finished_at) if finished_at else ''}#{instance_id}"}
    expression = "SET " + ", ".join(sets)
    # A submission leaves the due index once it starts; a final instance leaves the open one.
    removes = [] if status is InstanceStatus.SCHEDULED else ["due_pk", "due_sk"]
    if status in FINAL_INSTANCE and not owing:
        removes += ["open_pk", "open_sk"]
    if removes:
        expression += " REMOVE " + ", ".join(removes)
    return key, expression, values


class DynamoDBStore:
    """TaskStore and InstanceStore on one DynamoDB table (see the module docstring)."""

    def __init__(
        self, client: DynamoDBClient, table: str, *, buckets: int = DEFAULT_BUCKETS
    ) -> None:
        self._ddb = client
        self._table = table
        self._buckets = buckets  # write-sharded index partitions (iotsched.core.buckets)

    # -- tasks ------------------------------------------------------------------------------

    def _task_item(self, task: TaskRecord) -> dict[str, Any]:
        values: dict[str, Any] = {
            "pk": f"TASK#{task.task_id}",
            "sk": "DEF",
            "kind": "task",
            "task_id": task.task_id,
            "definition": task.definition.model_dump_json(),
            "version": task.version,
            "enabled": task.definition.enabled,
            "next_fire": iso(task.next_fire) if task.next_fire else None,
            "last_slot": iso(task.last_slot) if task.last_slot else None,
            "updated_at": iso(task.updated_at),
            "paused": task.paused,
            # the task list's entry (by_date, keys only): written with the item, never moved
            "date_pk": _tasks_pk(task.task_id, self._buckets),
        }
        if task.fires and task.next_fire is not None:
            values["due_pk"] = due_partition(task.task_id, self._buckets)
            values["due_sk"] = f"{slot_text(task.next_fire)}#{task.task_id}"
        return _to_item(values)

    @staticmethod
    def _task_from(item: dict[str, Any]) -> TaskRecord:
        # Reads `_TASK_RECORD_FIELDS` only: the due query projects the items onto them.
        v = _from_item(item)
        return TaskRecord(
            definition=TaskDefinition.model_validate_json(v["definition"]),
            version=v["version"],
            next_fire=parse_iso(v["next_fire"]) if v.get("next_fire") else None,
            last_slot=parse_iso(v["last_slot"]) if v.get("last_slot") else None,
            paused=bool(v.get("paused", False)),
            updated_at=parse_iso(v["updated_at"]),
            active=v.get("active"),
            queue=list(v.get("queue", [])),
        )

    def put_tasks(self, tasks: Sequence[TaskRecord]) -> None:
        # Updates, not puts: the blocking hold (`active`, `queue`) belongs to the dispatcher
        # and must survive a re-apply of the task file.
        writes: list[Any] = [{"Update": self._task_update(t)} for t in tasks]
        # Dependency edges (`CHILDREN#<parent>` / `<child>`), so that an ending instance finds
        # its dependents with one Query. Stale edges are harmless: readers re-check the child.
        writes += [
            {
                "Put": {
                    "TableName": self._table,
                    "Item": _to_item({"pk": f"CHILDREN#{parent}", "sk": t.task_id, "kind": "edge"}),
                }
            }
            for t in tasks
            if isinstance(t.definition.trigger, AfterTrigger)
            for parent in t.definition.trigger.after
        ]
        for start in range(0, len(writes), 100):
            chunk = writes[start : start + 100]
            outcome = self._transaction(chunk, what="tasks")
            if outcome.kind is not Kind.COMMITTED:
                raise _rejected(outcome, "tasks not written")

    def children_of(self, task_id: str) -> list[str]:
        return sorted(
            _from_item(item)["sk"]
            for item in self._paginate(
                "query",
                TableName=self._table,
                KeyConditionExpression="pk = :pk",
                ExpressionAttributeValues={":pk": {"S": f"CHILDREN#{task_id}"}},
            )
        )

    def _task_update(self, task: TaskRecord) -> Any:
        item = self._task_item(task)
        settable = {k: v for k, v in item.items() if k not in ("pk", "sk")}
        names = {f"#a{n}": k for n, k in enumerate(settable)}
        values = {f":v{n}": v for n, v in enumerate(settable.values())}
        expression = "SET " + ", ".join(f"#a{n} = :v{n}" for n in range(len(settable)))
        absent = [k for k in ("next_fire", "last_slot", "due_pk", "due_sk") if k not in item]
        if absent:
            names.update({f"#r{n}": k for n, k in enumerate(absent)})
            expression += " REMOVE " + ", ".join(f"#r{n}" for n in range(len(absent)))
        return {
            "TableName": self._table,
            "Key": _task_key(task.task_id),
            "UpdateExpression": expression,
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
        }

    def get_task(self, task_id: str) -> TaskRecord | None:
        item = self._ddb.get_item(
            TableName=self._table, Key=_task_key(task_id), ConsistentRead=True
        ).get("Item")
        return self._task_from(item) if item else None

    def list_tasks(self, *, after: str | None = None, limit: int | None = None) -> list[TaskRecord]:
        # The task items' sparse `TASKS#<k>` entries in by_date (keys only: written once, when
        # the task is created; no update of the task ever writes that index), every bucket
        # read, sorted by task id; then the page's items themselves by key. No scan.
        def bucket(pk: str) -> list[str]:
            return [
                str(item["pk"]["S"]).removeprefix("TASK#")
                for item in self._paginate(
                    "query",
                    TableName=self._table,
                    IndexName="by_date",
                    KeyConditionExpression="date_pk = :pk",
                    ExpressionAttributeValues={":pk": {"S": pk}},
                )
            ]

        pks = partitions(TASKS_PREFIX, self._buckets)
        with ThreadPoolExecutor(max_workers=min(GATHER_THREADS, len(pks))) as pool:
            ids = sorted(task_id for found in pool.map(bucket, pks) for task_id in found)
        page = [i for i in ids if after is None or i > after][:limit]
        read = self._batch_get([_task_key(i) for i in page])
        # a task deleted between the two reads is left out
        return [
            self._task_from(read[_key_of(key)])
            for key in map(_task_key, page)
            if _key_of(key) in read
        ]

    def _due_partitions(self, prefix: str, bucket: int | None) -> list[str]:
        """The partition keys one due read queries: the bucket's own (every bucket's for None),
        and the former constant key (`prefix` alone) for bucket 0 and all-bucket reads."""
        if bucket is None:
            return [*partitions(prefix, self._buckets), prefix]
        own = f"{prefix}#{bucket}"
        return [own, prefix] if bucket == LEGACY_DUE_BUCKET else [own]

    def due_tasks(
        self, now: datetime, *, bucket: int | None = None, limit: int | None = None
    ) -> list[TaskRecord]:
        # '~' sorts after '#' and every task-id character: all tasks due at or before `now`.
        # Only the attributes a TaskRecord is built from come back (`_TASK_RECORD_FIELDS`):
        # a 10,000-task tick reads ~8 MB, and every attribute left out is one less the service
        # serialises and botocore parses per task (the read units are the same: DynamoDB counts
        # the items read, before the filter and the projection).
        found: list[TaskRecord] = []
        for due_pk in self._due_partitions(DUE_PARTITION, bucket):
            if limit is not None and len(found) >= limit:
                break
            found += [
                self._task_from(item)
                for item in islice(
                    self._paginate(
                        "query",
                        TableName=self._table,
                        IndexName="by_due",
                        KeyConditionExpression="due_pk = :due AND due_sk <= :upto",
                        FilterExpression=(
                            "enabled = :on AND (attribute_not_exists(paused) OR paused = :off)"
                        ),
                        ProjectionExpression=_TASK_PROJECTION,
                        ExpressionAttributeNames=_TASK_PROJECTION_NAMES,
                        ExpressionAttributeValues={
                            ":due": {"S": due_pk},
                            ":upto": {"S": f"{slot_text(now)}#~"},
                            ":on": {"BOOL": True},
                            ":off": {"BOOL": False},
                        },
                        **({"Limit": limit} if limit is not None else {}),
                    ),
                    limit,
                )
            ]
        # The order of one partition's due_sk (`<next fire>#<task>`), across partitions.
        return sorted(found, key=lambda t: (t.next_fire or now, t.task_id))[:limit]

    def delete_task(self, task_id: str) -> bool:
        # The definition item only (`TASK#<task>` / `DEF`): the instances in the same partition
        # are history. Guarded by the blocking hold, so a hold the dispatcher just took is not
        # lost with its queue. A retried delete whose first try landed finds no item: False,
        # which the caller reads as "gone", the same outcome.
        try:
            self._single(
                f"delete of task {task_id}",
                lambda: self._ddb.delete_item(
                    TableName=self._table,
                    Key=_task_key(task_id),
                    ConditionExpression="attribute_exists(pk) AND attribute_not_exists(active)",
                ),
            )
        except ClientError as exc:
            if _conditional_failure(exc):
                return False
            raise
        return True

    def set_paused(
        self, task_id: str, *, paused: bool, next_fire: datetime | None, last_slot: datetime | None
    ) -> bool:
        values: dict[str, Any] = {":paused": {"BOOL": paused}}
        sets = ["paused = :paused"]
        removes = []
        if next_fire is not None:
            sets += ["next_fire = :nf", "due_sk = :due_sk"]
            values[":nf"] = {"S": iso(next_fire)}
            values[":due_sk"] = {"S": f"{slot_text(next_fire)}#{task_id}"}
        else:
            removes += ["next_fire", "due_sk"]
        if last_slot is not None:
            sets.append("last_slot = :ls")
            values[":ls"] = {"S": iso(last_slot)}
        else:
            removes.append("last_slot")
        # The due index holds fireable tasks only: a paused task leaves it.
        if paused or next_fire is None:
            removes.append("due_pk")
        else:
            sets.append("due_pk = :due_pk")
            values[":due_pk"] = {"S": due_partition(task_id, self._buckets)}
        expression = "SET " + ", ".join(sets)
        if removes:
            expression += " REMOVE " + ", ".join(removes)
        return self._update_if(_task_key(task_id), expression, "attribute_exists(pk)", {}, values)

    def advance_task(
        self,
        task_id: str,
        *,
        expected_next_fire: datetime | None,
        next_fire: datetime | None,
        last_slot: datetime | None,
    ) -> bool:
        expression, condition, names, values = _advance(
            task_id,
            expected_next_fire=expected_next_fire,
            next_fire=next_fire,
            last_slot=last_slot,
            buckets=self._buckets,
        )
        return self._update_if(_task_key(task_id), expression, condition, names, values)

    # -- instances --------------------------------------------------------------------------

    def _instance_item(self, inst: InstanceRecord) -> dict[str, Any]:
        body = inst.model_dump(
            mode="json",
            exclude=set(_INSTANCE_TOP_LEVEL)
            | {"dispatch_lease_until", "owed", "remaining", "failed_shards", "sent"},
        )
        key = _instance_key(inst.instance_id)  # the slot, and a manual run's suffix
        values: dict[str, Any] = {
            "pk": key["pk"]["S"],
            "sk": key["sk"]["S"],
            "kind": "instance",
            "instance_id": inst.instance_id,
            "body": json.dumps(body, separators=(",", ":")),
            "status": inst.status.value,
            "reason": inst.reason,
            # The counter's first value: what its item starts from (`_counter_item`), and what
            # reads and `_ensure_counter` fall back on while it has no item. Never rewritten.
            "planned": inst.remaining,
            "finished_at": iso(inst.finished_at) if inst.finished_at else None,
            "status_pk": _status_pk(inst.status, inst.instance_id, self._buckets),
            "status_sk": f"{key['sk']['S'].removeprefix('INST#')}#{inst.instance_id}",
            # by_date (keys only): written once with the item, never moved by an update.
            "date_pk": _date_pk(inst.task_id, inst.business_date),
            # what the final status write turns into `expires_at` (see _status_change)
            "retention_s": inst.retention_days * DAY_S,
        }
        if inst.expires_at is not None:  # final as claimed
            values["expires_at"] = _epoch_s(inst.expires_at)
        if inst.dispatch_lease_until is not None:
            values["dispatch_lease_until_ms"] = to_ms(inst.dispatch_lease_until)
        if inst.sent:  # a number of its own, so that a step of a send rewrites no body
            values["sent"] = inst.sent
        if not inst.status.final:
            values["open_pk"] = _open_pk(inst.instance_id, self._buckets)
            values["open_sk"] = f"{iso(inst.deadline)}#{inst.instance_id}"
        elif inst.owed:  # final as claimed (skipped, failed to plan), its follow-ups owed
            values["owed"] = {step.value for step in inst.owed}
            values["open_pk"] = owed_partition(inst.instance_id, self._buckets)
            values["open_sk"] = f"{iso(inst.finished_at or inst.created_at)}#{inst.instance_id}"
        if inst.status is InstanceStatus.SCHEDULED and inst.fire_at is not None:
            values["due_pk"] = submission_partition(inst.instance_id, self._buckets)
            values["due_sk"] = f"{iso(inst.fire_at)}#{inst.instance_id}"
        return _to_item(values)

    @staticmethod
    def _counts(item: Mapping[str, Any], counter: Mapping[str, Any] | None) -> tuple[int, int]:
        """(remaining, failed_shards): the counter item's; without one, the instance item's
        own counter (written by the previous version, see `_ensure_counter`), else `planned`
        (nothing counted yet: the claimer died before writing the counter)."""
        source = counter if counter is not None else item
        if "remaining" in source:
            return int(source["remaining"]["N"]), int(source["failed_shards"]["N"])
        return int(item.get("planned", {"N": "0"})["N"]), 0

    @classmethod
    def _instance_from(
        cls, item: dict[str, Any], counter: Mapping[str, Any] | None = None
    ) -> InstanceRecord:
        v = _from_item(item)
        body = json.loads(v["body"])
        for name in _INSTANCE_TOP_LEVEL:
            body[name] = v.get(name)
        body["remaining"], body["failed_shards"] = cls._counts(item, counter)
        if "dispatch_lease_until_ms" in v:
            body["dispatch_lease_until"] = from_ms(v["dispatch_lease_until_ms"])
        body["sent"] = int(v.get("sent", 0))
        body["owed"] = sorted(v.get("owed", ()))  # a string set, absent once nothing is owed
        return InstanceRecord.model_validate(body)

    def _instances_from(self, items: Sequence[dict[str, Any]]) -> list[InstanceRecord]:
        """Instance items as records, each with its counter (read in BatchGetItem requests)."""
        keys = [_counter_key(item["instance_id"]["S"]) for item in items]
        counters = self._batch_get(keys)
        return [
            self._instance_from(item, counters.get(_key_of(key)))
            for item, key in zip(items, keys, strict=True)
        ]

    def _fetch_instances(
        self, entries: Sequence[Mapping[str, Any]], *, consistent: bool = True
    ) -> list[InstanceRecord]:
        """The instances named by index entries (keys only: the by_status, by_deadline and
        by_due indexes project no instance body), read whole with their counters, in the
        entries' order; one no longer there is left out."""
        pairs = []
        for entry in entries:
            task_id = entry["pk"]["S"].removeprefix("TASK#")
            instance_id = f"{task_id}@{entry['sk']['S'].removeprefix('INST#')}"
            pairs.append(({"pk": entry["pk"], "sk": entry["sk"]}, _counter_key(instance_id)))
        read = self._batch_get([key for pair in pairs for key in pair], consistent=consistent)
        return [
            self._instance_from(read[_key_of(key)], read.get(_key_of(counter)))
            for key, counter in pairs
            if _key_of(key) in read
        ]

    def _fetch(
        self, entries: Sequence[Mapping[str, Any]], *, consistent: bool = True
    ) -> list[dict[str, Any]]:
        """The items named by index entries, read whole, in the entries' order."""
        keys = [{"pk": e["pk"], "sk": e["sk"]} for e in entries]
        read = self._batch_get(keys, consistent=consistent)
        return [read[_key_of(k)] for k in keys if _key_of(k) in read]

    def _batch_get(
        self, keys: Sequence[Mapping[str, Any]], *, consistent: bool = True
    ) -> dict[tuple[str, str], Any]:
        return batch_get(self._ddb, self._table, keys, consistent=consistent)

    def _put_counter(self, counter: dict[str, Any]) -> bool:
        """Create a counter item unless it exists (a plain conditional put: the claim's
        counter follows a single put, and a transaction would cost both items twice; a
        claimer that stalled past its dispatch lease may find it made by `_ensure_counter`)."""
        try:
            self._single(
                f"counter of {counter['pk']['S']}",
                lambda: self._ddb.put_item(
                    TableName=self._table,
                    Item=counter,
                    ConditionExpression="attribute_not_exists(pk)",
                ),
            )
        except ClientError as exc:
            if not _conditional_failure(exc):
                raise
            return False
        return True

    def _counter_allows(self, instance_id: str, test: Callable[[int, int], bool]) -> bool:
        """After a counter condition's refusal: whether the counter, made sure of, now passes
        `test(remaining, failed_shards)` (the write is then sent again), or the refusal stands
        (or there is no such instance)."""
        counter = self._ensure_counter(instance_id)
        return counter is not None and test(
            int(counter["remaining"]["N"]), int(counter["failed_shards"]["N"])
        )

    def _ensure_counter(self, instance_id: str) -> dict[str, Any] | None:
        """The instance's counter item, made first if it has none (None: no such instance).

        No decrement can precede the counter item (they are conditioned on it), so one made
        from the instance item is exact:
        - `planned` (this version's claim, its claimer died between its two puts): a counter
          at `planned`, conditional on there being none;
        - the previous version's counter on the instance item (`remaining`, `failed_shards`,
          an instance in flight during an upgrade): moved in one transaction that removes it
          from the instance item on the condition that it still holds the values read, so a
          decrement by a previous-version worker still running is refused (its shard is
          retried) rather than lost; one that lands first makes the move read again.
        """
        try:
            key = _instance_key(instance_id)
        except KeyError:
            return None
        for _ in range(transact.ROUNDS):
            read = self._batch_get([key, _counter_key(instance_id)])
            item = read.get(_key_of(key))
            if item is None:
                return None
            existing: dict[str, Any] | None = read.get(_key_of(_counter_key(instance_id)))
            if existing is not None:
                return existing
            remaining, failed = self._counts(item, None)
            counter = _counter_item(instance_id, remaining, failed)
            if item.get("status", {}).get("S") == InstanceStatus.REDUCING.value:
                counter["reducing"] = {"BOOL": True}  # its count is the reduce's
            if "remaining" not in item:
                if self._put_counter(counter):
                    return counter
                continue  # made by a concurrent caller: read it
            put = {
                "TableName": self._table,
                "Item": counter,
                "ConditionExpression": "attribute_not_exists(pk)",
            }
            move = {
                "TableName": self._table,
                "Key": key,
                "UpdateExpression": "SET planned = :r REMOVE remaining, failed_shards",
                "ConditionExpression": "remaining = :r AND failed_shards = :f",
                "ExpressionAttributeValues": {
                    ":r": {"N": str(remaining)},
                    ":f": {"N": str(failed)},
                },
            }
            what = f"counter of {instance_id}"
            outcome = self._transaction([{"Put": put}, {"Update": move}], what=what)
            if outcome.kind is Kind.INVALID:
                raise _rejected(outcome, what)
            if outcome.kind is Kind.COMMITTED:
                return counter
            # moved by a concurrent caller, or decremented by a previous-version worker: again
        raise StoreContendedError(f"counter of {instance_id}: the instance kept changing")

    def claim_instance(self, instance: InstanceRecord) -> InstanceRecord | None:
        # The right to fire:
        #   dispatcher A: PutItem(if not exists) ── wins ──► its counter ──► plans, sends, ...
        #   dispatcher B: PutItem(if not exists) ── ConditionalCheckFailed + ALL_OLD ──► sees A's
        #   instance (resumes it only if A's dispatch lease expires)
        token = _token()
        try:
            self._single(
                f"claim of {instance.instance_id}",
                lambda: self._ddb.put_item(
                    TableName=self._table,
                    Item={**self._instance_item(instance), "write_token": {"S": token}},
                    ConditionExpression="attribute_not_exists(pk)",
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                ),
            )
        except ClientError as exc:
            if not _conditional_failure(exc):
                raise
            if not _landed(exc, token):
                old: Any = exc.response.get("Item")
                if old:
                    return self._instances_from([old])[0]
                existing = self.get_instance(instance.instance_id)
                if existing is None:  # pragma: no cover - the condition failed on an item
                    raise
                return existing
            # else our own put, its response lost: we won the claim
        if not instance.status.final:  # a final one (skipped, unplannable) never counts
            self._put_counter(
                _counter_item(instance.instance_id, instance.remaining, instance.failed_shards)
            )
        return None

    def take_dispatch(self, instance_id: str, *, now: datetime, until: datetime) -> bool:
        return self._update_if(
            _instance_key(instance_id),
            "SET dispatch_lease_until_ms = :until",
            "#st IN (:planning, :reducing) AND (attribute_not_exists(dispatch_lease_until_ms) "
            "OR dispatch_lease_until_ms <= :now)",
            {"#st": "status"},
            {
                ":until": {"N": str(to_ms(until))},
                ":now": {"N": str(to_ms(now))},
                ":planning": {"S": InstanceStatus.PLANNING.value},
                ":reducing": {"S": InstanceStatus.REDUCING.value},
            },
        )

    def advance_dispatch(
        self, instance_id: str, *, sent: int, held: datetime | None, until: datetime
    ) -> bool:
        # Fenced on the lease's end the caller set (or found, if none): a dispatcher that took
        # over set another, so the one it replaced stops at its next step. A lost response's
        # retry finds its own write token (`_update_if`), not a lost race.
        values: dict[str, Any] = {
            ":sent": {"N": str(sent)},
            ":until": {"N": str(to_ms(until))},
            ":planning": {"S": InstanceStatus.PLANNING.value},
        }
        if held is None:
            lease = "attribute_not_exists(dispatch_lease_until_ms)"
        else:
            lease = "dispatch_lease_until_ms = :held"
            values[":held"] = {"N": str(to_ms(held))}
        return self._update_if(
            _instance_key(instance_id),
            "SET sent = :sent, dispatch_lease_until_ms = :until",
            f"#st = :planning AND {lease}",
            {"#st": "status"},
            values,
        )

    def set_instance_status(
        self,
        instance_id: str,
        *,
        expected: InstanceStatus,
        status: InstanceStatus,
        reason: str | None = None,
        finished_at: datetime | None = None,
        owed: Sequence[FollowUp] = (),
    ) -> bool:
        return self._set_status(
            instance_id,
            status=status,
            condition="#st = :expected",
            values={":expected": {"S": expected.value}},
            reason=reason,
            finished_at=finished_at,
            owed=owed,
        )

    def finalize_instance(
        self,
        instance_id: str,
        *,
        status: InstanceStatus,
        finished_at: datetime,
        owed: Sequence[FollowUp] = (),
    ) -> bool:
        # One read of the counter, then one conditional write of the instance item (no
        # transaction: it would double the instance item's write units):
        #   counter 0, shards phase ──► SET final IF status IN (planning, running)
        #   counter 0, reduce phase (`reducing`: the reduce was counted) ──► IF status reducing
        # The counter leaves 0 only through start_reduce, which moves the instance to reducing
        # and marks the counter's phase in one transaction; so a reduce started between the
        # read and the write fails the write's condition, and a finalize never ends an
        # instance whose reduce is still to count. The status condition lets one caller win.
        counter = self._read_counter(instance_id)
        if counter is None or int(counter["remaining"]["N"]) != 0:
            return False
        reducing = counter.get("reducing", {}).get("BOOL", False)
        values = {
            ":planning": {"S": InstanceStatus.PLANNING.value},
            ":running": {"S": InstanceStatus.RUNNING.value},
            ":reducing": {"S": InstanceStatus.REDUCING.value},
        }
        return self._set_status(
            instance_id,
            status=status,
            condition="#st = :reducing" if reducing else "#st IN (:planning, :running)",
            values={k: v for k, v in values.items() if (k == ":reducing") == reducing},
            finished_at=finished_at,
            owed=owed,
        )

    def _read_counter(self, instance_id: str) -> dict[str, Any] | None:
        """The instance's counter item (strongly consistent), made first if it has none (an
        upgrade's instance, a claimer's crash); None if there is no such instance."""
        try:
            _instance_key(instance_id)
        except KeyError:
            return None
        item: dict[str, Any] | None = self._ddb.get_item(
            TableName=self._table, Key=_counter_key(instance_id), ConsistentRead=True
        ).get("Item")
        return item if item is not None else self._ensure_counter(instance_id)

    def start_reduce(self, instance_id: str, *, now: datetime, until: datetime) -> bool:
        # Exactly one reduce: of all the callers that saw the counter reach zero (the last
        # shards, a duplicate completion, the sweeper) only one moves the instance on, and the
        # same transaction sets the counter to one, for the reduce.
        key = _instance_key(instance_id)
        sk = key["sk"]["S"].removeprefix("INST#")
        return self._counted_move(
            instance_id,
            {
                "Key": key,
                "UpdateExpression": (
                    "SET #st = :reducing, dispatch_lease_until_ms = :until, "
                    "status_pk = :status_pk, status_sk = :status_sk"
                ),
                "ConditionExpression": "#st IN (:planning, :running)",
                "ExpressionAttributeNames": {"#st": "status"},
                "ExpressionAttributeValues": {
                    ":reducing": {"S": InstanceStatus.REDUCING.value},
                    ":planning": {"S": InstanceStatus.PLANNING.value},
                    ":running": {"S": InstanceStatus.RUNNING.value},
                    ":until": {"N": str(to_ms(until))},
                    ":status_pk": {
                        "S": _status_pk(InstanceStatus.REDUCING, instance_id, self._buckets)
                    },
                    ":status_sk": {"S": f"{sk}#{instance_id}"},
                },
            },
            {
                "Update": {
                    "TableName": self._table,
                    "Key": _counter_key(instance_id),
                    "UpdateExpression": "SET remaining = :one, reducing = :yes",
                    "ConditionExpression": "remaining = :zero AND failed_shards = :zero",
                    "ExpressionAttributeValues": {
                        ":one": {"N": "1"},
                        ":zero": {"N": "0"},
                        ":yes": {"BOOL": True},
                    },
                }
            },
            allows=lambda remaining, failed: remaining == 0 and failed == 0,
            what=f"reduce of {instance_id}",
        )

    def _counted_move(
        self,
        instance_id: str,
        move: dict[str, Any],
        counter: dict[str, Any],
        *,
        allows: Callable[[int, int], bool],
        what: str,
    ) -> bool:
        """The instance item's `move` (an Update) and the action on its counter item, in one
        transaction: True if it committed. Exactly one of concurrent callers commits (the
        move's status condition holds once; the counter's holds once too). Cancellations,
        read with `transact.classify`:
          the move's ConditionalCheckFailed (status moved on) ──► False
          the counter's alone, the counter item absent ──► made (`_ensure_counter`), again
          the counter's alone, read again: it passes now ──► sent again; else ──► False
          TransactionConflict, throttling, None ──► sent again (then StoreContendedError)
          ValidationError, anything else ──► WriteRejectedError
        A lost response is answered by DynamoDB from the request token: committed."""
        actions = [{"Update": {"TableName": self._table, **move}}, counter]
        for _ in range(3):  # again while the counter, made sure of, passes the condition
            outcome = self._transaction(actions, what=what)
            if outcome.kind is Kind.COMMITTED:
                return True
            if outcome.kind is Kind.INVALID:
                raise _rejected(outcome, what)
            if outcome.failed != (1,) or not self._counter_allows(instance_id, allows):
                return False
        return False

    def end_instance(
        self,
        instance_id: str,
        *,
        status: InstanceStatus,
        reason: str,
        finished_at: datetime,
        owed: Sequence[FollowUp] = (),
    ) -> bool:
        return self._set_status(
            instance_id,
            status=status,
            condition="#st IN (:queued, :planning, :running, :reducing)",
            values={
                ":queued": {"S": InstanceStatus.QUEUED.value},
                ":planning": {"S": InstanceStatus.PLANNING.value},
                ":running": {"S": InstanceStatus.RUNNING.value},
                ":reducing": {"S": InstanceStatus.REDUCING.value},
            },
            reason=reason,
            finished_at=finished_at,
            owed=owed,
        )

    def due_submissions(
        self, now: datetime, *, bucket: int | None = None, limit: int | None = None
    ) -> list[InstanceRecord]:
        found: list[InstanceRecord] = []
        for due_pk in self._due_partitions(SUBMISSION_PARTITION, bucket):
            if limit is not None and len(found) >= limit:
                break
            entries = list(
                self._paginate(
                    "query",
                    TableName=self._table,
                    IndexName="by_due",
                    KeyConditionExpression="due_pk = :sub AND due_sk <= :upto",
                    ExpressionAttributeValues={
                        ":sub": {"S": due_pk},
                        ":upto": {"S": f"{iso(now)}#~"},
                    },
                )
            )
            found += [
                instance
                for instance in self._fetch_instances(entries)
                if instance.status is InstanceStatus.SCHEDULED  # the index lags
            ][:limit]
        found.sort(key=lambda i: (i.fire_at or now, i.instance_id))
        return found[:limit]

    # -- the fanned-out tick's bucket leases -------------------------------------------------

    def take_tick(
        self, bucket: int, minute: datetime, *, owner: str, now: datetime, until: datetime
    ) -> TickLease:
        key = {"pk": {"S": f"TICK#{bucket}"}, "sk": {"S": "LEASE"}}
        taken = self._update_if(
            key,
            "SET #o = :me, until_ms = :until, minute_ms = :minute",
            # Free (never taken, ended, released) or already ours (a retried request), and
            # this minute not the one last dispatched in full.
            "(attribute_not_exists(pk) OR until_ms <= :now OR #o = :me)"
            " AND (attribute_not_exists(done_ms) OR done_ms <> :minute)",
            {"#o": "owner"},
            {
                ":me": {"S": owner},
                ":until": {"N": str(to_ms(until))},
                ":minute": {"N": str(to_ms(minute))},
                ":now": {"N": str(to_ms(now))},
            },
        )
        if taken:
            return TickLease(taken=True, owner=owner, minute=minute, until=until)
        item = self._ddb.get_item(TableName=self._table, Key=key, ConsistentRead=True).get("Item")
        v = _from_item(item) if item else {}
        live = bool(v) and int(v.get("until_ms", 0)) > to_ms(now)
        return TickLease(
            taken=False,
            owner=v.get("owner") if live else None,
            minute=from_ms(int(v["minute_ms"])) if live and "minute_ms" in v else None,
            until=from_ms(int(v["until_ms"])) if live else None,
            done=from_ms(int(v["done_ms"])) if "done_ms" in v else None,
        )

    def release_tick(self, bucket: int, *, owner: str, minute: datetime, done: bool) -> bool:
        # The owner stays written: a retried release (its first response lost) still matches.
        expression = "SET until_ms = :zero" + (", done_ms = :minute" if done else "")
        values: dict[str, Any] = {":me": {"S": owner}, ":zero": {"N": "0"}}
        if done:
            values[":minute"] = {"N": str(to_ms(minute))}
        return self._update_if(
            {"pk": {"S": f"TICK#{bucket}"}, "sk": {"S": "LEASE"}},
            expression,
            "#o = :me",
            {"#o": "owner"},
            values,
        )

    def record_request(self, request_key: str, instance_id: str) -> str:
        try:
            self._single(
                f"request {request_key}",
                lambda: self._ddb.put_item(
                    TableName=self._table,
                    Item=_to_item(
                        {
                            "pk": f"REQUEST#{request_key}",
                            "sk": "REQUEST",
                            "kind": "request",
                            "instance_id": instance_id,
                        }
                    ),
                    ConditionExpression="attribute_not_exists(pk)",
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                ),
            )
        except ClientError as exc:
            if not _conditional_failure(exc):
                raise
            old: Any = exc.response.get("Item")
            if old:
                return str(_from_item(old)["instance_id"])
            item = self._ddb.get_item(
                TableName=self._table,
                Key={"pk": {"S": f"REQUEST#{request_key}"}, "sk": {"S": "REQUEST"}},
                ConsistentRead=True,
            )["Item"]
            return str(_from_item(item)["instance_id"])
        return instance_id

    def open_instances(self, *, limit: int = 1000) -> list[InstanceRecord]:
        # Every OPEN bucket, merged in deadline order (the sort key leads with the deadline),
        # and the single `OPEN` of earlier versions: what was open at an upgrade still ends.
        items = self._gather(
            [
                {
                    "IndexName": "by_deadline",
                    "KeyConditionExpression": "open_pk = :open",
                    "ExpressionAttributeValues": {":open": {"S": pk}},
                }
                for pk in [*partitions(OPEN_PREFIX, self._buckets), OPEN_PREFIX]
            ],
            order="open_sk",
            limit=limit,
        )
        # eventually consistent: the sweeper's every write is conditional (half the units)
        found = self._fetch_instances(items, consistent=False)
        return [i for i in found if not i.status.final]  # the index lags the table

    def expired_leases(self, now: datetime, *, limit: int = 1000) -> list[ShardRecord]:
        # Every LEASE#k bucket, and the one LEASE partition of earlier versions (a lease left
        # there by a worker that died at an upgrade), merged in lease-end order (the sort key
        # starts with it).
        upto = {"S": f"{iso(now)}#~"}
        streams = [
            self._paginate(
                "query",
                TableName=self._table,
                IndexName="by_deadline",
                KeyConditionExpression="open_pk = :lease AND open_sk <= :upto",
                ExpressionAttributeValues={":lease": {"S": pk}, ":upto": upto},
            )
            for pk in [*partitions(LEASE_PREFIX, self._buckets), LEASE_PREFIX]
        ]
        merged = heapq.merge(*streams, key=lambda item: str(item["open_sk"]["S"]))
        # the index holds keys only; eventually consistent, as every sweeper write is conditional
        found = [
            self._shard_from(i) for i in self._fetch(self._take(merged, limit), consistent=False)
        ]
        return [
            s
            for s in found
            if s.status is ShardStatus.RUNNING
            and s.lease_until is not None
            and s.lease_until <= now
        ]

    def settle_followup(self, instance_id: str, step: FollowUp) -> bool:
        # Strike `step` off; the write that strikes the last one also takes the instance out of
        # the owing partition. Either may land twice (a retried request): the second finds the
        # mark gone and changes nothing. A mark struck by another caller between the two
        # conditions (the other was the last but one) is decided again on a fresh read, so the
        # last strike-off is always the one write that leaves the index.
        key = _instance_key(instance_id)
        values = {":step": {"S": step.value}, ":one": {"N": "1"}}
        for _ in range(len(FollowUp)):  # each retry follows another caller's strike-off
            if self._update_if(
                key,
                "REMOVE owed, open_pk, open_sk",
                "contains(owed, :step) AND size(owed) = :one",
                {},
                values,
            ):
                return True
            if self._update_if(
                key,
                "DELETE owed :steps",
                "contains(owed, :step) AND size(owed) > :one",
                {},
                {**values, ":steps": {"SS": [step.value]}},
            ):
                return True
            current = self.get_instance(instance_id)
            if current is None or step not in current.owed:
                return False
        return False

    def owing_instances(self, *, limit: int = 1000) -> list[InstanceRecord]:
        # Every owing bucket (and the legacy OWED#0..3), merged oldest end first.
        items = self._gather(
            [
                {
                    "IndexName": "by_deadline",
                    "KeyConditionExpression": "open_pk = :owed",
                    # unpublished alerts share these partitions (adapters/alerting.py): a
                    # backlog of them must not take the limit
                    "FilterExpression": "#kind = :instance",
                    "ExpressionAttributeNames": {"#kind": "kind"},
                    "ExpressionAttributeValues": {
                        ":owed": {"S": pk},
                        ":instance": {"S": "instance"},
                    },
                }
                for pk in owed_partitions(self._buckets)
            ],
            order="open_sk",
            limit=limit,
        )
        found: list[InstanceRecord] = []
        for instance in self._fetch_instances(items):
            if instance.owed:
                found.append(instance)
            else:  # its last mark went, its index keys not: drop them now
                self._update_if(
                    _instance_key(instance.instance_id),
                    "REMOVE open_pk, open_sk",
                    "attribute_not_exists(owed)",
                    {},
                    {},
                )
        return found

    def _set_status(
        self,
        instance_id: str,
        *,
        status: InstanceStatus,
        condition: str,
        values: dict[str, Any],
        reason: str | None = None,
        finished_at: datetime | None = None,
        owed: Sequence[FollowUp] = (),
    ) -> bool:
        key, expression, change = _status_change(
            instance_id,
            status,
            reason=reason,
            finished_at=finished_at,
            owed=owed,
            buckets=self._buckets,
        )
        return self._update_if(key, expression, condition, {"#st": "status"}, {**values, **change})

    def _update_if(
        self,
        key: dict[str, Any],
        expression: str,
        condition: str,
        names: dict[str, str],
        values: dict[str, Any],
    ) -> bool:
        token = _token()
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "Key": key,
            "UpdateExpression": _with_token(expression),
            "ConditionExpression": condition,
            "ExpressionAttributeValues": {**values, ":wtok": {"S": token}},
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
        if names:  # DynamoDB rejects an empty map
            kwargs["ExpressionAttributeNames"] = names
        try:
            self._single(f"update of {key['pk']['S']}", lambda: self._ddb.update_item(**kwargs))
        except ClientError as exc:
            if _conditional_failure(exc):
                return _landed(exc, token)
            raise
        return True

    def _single(self, what: str, call: Callable[[], _T]) -> _T:
        """A single write, sent again while an item it touches is part of a transaction under
        way (TransactionConflictException: nothing was written, and botocore does not retry
        it), a few rounds with jittered backoff; then StoreContendedError."""
        for round_ in range(transact.ROUNDS):
            try:
                return call()
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") != "TransactionConflictException":
                    raise
                if round_ + 1 == transact.ROUNDS:
                    raise StoreContendedError(
                        f"{what}: in conflict with a transaction after {transact.ROUNDS} tries"
                    ) from exc
                time.sleep(transact.backoff_s(round_))
        raise AssertionError("unreachable")  # pragma: no cover

    def get_instance(self, instance_id: str) -> InstanceRecord | None:
        try:
            key = _instance_key(instance_id)
        except KeyError:
            return None
        # The instance item and its counter item, in one request.
        found = self._fetch_instances([key])
        return found[0] if found else None

    def list_instances(
        self,
        *,
        task_id: str | None = None,
        status: InstanceStatus | None = None,
        limit: int = 100,
        before: str | None = None,
    ) -> list[InstanceRecord]:
        if task_id is not None:
            kwargs: dict[str, Any] = {
                "TableName": self._table,
                "KeyConditionExpression": "pk = :pk AND begins_with(sk, :inst)",
                "ExpressionAttributeValues": {
                    ":pk": {"S": f"TASK#{task_id}"},
                    ":inst": {"S": "INST#"},
                },
                "ScanIndexForward": False,
                "ConsistentRead": True,
            }
            if before is not None:  # a page on: from the item before the cursor's
                kwargs["KeyConditionExpression"] = "pk = :pk AND sk BETWEEN :inst AND :before"
                kwargs["ExpressionAttributeValues"][":before"] = {
                    "S": f"INST#{before.rpartition('@')[2]}"
                }
            if status is not None:
                kwargs["FilterExpression"] = "#st = :st"
                kwargs["ExpressionAttributeNames"] = {"#st": "status"}
                kwargs["ExpressionAttributeValues"][":st"] = {"S": status.value}
            items = self._take(
                # BETWEEN includes the cursor's own item (a key cannot be filtered on)
                (i for i in self._paginate("query", **kwargs) if _item_id(i) != before),
                limit,
            )
            return self._instances_from(items)
        # Every bucket of the status (of every status), merged newest slot first: the sort
        # key is `<slot>#<id>`, so no bucket is read past the `limit` newest of its own.
        statuses = [status] if status is not None else list(InstanceStatus)
        condition, after = "status_pk = :sp", {}
        if before is not None:  # a page on: every bucket from below the cursor's sort key
            condition += " AND status_sk < :before"
            after = {":before": {"S": listing_key(before)}}
        items = self._gather(
            [
                {
                    "IndexName": "by_status",
                    "KeyConditionExpression": condition,
                    "ExpressionAttributeValues": {":sp": {"S": pk}, **after},
                    "ScanIndexForward": False,
                }
                for st in statuses
                for pk in partitions(f"{STATUS_PREFIX}#{st.value}", self._buckets)
            ],
            order="status_sk",
            limit=limit,
            newest_first=True,
        )
        # the index holds keys only: the newest `limit` entries are read whole
        return self._fetch_instances(items)

    def instances_for_date(self, task_id: str, day: date) -> list[InstanceRecord]:
        # The by_date index holds the keys only (one index write per instance, at its claim:
        # no later update touches `date_pk`); each instance is then read strongly consistent.
        found = self._fetch_instances(
            list(
                self._paginate(
                    "query",
                    TableName=self._table,
                    IndexName="by_date",
                    KeyConditionExpression="date_pk = :d",
                    ExpressionAttributeValues={":d": {"S": _date_pk(task_id, day)}},
                )
            )
        )
        return sorted(found, key=lambda i: (i.created_at, i.instance_id))

    # -- batches (the tick's hot path) -------------------------------------------------------
    #
    # A tick with thousands of due tasks cannot afford a round trip per write. These pack many
    # independent conditional writes into TransactWriteItems requests (at most 100 actions,
    # 4 MB, each item once). A transaction is all or nothing, so when DynamoDB cancels one, its
    # CancellationReasons (one per action, in order; read by `transact.reason_kind`) say which
    # actions failed and why:
    #   ConditionalCheckFailed                   ──► that group lost: dropped (False)
    #   TransactionConflict, throttling          ──► that group is retried in the next round
    #   None (an innocent bystander)             ──► retried in the next round
    #   anything else (ValidationError, ...)     ──► that group dropped (False): the caller's
    #                                                one-by-one path meets the error itself
    # A request-level error: throttling or a conflict retries the chunk, anything else drops it.
    # A lost response is safe: botocore retries with the same ClientRequestToken, which
    # DynamoDB answers idempotently (a cancelled-then-retried round gets a fresh token).

    def claim_instances(self, groups: Sequence[Sequence[InstanceRecord]]) -> list[bool]:
        entries: list[list[Any]] = []
        late: dict[int, list[Any]] = {}  # counters sent after their group's claims
        for n, group in enumerate(groups):
            ids = [i.instance_id for i in group]
            if len(ids) > MAX_CLAIM_GROUP or len(set(ids)) != len(ids):
                entries.append([None])  # never sent: see _write_groups
                continue
            actions = [action for instance in group for action in self._claim_puts(instance)]
            if len(actions) > TRANSACTION_ACTIONS:
                # A group is one transaction: past its action limit (an open instance is two
                # puts), the counters follow the claims in transactions of their own, each
                # conditional on being new (a counter missing after a crash in between is made
                # by `_ensure_counter`, exactly).
                actions = [a for a in actions if "ConditionExpression" in a["Put"]]
                late[n] = [self._counter_put(i) for i in group if not i.status.final]
            entries.append(actions)
        won = self._write_groups(entries)
        self._write_groups([[put] for n, puts in late.items() if won[n] for put in puts])
        return won

    def _counter_put(self, instance: InstanceRecord) -> Any:
        counter = _counter_item(instance.instance_id, instance.remaining, instance.failed_shards)
        put = {"TableName": self._table, "Item": counter}
        return {"Put": {**put, "ConditionExpression": "attribute_not_exists(pk)"}}

    def _claim_puts(self, instance: InstanceRecord) -> list[Any]:
        """A claim's transaction actions: the instance if new, and (unless it is final as
        claimed: it never counts) its counter, unconditional: the instance's condition makes
        the transaction the only writer of both."""
        puts: list[Any] = [
            {
                "Put": {
                    "TableName": self._table,
                    "Item": self._instance_item(instance),
                    "ConditionExpression": "attribute_not_exists(pk)",
                }
            }
        ]
        if not instance.status.final:
            counter = _counter_item(
                instance.instance_id, instance.remaining, instance.failed_shards
            )
            puts.append({"Put": {"TableName": self._table, "Item": counter}})
        return puts

    def mark_running(self, instance_ids: Sequence[str]) -> list[bool]:
        # The status and its index partition only: a `planning` instance has no submission
        # keys (they went when it left `scheduled`), its status_sk was written by the claim and
        # does not change, and it is not final. (Two clauses where `set_instance_status` has
        # five: the same result, and less for the emulator to evaluate per action.)
        entries: list[list[Any]] = [
            [
                {
                    "Update": {
                        "TableName": self._table,
                        "Key": _instance_key(instance_id),
                        "UpdateExpression": "SET #st = :running, status_pk = :status_pk",
                        "ConditionExpression": "#st = :planning",
                        "ExpressionAttributeNames": {"#st": "status"},
                        "ExpressionAttributeValues": {
                            ":running": {"S": InstanceStatus.RUNNING.value},
                            ":status_pk": {
                                "S": _status_pk(InstanceStatus.RUNNING, instance_id, self._buckets)
                            },
                            ":planning": {"S": InstanceStatus.PLANNING.value},
                        },
                    }
                }
            ]
            for instance_id in instance_ids
        ]
        return self._write_groups(entries)

    def advance_tasks(self, advances: Sequence[TaskAdvance]) -> list[bool]:
        entries: list[list[Any]] = []
        for a in advances:
            expression, condition, names, values = _advance(
                a.task_id,
                expected_next_fire=a.expected_next_fire,
                next_fire=a.next_fire,
                last_slot=a.last_slot,
                buckets=self._buckets,
            )
            update: dict[str, Any] = {
                "TableName": self._table,
                "Key": _task_key(a.task_id),
                "UpdateExpression": expression,
                "ConditionExpression": condition,
                "ExpressionAttributeNames": names,
            }
            if values:  # DynamoDB rejects an empty map
                update["ExpressionAttributeValues"] = values
            entries.append([{"Update": update}])
        return self._write_groups(entries)

    def _write_groups(self, groups: list[list[Any]]) -> list[bool]:
        """Write each group of transaction actions all or nothing, the groups independently.

        Returns, per group, whether it was written. A group holding None is not sent (False);
        an empty one is trivially written (True).
        """
        written = [not g for g in groups]
        pending = [n for n, g in enumerate(groups) if g and None not in g]
        for round_ in range(TRANSACTION_ROUNDS):
            retry: list[int] = []
            for chunk in _pack(pending, groups):
                for n, outcome in self._transact(chunk, groups).items():
                    if outcome == "written":
                        written[n] = True
                    elif outcome == "retry":
                        retry.append(n)
            if not retry:
                break
            pending = retry
            if round_ + 1 < TRANSACTION_ROUNDS:
                time.sleep(transact.backoff_s(round_))
        return written

    def _transact(self, chunk: list[int], groups: list[list[Any]]) -> dict[int, str]:
        """One TransactWriteItems of the groups in `chunk`: each one's outcome (see above)."""
        owners = [n for n in chunk for _ in groups[n]]
        sent = self._send([action for n in chunk for action in groups[n]])
        if sent.kind is Kind.COMMITTED:
            return dict.fromkeys(chunk, "written")
        if not sent.reasons:  # the whole request: retry it, or let the caller go one by one
            return dict.fromkeys(chunk, "retry" if sent.kind is Kind.RETRY else "dropped")
        outcome = dict.fromkeys(chunk, "retry")
        for n, kind in zip(owners, map(transact.reason_kind, sent.reasons), strict=True):
            if kind in (Kind.CONDITION_FAILED, Kind.INVALID):
                outcome[n] = "dropped"  # lost its condition, or an error of its own
        return outcome

    def _send(self, actions: list[Any]) -> Outcome:
        """One TransactWriteItems with a fresh ClientRequestToken, its outcome read.

        Errors botocore has already retried (throttling, 5xx) and errors other than the
        service's (no connection, ...) propagate. A lost response is safe: botocore retries
        with the same ClientRequestToken, which DynamoDB answers idempotently; a cancelled
        request sent again is a new one, with a new token.
        """
        try:
            self._ddb.transact_write_items(TransactItems=actions, ClientRequestToken=_token())
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in transact.RETRIED_BY_SDK:
                raise
            return dataclasses.replace(transact.classify(exc.response, len(actions)), cause=exc)
        return transact.COMMITTED

    def _transaction(self, actions: list[Any], *, what: str) -> Outcome:
        """`actions` in one transaction, sent again while contended or throttled (a few
        rounds, then StoreContendedError): committed, a condition failed, or invalid."""
        return transact.retrying(lambda: self._send(actions), what=what)

    # -- blocking (the task's hold) ------------------------------------------------------------

    def _claim_with(self, instance: InstanceRecord, task_update: dict[str, Any]) -> str | None:
        """Put the instance and update its task in one transaction.

        Returns None on success, "instance" if the instance key was taken, "task" if the
        task's condition failed (and the instance's held). Contention and throttling are sent
        again (then StoreContendedError); an invalid request raises WriteRejectedError.
        """
        instance_put, *counter = self._claim_puts(instance)
        items: list[Any] = [
            instance_put,
            {
                "Update": {
                    "TableName": self._table,
                    "Key": _task_key(instance.task_id),
                    **task_update,
                }
            },
            *counter,  # last: the positions of the two conditions stay 0 and 1
        ]
        outcome = self._transaction(items, what=f"claim of {instance.instance_id}")
        if outcome.kind is Kind.COMMITTED:
            return None
        if outcome.kind is Kind.CONDITION_FAILED:
            return "instance" if 0 in outcome.failed else "task"
        raise _rejected(outcome, f"claim of {instance.instance_id}")

    def _duplicate(self, instance_id: str) -> ExclusiveClaim:
        return ExclusiveClaim(ClaimOutcome.DUPLICATE, existing=self.get_instance(instance_id))

    def claim_exclusive(self, instance: InstanceRecord) -> ExclusiveClaim:
        # The claim and the hold commit together:
        #   Transact[instance: if new; task: SET active = id IF no active]
        #   a second firing while the first runs ── task condition fails ──► BLOCKED by holder
        #   the hold released between the refusal and the read ──► tried again, a few times
        for _ in range(transact.ROUNDS):
            failed = self._claim_with(
                instance,
                {
                    "UpdateExpression": "SET active = :iid",
                    "ConditionExpression": "attribute_exists(pk) AND attribute_not_exists(active)",
                    "ExpressionAttributeValues": {":iid": {"S": instance.instance_id}},
                },
            )
            if failed == "instance":
                return self._duplicate(instance.instance_id)
            if failed is None:
                return ExclusiveClaim(ClaimOutcome.CLAIMED)
            task = self.get_task(instance.task_id)
            if task is None or task.active is not None:
                return ExclusiveClaim(ClaimOutcome.BLOCKED, holder=task.active if task else None)
        raise StoreContendedError(
            f"claim of {instance.instance_id}: the task's hold kept changing "
            f"({transact.ROUNDS} tries)"
        )

    def enqueue_instance(self, instance: InstanceRecord, *, max_queued: int) -> ExclusiveClaim:
        failed = self._claim_with(
            instance,
            {
                "UpdateExpression": "SET #q = list_append(if_not_exists(#q, :empty), :iid)",
                "ConditionExpression": (
                    "attribute_exists(active) AND (attribute_not_exists(#q) OR size(#q) < :max)"
                ),
                "ExpressionAttributeNames": {"#q": "queue"},
                "ExpressionAttributeValues": {
                    ":iid": {"L": [{"S": instance.instance_id}]},
                    ":empty": {"L": []},
                    ":max": {"N": str(max_queued)},
                },
            },
        )
        if failed == "instance":
            return self._duplicate(instance.instance_id)
        task = self.get_task(instance.task_id)
        holder = task.active if task else None
        if failed == "task":
            outcome = ClaimOutcome.FREE if holder is None else ClaimOutcome.FULL
            return ExclusiveClaim(outcome, holder=holder)
        return ExclusiveClaim(ClaimOutcome.CLAIMED, holder=holder)

    def take_over(self, instance: InstanceRecord, *, holder: str) -> ExclusiveClaim:
        failed = self._claim_with(
            instance,
            {
                "UpdateExpression": "SET active = :iid",
                "ConditionExpression": "active = :holder",
                "ExpressionAttributeValues": {
                    ":iid": {"S": instance.instance_id},
                    ":holder": {"S": holder},
                },
            },
        )
        if failed == "instance":
            return self._duplicate(instance.instance_id)
        if failed == "task":
            task = self.get_task(instance.task_id)
            return ExclusiveClaim(ClaimOutcome.BLOCKED, holder=task.active if task else None)
        return ExclusiveClaim(ClaimOutcome.CLAIMED)

    def release_task(self, task_id: str, instance_id: str) -> str | None:
        # Pass the hold on, guarded by what was read (a concurrent enqueue changes the size):
        #   UpdateItem SET active = queue[0], queue = rest IF active = me AND size(queue) = n
        for _ in range(5):
            task = self.get_task(task_id)
            if task is None or task.active != instance_id:
                return None
            names = {"#q": "queue"}
            values: dict[str, Any] = {":me": {"S": instance_id}}
            if task.queue:
                head, rest = task.queue[0], task.queue[1:]
                expression = "SET active = :head, #q = :rest"
                condition = "active = :me AND size(#q) = :n"
                values.update(
                    {
                        ":head": {"S": head},
                        ":rest": {"L": [{"S": i} for i in rest]},
                        ":n": {"N": str(len(task.queue))},
                    }
                )
            else:
                head = None
                expression = "REMOVE active"
                condition = "active = :me AND (attribute_not_exists(#q) OR size(#q) = :zero)"
                values[":zero"] = {"N": "0"}
            if self._update_if(_task_key(task_id), expression, condition, names, values):
                return head
        raise RuntimeError(f"could not release {task_id} from {instance_id}: too much contention")

    # -- shards -----------------------------------------------------------------------------

    @staticmethod
    def _shard_from(item: dict[str, Any]) -> ShardRecord:
        v = _from_item(item)
        attempts = [
            Attempt.model_validate({**a, "number": n})
            for n, a in enumerate(v.get("attempts", []), 1)
        ]
        return ShardRecord(
            instance_id=v["instance_id"],
            index=v["idx"],
            bounds=json.loads(v.get("bounds", "{}")),
            status=ShardStatus(v["status"]),
            attempt=v.get("attempt", 0),
            max_attempts=v.get("max_attempts", 1),
            owner=v.get("owner"),
            lease_until=from_ms(v["lease_until_ms"]) if "lease_until_ms" in v else None,
            attempts=attempts,
            error=v.get("error") or None,
            result=json.loads(v["result"]) if v.get("result") else None,
            expires_at=datetime.fromtimestamp(v["expires_at"], UTC) if "expires_at" in v else None,
        )

    @staticmethod
    def _attempt_value(attempt: Attempt) -> dict[str, Any]:
        data = attempt.model_dump(mode="json", exclude={"number"})
        return cast(
            "dict[str, Any]", _ser.serialize({k: v for k, v in data.items() if v is not None})
        )

    def take_lease(
        self,
        instance_id: str,
        index: int,
        *,
        bounds: dict[str, object],
        worker: str,
        now: datetime,
        lease_until: datetime,
        max_attempts: int,
        indexed: bool = False,
    ) -> LeaseResult:
        # One conditional write per first delivery (see core.decisions.decide_lease):
        #   worker A ── PutItem(attribute_not_exists) ──► a new shard record, attempt 1
        #   (A dies; SQS shows the message again after the visibility timeout)
        #   worker B ── PutItem refused, ALL_OLD: lease expired ──► UpdateItem (the same rule,
        #               conditional again) ──► attempt n+1, A is fenced out
        #   duplicate C while B's lease is live ── PutItem refused, ALL_OLD says so ──► ack, no run
        # The first attempt, by far the most common, is a plain put of the whole record; only a
        # retry or a takeover pays a second request for the update expression. (Same write
        # units on DynamoDB; the emulator spends ~10x longer on the update expression.)
        token = _token()
        attempt = Attempt(number=1, worker=worker, started_at=now)
        item = {
            **_shard_key(instance_id, index),
            "write_token": {"S": token},
            "status": {"S": ShardStatus.RUNNING.value},
            "attempt": {"N": "1"},
            "owner": {"S": worker},
            "lease_until_ms": {"N": str(to_ms(lease_until))},
            "instance_id": {"S": instance_id},
            "idx": {"N": str(index)},
            "bounds": {"S": json.dumps(bounds, sort_keys=True)},
            "attempts": {"L": [self._attempt_value(attempt)]},
            "max_attempts": {"N": str(max_attempts)},
        }
        if indexed:
            item["open_pk"] = {"S": _lease_pk(instance_id, index, self._buckets)}
            item["open_sk"] = {"S": _lease_sk(instance_id, index, lease_until)}
        try:
            self._single(
                f"lease of {instance_id} shard {index}",
                lambda: self._ddb.put_item(
                    TableName=self._table,
                    Item=item,
                    ConditionExpression="attribute_not_exists(pk)",
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                ),
            )
        except ClientError as exc:
            if not _conditional_failure(exc):
                raise
            old: Any = exc.response.get("Item")
            if not old:  # pragma: no cover - a failed condition implies an existing item
                raise
            if _landed(exc, token):  # our own put, whose response was lost
                return LeaseResult(taken=True, shard=self._shard_from(old))
            shard = self._shard_from(old)
            if not _leasable(shard, now=now, max_attempts=max_attempts):
                return LeaseResult(taken=False, shard=shard)  # what the update would refuse
            return self._retake_lease(
                instance_id,
                index,
                previous=shard,
                bounds=bounds,
                worker=worker,
                now=now,
                lease_until=lease_until,
                max_attempts=max_attempts,
                indexed=indexed,
            )
        return LeaseResult(taken=True, shard=self._shard_from(item))

    def _retake_lease(
        self,
        instance_id: str,
        index: int,
        *,
        previous: ShardRecord,
        bounds: dict[str, object],
        worker: str,
        now: datetime,
        lease_until: datetime,
        max_attempts: int,
        indexed: bool = False,
        retries: int = 2,
    ) -> LeaseResult:
        """The next attempt of a shard record that exists: pending, or its lease expired.

        A takeover (the record read `running`, its lease expired) closes the previous attempt's
        entry as `lost` in the same conditional write, fenced on that attempt's number: the
        entry closed is the one whose lease expired, or nothing is written.
        """
        new_attempt = self._attempt_value(Attempt(number=1, worker=worker, started_at=now))
        token = _token()
        n = previous.attempt
        if previous.status is ShardStatus.RUNNING and len(previous.attempts) == n >= 1:
            # attempts[n-1] is closed and attempts[n] set past the list's end (appended): two
            # paths that do not overlap, so one UpdateItem does both.
            lost = self._attempt_value(previous.attempts[-1].lost(now))["M"]
            fields = {"outcome": "outcome", "ended_at": "ended_at", "duration_ms": "duration_ms"}
            fields["error"] = "#err"
            attempts = "".join(f"attempts[{n - 1}].{p} = :lost_{f}, " for f, p in fields.items())
            attempts += f"attempts[{n}] = :new, "
            values = {f":lost_{f}": lost[f] for f in fields} | {":prev": {"N": str(n)}}
            condition = (
                "attempt = :prev AND attempt < :max AND #st = :running AND lease_until_ms <= :now"
            )
        else:
            attempts = "attempts = list_append(if_not_exists(attempts, :empty), :new), "
            values = {":empty": {"L": []}, ":pending": {"S": ShardStatus.PENDING.value}}
            new_attempt = {"L": [new_attempt]}
            condition = (
                "attribute_not_exists(pk) OR (attempt < :max AND (#st = :pending OR "
                "(#st = :running AND lease_until_ms <= :now)))"
            )
        if indexed:
            index_keys = ", open_pk = :lease_pk, open_sk = :lease_sk REMOVE #err"
            values[":lease_pk"] = {"S": _lease_pk(instance_id, index, self._buckets)}
            values[":lease_sk"] = {"S": _lease_sk(instance_id, index, lease_until)}
        else:  # a new attempt starts out of the lease index, as a first one (above)
            index_keys = " REMOVE #err, open_pk, open_sk"
        try:
            out = self._single(
                f"lease of {instance_id} shard {index}",
                lambda: self._ddb.update_item(
                    TableName=self._table,
                    Key=_shard_key(instance_id, index),
                    UpdateExpression=(
                        "SET write_token = :wtok, #st = :running, "
                        "attempt = if_not_exists(attempt, :zero) + :one, "
                        "#owner = :worker, lease_until_ms = :until, instance_id = :iid, idx = :idx, "
                        f"bounds = if_not_exists(bounds, :bounds), {attempts}"
                        f"max_attempts = :max{index_keys}"
                    ),
                    ConditionExpression=condition,
                    ExpressionAttributeNames={"#st": "status", "#owner": "owner", "#err": "error"},
                    ExpressionAttributeValues={
                        **values,
                        ":running": {"S": ShardStatus.RUNNING.value},
                        ":zero": {"N": "0"},
                        ":one": {"N": "1"},
                        ":max": {"N": str(max_attempts)},
                        ":worker": {"S": worker},
                        ":until": {"N": str(to_ms(lease_until))},
                        ":now": {"N": str(to_ms(now))},
                        ":iid": {"S": instance_id},
                        ":idx": {"N": str(index)},
                        ":bounds": {"S": json.dumps(bounds, sort_keys=True)},
                        ":new": new_attempt,
                        ":wtok": {"S": token},
                    },
                    ReturnValues="ALL_NEW",
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                ),
            )
        except ClientError as exc:
            if not _conditional_failure(exc):
                raise
            old: Any = exc.response.get("Item")
            if not old:  # pragma: no cover - a failed condition implies an existing item
                raise
            # Our own lease whose response was lost: taken, as the item shows.
            if _landed(exc, token):
                return LeaseResult(taken=True, shard=self._shard_from(old))
            shard = self._shard_from(old)
            # The record changed since it was read (the expired attempt released it, say):
            # decide again on what it holds now, a bounded number of times.
            if retries > 0 and _leasable(shard, now=now, max_attempts=max_attempts):
                return self._retake_lease(
                    instance_id,
                    index,
                    previous=shard,
                    bounds=bounds,
                    worker=worker,
                    now=now,
                    lease_until=lease_until,
                    max_attempts=max_attempts,
                    indexed=indexed,
                    retries=retries - 1,
                )
            return LeaseResult(taken=False, shard=shard)
        return LeaseResult(taken=True, shard=self._shard_from(out["Attributes"]))

    def _fence(self, attempt: int) -> tuple[str, dict[str, str], dict[str, Any]]:
        return (
            "attempt = :attempt AND #st = :running",
            {"#st": "status"},
            {":attempt": {"N": str(attempt)}, ":running": {"S": ShardStatus.RUNNING.value}},
        )

    def extend_lease(
        self,
        instance_id: str,
        index: int,
        *,
        attempt: int,
        until: datetime,
        was: datetime | None = None,
    ) -> None:
        condition, names, values = self._fence(attempt)
        if was is not None:
            condition += " AND lease_until_ms = :was"
            values[":was"] = {"N": str(to_ms(was))}
        if not self._update_if(
            _shard_key(instance_id, index),
            # the first move puts the lease into the index (see `_lease_pk`)
            "SET lease_until_ms = :until, open_pk = :lease_pk, open_sk = :lease_sk",
            condition,
            names,
            {
                **values,
                ":until": {"N": str(to_ms(until))},
                ":lease_pk": {"S": _lease_pk(instance_id, index, self._buckets)},
                ":lease_sk": {"S": _lease_sk(instance_id, index, until)},
            },
        ):
            raise StaleAttemptError(
                f"{instance_id} shard {index}: attempt {attempt} lost the lease"
            )

    def release_shard(self, instance_id: str, index: int, *, attempt: Attempt) -> None:
        condition, names, values = self._fence(attempt.number)
        names["#owner"] = "owner"
        names["#err"] = "error"
        if not self._update_if(
            _shard_key(instance_id, index),
            f"SET #st = :pending, attempts[{attempt.number - 1}] = :a, #err = :err "
            "REMOVE lease_until_ms, #owner, open_pk, open_sk",
            condition,
            names,
            {
                **values,
                ":pending": {"S": ShardStatus.PENDING.value},
                ":a": self._attempt_value(attempt),
                ":err": {"S": attempt.error or ""},
            },
        ):
            raise StaleAttemptError(
                f"{instance_id} shard {index}: attempt {attempt.number} is stale"
            )

    def complete_shard(
        self,
        instance_id: str,
        index: int,
        *,
        status: ShardStatus,
        attempt: Attempt,
        error: str | None = None,
        result: Mapping[str, Any] | None = None,
        expires_at: datetime | None = None,
    ) -> CompletionResult:
        # The shard's final write and the counter decrement commit together or not at all:
        #   attempt n ── Transact[shard: attempt = n AND running → final; instance: remaining - 1]
        #   zombie attempt n-1 ── same transaction ── shard condition fails ──► nothing changes
        #   contention, throttling ──► sent again (a few rounds, then StoreContendedError)
        #   the counter's condition alone, its item absent ──► made (`_ensure_counter`), again
        completion = ShardCompletion(instance_id, index, status, attempt, error, result, expires_at)
        failed = 0 if status is ShardStatus.SUCCEEDED else 1
        what = f"completion of {instance_id} shard {index}"
        actions = [
            self._final_write(completion),
            self._decrement(instance_id, failed=failed, expires_at=expires_at),
        ]
        for _ in range(3):  # again while the counter, made sure of, takes the count
            outcome = self._transaction(actions, what=what)
            if outcome.kind is Kind.INVALID:
                raise _rejected(outcome, what)
            if outcome.kind is Kind.COMMITTED:
                return self._counter(instance_id)
            if outcome.failed != (1,) or not self._counter_allows(
                instance_id, lambda remaining, _: remaining >= 1
            ):
                break  # the fence, or a counter already at zero
        raise StaleAttemptError(f"{instance_id} shard {index}: attempt {attempt.number} is stale")

    def _counter(self, instance_id: str) -> CompletionResult:
        """The counter right after a completion that decremented it: its item alone."""
        item = self._ddb.get_item(
            TableName=self._table, Key=_counter_key(instance_id), ConsistentRead=True
        )["Item"]
        return CompletionResult(
            remaining=int(item["remaining"]["N"]), failed_shards=int(item["failed_shards"]["N"])
        )

    def _final_write(self, c: ShardCompletion) -> Any:
        """A shard's final status, attempt entry, error and result, fenced on the attempt."""
        condition, names, values = self._fence(c.attempt.number)
        names["#err"] = "error"
        names["#res"] = "result"
        result = c.result
        # the record's TTL, in its final write (none asked: kept)
        expiry = {":exp": {"N": str(_epoch_s(c.expires_at))}} if c.expires_at else {}
        return {
            "Update": {
                "TableName": self._table,
                "Key": _shard_key(c.instance_id, c.index),
                "UpdateExpression": (
                    f"SET #st = :final, attempts[{c.attempt.number - 1}] = :a, "
                    "#err = :err, #res = :res"
                    + (", expires_at = :exp" if expiry else "")
                    + " REMOVE lease_until_ms, open_pk, open_sk"
                ),
                "ConditionExpression": condition,
                "ExpressionAttributeNames": names,
                "ExpressionAttributeValues": {
                    **values,
                    ":final": {"S": c.status.value},
                    ":a": self._attempt_value(c.attempt),
                    ":err": {"S": c.error or ""},
                    ":res": {
                        "S": json.dumps(result, separators=(",", ":")) if result is not None else ""
                    },
                    **expiry,
                },
            }
        }

    # A worker batch's completions in one transaction (up to 10 shards of an SQS batch):
    #   Transact[shard a: attempt = n_a AND running → final, ..., shard j: ...,
    #            instance X: remaining - 7 (remaining >= 7), instance Y: remaining - 3 (>= 3)]
    # A transaction may touch an item once, hence one decrement per instance, by its count.
    # When DynamoDB cancels it, CancellationReasons (one per action, in order) say why:
    #   a shard's ConditionalCheckFailed   ──► that attempt lost its fence: STALE, left out
    #   TransactionConflict, throttling, None ──► retried in the next round (the counts redone)
    #   a counter's ConditionalCheckFailed, its item absent ──► made (`_ensure_counter`), again
    #   a counter's ConditionalCheckFailed, none of its shards failing ──► its shards STALE
    #     (as `complete_shard` would say); with one of them failing, the count was wrong: retry
    #   anything else                       ──► that completion UNWRITTEN (its message returns)
    # A busy instance's counter is contended by every worker finishing its shards: contended
    # rounds go on with capped, jittered backoff for up to COMPLETION_BUDGET_S. Completions
    # still pending after that are UNWRITTEN (the worker makes their messages return soon).

    #: Completions per transaction: 50 shard writes and at most 50 counters are 100 actions.
    COMPLETIONS_PER_TRANSACTION = 50
    #: Rounds, and the time they may take, before contended completions are UNWRITTEN (well
    #: inside the 10 s a batch keeps between its commit and its leases' end).
    COMPLETION_ROUNDS = 12
    COMPLETION_BUDGET_S = 5.0

    def complete_shards(self, completions: Sequence[ShardCompletion]) -> list[CompletionVerdict]:
        keys = [(c.instance_id, c.index) for c in completions]
        if len(set(keys)) != len(keys):
            raise ValueError("a shard appears twice among the completions")
        verdicts = [CompletionVerdict.UNWRITTEN] * len(completions)
        step = self.COMPLETIONS_PER_TRANSACTION
        for first in range(0, len(completions), step):
            chunk = list(range(first, min(first + step, len(completions))))
            self._complete_chunk(completions, chunk, verdicts)
        return verdicts

    def _complete_chunk(
        self,
        completions: Sequence[ShardCompletion],
        pending: list[int],
        verdicts: list[CompletionVerdict],
    ) -> None:
        """Commit `pending` completions (see above), setting their verdicts."""
        budget_ends = time.monotonic() + self.COMPLETION_BUDGET_S
        for round_ in range(self.COMPLETION_ROUNDS):
            if not pending:
                return
            by_instance: dict[str, list[int]] = {}
            for n in pending:
                by_instance.setdefault(completions[n].instance_id, []).append(n)
            actions = [self._final_write(completions[n]) for n in pending]
            for instance_id, ns in by_instance.items():
                failed = sum(1 for n in ns if completions[n].status is not ShardStatus.SUCCEEDED)
                expiry = max((e for n in ns if (e := completions[n].expires_at)), default=None)
                actions.append(
                    self._decrement(instance_id, failed=failed, count=len(ns), expires_at=expiry)
                )
            sent = self._send(actions)
            if sent.kind is Kind.COMMITTED:
                for n in pending:
                    verdicts[n] = CompletionVerdict.COMMITTED
                return
            kinds = [transact.reason_kind(code) for code in sent.reasons]
            if not kinds:  # the whole request: sent again if contended, else all UNWRITTEN
                if sent.kind is not Kind.RETRY:
                    return
                kinds = [Kind.RETRY] * len(actions)
            settled: set[int] = set()
            contended = Kind.RETRY in kinds
            for n, kind in zip(pending, kinds[: len(pending)], strict=True):
                if kind in (Kind.RETRY, Kind.COMMITTED):
                    continue
                settled.add(n)  # an error of its own: UNWRITTEN, its message comes back
                if kind is Kind.CONDITION_FAILED:
                    verdicts[n] = CompletionVerdict.STALE  # this attempt lost its fence
            counters = zip(by_instance.items(), kinds[len(pending) :], strict=True)
            for (instance_id, ns), kind in counters:
                if kind in (Kind.RETRY, Kind.COMMITTED):
                    continue
                if kind is Kind.CONDITION_FAILED and settled.intersection(ns):
                    continue  # counted with a shard that failed: retried with the count redone
                if kind is Kind.CONDITION_FAILED and self._takes(instance_id, len(ns)):
                    continue  # it had no counter item: there is one now, again
                settled.update(ns)
                if kind is Kind.CONDITION_FAILED:  # the counter alone refused, as in
                    for n in ns:  # complete_shard: its shards are stale
                        verdicts[n] = CompletionVerdict.STALE
            pending = [n for n in pending if n not in settled]
            left = budget_ends - time.monotonic()
            if contended and pending:
                if left <= 0:
                    return
                time.sleep(min(left, transact.backoff_s(round_, cap_s=0.5)))

    def _takes(self, instance_id: str, count: int) -> bool:
        """`_counter_allows` for a batch's decrement by `count`; a contended one is left for a
        later round."""
        try:
            return self._counter_allows(instance_id, lambda remaining, _: remaining >= count)
        except StoreContendedError:
            return True

    def dead_letter_shard(
        self,
        instance_id: str,
        index: int,
        *,
        bounds: dict[str, object],
        max_attempts: int,
        error: str,
        now: datetime,
        expires_at: datetime | None = None,
    ) -> CompletionResult | None:
        # Read the shard, then Transact[shard: if still as read → failed, its running attempt
        # closed `lost`; instance: remaining - 1]:
        #   the shard already ended (read, or its condition failed) ──► None
        #   the shard moved since the read (a lease taken, an attempt released) ──► read again
        #   the counter at zero ──► None
        #   contention, throttling ──► sent again (a few rounds, then StoreContendedError)
        what = f"dead letter of {instance_id} shard {index}"
        for _ in range(transact.ROUNDS):
            shard = self.get_shard(instance_id, index)
            if shard is not None and shard.status.final:
                return None
            outcome = self._transaction(
                [
                    self._dead_letter_write(
                        instance_id, index, shard, bounds, max_attempts, error, now, expires_at
                    ),
                    self._decrement(instance_id, failed=1, expires_at=expires_at),
                ],
                what=what,
            )
            if outcome.kind is Kind.INVALID:
                raise _rejected(outcome, what)
            if outcome.kind is Kind.COMMITTED:
                return self._counter(instance_id)
            if 0 not in outcome.failed:  # the counter's condition alone:
                if self._counter_allows(instance_id, lambda remaining, _: remaining >= 1):
                    continue  # it had no item: there is one now
                return None  # it is at zero already
        raise StoreContendedError(f"{what}: the shard kept changing; try again")

    def _dead_letter_write(
        self,
        instance_id: str,
        index: int,
        shard: ShardRecord | None,
        bounds: dict[str, object],
        max_attempts: int,
        error: str,
        now: datetime,
        expires_at: datetime | None = None,
    ) -> Any:
        """The shard's end `failed`, conditioned on the state read (`shard`): no record, pending,
        or running attempt n, whose entry is closed `lost` in the same write."""
        names = {"#st": "status", "#err": "error"}
        values: dict[str, Any] = {
            ":failed": {"S": ShardStatus.FAILED.value},
            ":err": {"S": error},
            ":iid": {"S": instance_id},
            ":idx": {"N": str(index)},
            ":bounds": {"S": json.dumps(bounds, sort_keys=True)},
            ":zero": {"N": "0"},
            ":max": {"N": str(max_attempts)},
        }
        closing = ""
        if expires_at is not None:  # the record's TTL, in its final write
            closing += ", expires_at = :exp"
            values[":exp"] = {"N": str(_epoch_s(expires_at))}
        if shard is None:
            condition = "attribute_not_exists(pk)"
        elif shard.status is ShardStatus.PENDING:
            condition = "#st = :pending"  # no attempt runs, whichever was the last
            values[":pending"] = {"S": ShardStatus.PENDING.value}
        else:
            n = shard.attempt
            condition = "#st = :running AND attempt = :prev"
            values[":running"] = {"S": ShardStatus.RUNNING.value}
            values[":prev"] = {"N": str(n)}
            if len(shard.attempts) == n >= 1 and shard.attempts[-1].outcome is None:
                lost = self._attempt_value(shard.attempts[-1].lost(now, error))["M"]
                for field in ("outcome", "ended_at", "duration_ms", "error"):
                    path = "#err" if field == "error" else field
                    closing += f", attempts[{n - 1}].{path} = :lost_{field}"
                    values[f":lost_{field}"] = lost[field]
        return {
            "Update": {
                "TableName": self._table,
                "Key": _shard_key(instance_id, index),
                "UpdateExpression": (
                    "SET #st = :failed, #err = :err, instance_id = :iid, idx = :idx, "
                    "bounds = if_not_exists(bounds, :bounds), "
                    "attempt = if_not_exists(attempt, :zero), "
                    f"max_attempts = if_not_exists(max_attempts, :max){closing} "
                    "REMOVE lease_until_ms, open_pk, open_sk"
                ),
                "ConditionExpression": condition,
                "ExpressionAttributeNames": names,
                "ExpressionAttributeValues": values,
            }
        }

    def _decrement(
        self,
        instance_id: str,
        *,
        failed: int,
        count: int = 1,
        expires_at: datetime | None = None,
    ) -> Any:
        """The instance's counter down by `count` shards, `failed` of them not succeeded: an
        update of the counter item alone (~60 bytes, no index key), never of the instance item
        (its plan, its index entries). Refused on a counter item that does not exist (see
        `_ensure_counter`). `expires_at`: the completed shards' TTL, which the counter takes
        in the same write (the last decrement's is the counter's)."""
        expiry = {":exp": {"N": str(_epoch_s(expires_at))}} if expires_at else {}
        return {
            "Update": {
                "TableName": self._table,
                "Key": _counter_key(instance_id),
                "UpdateExpression": (
                    "SET remaining = remaining - :n, failed_shards = failed_shards + :failed"
                    + (", expires_at = :exp" if expiry else "")
                ),
                "ConditionExpression": "remaining >= :n",
                "ExpressionAttributeValues": {
                    ":n": {"N": str(count)},
                    ":failed": {"N": str(failed)},
                    **expiry,
                },
            }
        }

    def get_shard(self, instance_id: str, index: int) -> ShardRecord | None:
        item = self._ddb.get_item(
            TableName=self._table, Key=_shard_key(instance_id, index), ConsistentRead=True
        ).get("Item")
        return self._shard_from(dict(item)) if item else None

    def list_shards(self, instance_id: str) -> list[ShardRecord]:
        return [
            self._shard_from(item)
            for item in self._paginate(
                "query",
                TableName=self._table,
                KeyConditionExpression="pk = :pk AND begins_with(sk, :shard)",
                ExpressionAttributeValues={
                    ":pk": {"S": f"INST#{instance_id}"},
                    ":shard": {"S": "SHARD#"},
                },
                ConsistentRead=True,
            )
        ]

    def record_effect(
        self,
        key: str,
        *,
        instance_id: str,
        index: int,
        attempt: int,
        writes: Sequence[Mapping[str, Any]] = (),
        listed: bool = True,
        expires_at: datetime | None = None,
    ) -> bool:
        # The effect item (it names instance, shard and attempt), fenced on the attempt, and
        # the caller's writes, in one transaction:
        #   Transact[0 shard: attempt = n AND running; 1 effect: if new; 2.. the caller's writes]
        #   a second run ── 1 fails ──► False: skip the effect
        #   a zombie (attempt n-1) ── 0 fails ──► StaleAttemptError, nothing written
        #   a caller's write's condition fails ──► EffectConditionError, nothing written
        #   contention, throttling ──► sent again (a few rounds, then StoreContendedError)
        #   anything else (ValidationError, an item too large) ──► WriteRejectedError
        # The shard is only checked, never grown, except for the attempt's first few keys
        # (`listed`), which are appended to its record so that operators see them even if
        # the attempt dies; the rest are counted when the attempt ends.
        condition, names, values = self._fence(attempt)
        fence: dict[str, Any] = {
            "TableName": self._table,
            "Key": _shard_key(instance_id, index),
            "ConditionExpression": condition,
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
        }
        if listed:
            fence["UpdateExpression"] = (
                f"SET attempts[{attempt - 1}].#keys = list_append("
                f"if_not_exists(attempts[{attempt - 1}].#keys, :empty), :key)"
            )
            fence["ExpressionAttributeNames"] = {**names, "#keys": "keys"}
            fence["ExpressionAttributeValues"] = {
                **values,
                ":empty": {"L": []},
                ":key": {"L": [{"S": key}]},
            }
        effect = {
            "TableName": self._table,
            "Item": _to_item(
                {
                    "pk": f"EFFECT#{key}",
                    "sk": "EFFECT",
                    "kind": "effect",
                    "instance_id": instance_id,
                    "idx": index,
                    "attempt": attempt,
                    "expires_at": _epoch_s(expires_at) if expires_at else None,  # TTL
                }
            ),
            "ConditionExpression": "attribute_not_exists(pk)",
        }
        outcome = self._transaction(
            [
                {"Update" if listed else "ConditionCheck": fence},
                {"Put": effect},
                *(self._on_table(w) for w in writes),
            ],
            what=f"effect {key!r}",
        )
        if outcome.kind is Kind.COMMITTED:
            return True
        if outcome.kind is Kind.CONDITION_FAILED:
            if 0 in outcome.failed:
                raise StaleAttemptError(
                    f"{instance_id} shard {index}: attempt {attempt} lost the lease"
                )
            if 1 in outcome.failed:
                return False
            write = outcome.failed[0] - 2
            raise EffectConditionError(
                f"effect {key!r}: the condition of its write {write} failed; nothing was "
                "written and the key is not claimed",
                index=write,
            )
        # WriteRejectedError even for a request refused as a whole (the 4 MB transaction
        # limit, a malformed write of the caller's): the handler's contract names no AWS error.
        raise WriteRejectedError(
            f"effect {key!r} not recorded: {outcome.describe()}"
        ) from outcome.cause

    def _on_table(self, write: Mapping[str, Any]) -> Any:
        """A caller's transaction entry, aimed at this table unless it names one."""
        ((action, body),) = write.items()
        return {action: {"TableName": self._table, **body}}

    # -- helpers ----------------------------------------------------------------------------

    def _gather(
        self,
        queries: Sequence[Mapping[str, Any]],
        *,
        order: str,
        limit: int | None,
        newest_first: bool = False,
    ) -> list[dict[str, Any]]:
        """Scatter-gather: every query (one per bucket, each in the index's sort order by the
        string attribute `order`), merged into one sorted list of at most `limit` items.

        The first page of every query is asked for at once (a few threads); later pages only
        as the merge reaches them. A page holds about twice a bucket's share of `limit`, so
        the merge reads little past the `limit` items it returns, however many buckets.
        """
        page = {"Limit": gather_page(limit, len(queries))} if limit else {}
        requests = [{"TableName": self._table, **q, **page} for q in queries]
        if not requests:
            return []
        with ThreadPoolExecutor(max_workers=min(GATHER_THREADS, len(requests))) as pool:
            firsts = list(pool.map(lambda r: self._ddb.query(**r), requests))
        streams = [self._pages(r, first) for r, first in zip(requests, firsts, strict=True)]
        merged: Iterable[dict[str, Any]] = heapq.merge(
            *streams, key=lambda item: str(item[order]["S"]), reverse=newest_first
        )
        return list(merged) if limit is None else self._take(iter(merged), limit)

    def _pages(self, request: dict[str, Any], page: Any) -> Iterator[dict[str, Any]]:
        """The items of one query, from its first `page` on, the next page asked when needed."""
        while True:
            yield from page.get("Items", [])
            last = page.get("LastEvaluatedKey")
            if not last:
                return
            page = self._ddb.query(**request, ExclusiveStartKey=last)

    def _paginate(self, operation: str, **kwargs: Any) -> Iterator[dict[str, Any]]:
        paginator = self._ddb.get_paginator(operation)  # type: ignore[call-overload]
        for page in paginator.paginate(**kwargs):
            yield from page.get("Items", [])

    @staticmethod
    def _take(items: Iterator[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
        out = []
        for item in items:
            out.append(item)
            if len(out) >= limit:
                break
        return out
