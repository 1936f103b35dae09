"""The table's key schema: every key, prefix and partition function. The items, their keys and
indexes are tabled in docs/operations.md ("Ops on the records").

`<k>` in an index partition is the bucket of the item's own id over the store's bucket count
(`iotsched.core.buckets`): readers query every bucket and merge in the index's order. Items
written under the former constant keys are still read, and move to their bucket's key at
their next write (docs/design.md, section 20, "Keys and buckets").
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date, datetime
from typing import Any

from iotsched.core.buckets import DEFAULT_BUCKETS, bucket_of, partition, partitions
from iotsched.core.instance_record import InstanceStatus, incarnation_order, instance_id_in
from iotsched.core.timeutil import floor_minute, iso

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
#: The counter item's sort key, in the instance's shard partition (`INST#<instance id>`): its
#: writers are the completions of those shards; under the task's partition (`TASK#<task>`)
#: every instance of a task would share one partition key's throughput, and the task's
#: instance listing (and the documented query of it) would meet counters among instances.
COUNTER_SK = "COUNT"


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


def _tasks_pk(task_id: str, buckets: int) -> str:
    """The `by_date` partition of a task item (the task list's sparse index entry)."""
    return partition(TASKS_PREFIX, task_id, buckets)


#: Named calendars in `by_date` (keys only): one partition, written only when a calendar is
#: applied. (No `<task>#<date>` of an instance is `CALENDARS`: it holds no `#`.)
CALENDARS_PARTITION = "CALENDARS"


def _calendar_key(name: str) -> dict[str, Any]:
    return {"pk": {"S": f"CALENDAR#{name}"}, "sk": {"S": "CALENDAR"}}


def _task_key(task_id: str) -> dict[str, Any]:
    return {"pk": {"S": f"TASK#{task_id}"}, "sk": {"S": "DEF"}}


def _instance_key(instance_id: str) -> dict[str, Any]:
    # `INST#<slot>[~suffix]`, or `INST~v<n>#<slot>[~suffix]` for a task created again (its
    # incarnation's instances one range of keys: `incarnation_order`)
    task_id, _, slot = instance_id.rpartition("@")
    if not task_id or not slot:
        raise KeyError(f"not an instance id: {instance_id!r}")
    return {"pk": {"S": f"TASK#{task_id}"}, "sk": {"S": f"INST{incarnation_order(instance_id)}"}}


def _instance_id_of(key: Mapping[str, Any]) -> str:
    """The instance id an instance item's key (or an index entry's table key) stands for."""
    task_id = str(key["pk"]["S"]).removeprefix("TASK#")
    return instance_id_in(task_id, str(key["sk"]["S"]).removeprefix("INST"))


def _date_pk(task_id: str, day: date) -> str:
    """The by_date partition of a task's instances for one business date."""
    return f"{task_id}#{day.isoformat()}"


def _lease_sk(instance_id: str, index: int, lease_until: datetime) -> str:
    # The lease's end floored to its minute: a renewal that leaves the end in the same minute
    # writes the index keys unchanged, which DynamoDB does not write to the index (a move
    # costs a delete and a put), so a lease renewed every few seconds moves its entry about
    # once a minute. Floored, never rounded up: an expired lease's entry is always at or before
    # the sweep that finds it; the sweeper reads each entry's record and keeps only the leases
    # that really ended (the index holds keys only).
    return f"{iso(floor_minute(lease_until))}#{instance_id}#{index:06d}"


# The lease index is lazy. A lease enters `by_deadline` with its attempt's first renewal (or
# any later move of its end), never with the take: most shards end within one renewal period
# and so never write the index (an entry costs a put on entering and a delete on leaving, and
# a delete plus a put each time its end enters another minute: `_lease_sk`). Until then the attempt's worker is covered by
# its message: the worker holds every record of its invocation on a visibility of one lease
# (services.work.VisibilityHold), so a worker that dies before its first renewal has its
# record back within a lease; the delivery that finds the lease still live indexes it (a
# move of its end to the same end), and the sweeper takes it from there. A lease shorter than
# that hold (a short timeout_s) is indexed with its take (`take_lease(indexed=True)`).
def _lease_pk(instance_id: str, index: int, buckets: int) -> str:
    return partition(LEASE_PREFIX, f"{instance_id}#{index:06d}", lease_buckets(buckets))


#: Lease partitions per index bucket: a running shard writes its lease's entry (a put, a move
#: about once a minute, a delete) more than any other index family writes per shard, so the
#: leases take twice the deployment's buckets (`IndexBuckets`; they only ever grow, so this
#: count does too, and a reader reads every one).
LEASE_BUCKETS_PER_BUCKET = 2


def lease_buckets(buckets: int) -> int:
    """How many `LEASE#<k>` partitions a deployment of `buckets` index buckets writes."""
    return buckets * LEASE_BUCKETS_PER_BUCKET


#: An instance keeps its shard records in parts: one partition key per this many of its
#: shards, up to `SHARD_PARTS`. Each record is written at its take and at its end, so one
#: partition key for all of them (1,000 write units a second) would bound how fast a large
#: instance's shards may start: its parts take its starts side by side, about 300 a second
#: each (64 parts: about 20,000).
SHARDS_PER_PART = 1_000
SHARD_PARTS = 64


def shard_parts(shards: int) -> int:
    """The partition keys an instance of `shards` shards keeps its shard records on."""
    return max(1, min(SHARD_PARTS, -(-shards // SHARDS_PER_PART)))


def _shard_pk(instance_id: str, index: int, parts: int) -> str:
    """Shard `index`'s partition: `INST#<id>` for an instance of one part (every instance
    stored before the parts), else `INST#<id>#P<index % parts>`."""
    if parts <= 1:
        return f"INST#{instance_id}"
    return f"INST#{instance_id}#P{index % parts}"


def _shard_key(instance_id: str, index: int, parts: int) -> dict[str, Any]:
    return {"pk": {"S": _shard_pk(instance_id, index, parts)}, "sk": {"S": f"SHARD#{index:06d}"}}


def _counter_key(instance_id: str) -> dict[str, Any]:
    return {"pk": {"S": f"INST#{instance_id}"}, "sk": {"S": COUNTER_SK}}


#: An instance kept in parts counts its ended shards on stripes, `INST#<id>#C<j>` / `COUNT`,
#: instead of one counter item: a completed batch adds to one stripe, so at 10,000 starts a
#: second no item takes every batch's write. Readers read every stripe (a batch read).
COUNTER_STRIPES = 4


def counter_stripes(parts: int) -> int:
    """The counter stripes of an instance of `parts` shard parts (one part: none, its one
    counter item `_counter_key`)."""
    return 0 if parts <= 1 else min(parts, COUNTER_STRIPES)


def _stripe_key(instance_id: str, stripe: int) -> dict[str, Any]:
    return {"pk": {"S": f"INST#{instance_id}#C{stripe}"}, "sk": {"S": COUNTER_SK}}


def _gate_key(instance_id: str, gate: str | None) -> dict[str, Any]:
    """The key of a shard-start gate: the instance's own (`gate` None), beside its counter, or
    one that several instances share (`GATE#<gate>`)."""
    pk = f"INST#{instance_id}" if gate is None else f"GATE#{gate}"
    return {"pk": {"S": pk}, "sk": {"S": "GATE"}}


def _key_of(key: Mapping[str, Any]) -> tuple[str, str]:
    return (key["pk"]["S"], key["sk"]["S"])


def due_partition(task_id: str, buckets: int) -> str:
    """A task's due key: `DUE#<k>`, k its bucket."""
    return partition(DUE_PARTITION, task_id, buckets)


def submission_partition(instance_id: str, buckets: int) -> str:
    """A submitted instance's due key: `SUBMITTED#<k>`, k the bucket of its id."""
    return partition(SUBMISSION_PARTITION, instance_id, buckets)


def _children_pk(task_id: str) -> str:
    """The partition of a task's dependency edges: one item per task triggered after it."""
    return f"CHILDREN#{task_id}"


def _request_key(request_key: str) -> dict[str, Any]:
    """The key of a client request's record (the instance it started)."""
    return {"pk": {"S": f"REQUEST#{request_key}"}, "sk": {"S": "REQUEST"}}


def _effect_pk(key: str) -> str:
    """The partition of an effect key's item."""
    return f"EFFECT#{key}"


def _tick_key(bucket: int) -> dict[str, Any]:
    """The key of a bucket dispatcher's lease."""
    return {"pk": {"S": f"TICK#{bucket}"}, "sk": {"S": "LEASE"}}


#: Alerts by day in `by_status` (`ALERTS#<day raised>#<k>`); the bare prefix is the one
#: partition of alerts recorded before the log had days and buckets, still read.
ALERT_PREFIX = "ALERTS"


def _alerts_pk(alert_id: str, raised_at: datetime, buckets: int) -> str:
    """The `by_status` partition of an alert: its day (UTC), then the bucket of its id."""
    return f"{_day_prefix(raised_at.date())}#{bucket_of(alert_id, buckets)}"


def _day_prefix(day: date) -> str:
    return f"{ALERT_PREFIX}#{day.isoformat()}"


def _alert_key(alert_id: str) -> dict[str, Any]:
    """The key of an alert's record."""
    return {"pk": {"S": f"ALERT#{alert_id}"}, "sk": {"S": "ALERT"}}
