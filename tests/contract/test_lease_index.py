"""The lease index on DynamoDB: sharded partitions (`LEASE#<k>`) and what a shard writes there.

Index writes are counted from the emulator's own memory (no request): for each write to an
item, its `by_deadline` keys before and after; a key that appears is an index put, one that
goes a delete, one that moves both (DynamoDB bills each like a table write).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from moto.backends import get_backend

from iotsched.adapters.dynamodb import DynamoDBStore
from iotsched.adapters.dynamodb.keys import lease_buckets
from iotsched.core.buckets import partition, partitions
from iotsched.core.shard_record import ShardStatus
from iotsched.core.timeutil import floor_minute
from tests.contract.test_store import S, claimed, ended, lease
from tests.support import REGION, T0, AwsResources

pytestmark = pytest.mark.moto

INDEX_KEYS = ("open_pk", "open_sk")
ACCOUNT = "123456789012"


def _index_keys(table: str, key: Mapping[str, Any]) -> tuple[str, str] | None:
    item = get_backend("dynamodb")[ACCOUNT][REGION].get_item(table, dict(key))
    if item is None:
        return None
    attrs = item.to_json()["Attributes"]
    if not all(name in attrs for name in INDEX_KEYS):
        return None
    return attrs["open_pk"]["S"], attrs["open_sk"]["S"]


def _written(operation: str, params: Mapping[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    if operation == "PutItem":
        yield params["TableName"], {k: params["Item"][k] for k in ("pk", "sk")}
    elif operation in ("UpdateItem", "DeleteItem"):
        yield params["TableName"], dict(params["Key"])
    elif operation == "TransactWriteItems":
        for entry in params["TransactItems"]:
            ((_action, body),) = entry.items()
            key = body.get("Key") or {k: body["Item"][k] for k in ("pk", "sk")}
            yield body["TableName"], dict(key)


class IndexWrites:
    """Table writes and `by_deadline` index puts and deletes, by item kind (`INST/SHARD`: the
    shard records; pk and sk prefixes)."""

    def __init__(self) -> None:
        self.table: Counter[str] = Counter()
        self.puts: Counter[str] = Counter()
        self.deletes: Counter[str] = Counter()
        self.partitions: Counter[str] = Counter()

    def index(self, kind: str) -> int:
        return self.puts[kind] + self.deletes[kind]


@contextmanager
def counting(store: DynamoDBStore) -> Iterator[IndexWrites]:
    counts = IndexWrites()
    events = store._ddb.meta.events

    def before(params: Mapping[str, Any], model: Any, context: dict[str, Any], **_: Any) -> None:
        writes = list(_written(model.name, params))
        context["lease_index_before"] = [(t, k, _index_keys(t, k)) for t, k in writes]

    def after(model: Any, context: dict[str, Any], **_: Any) -> None:
        for table, key, was in context.pop("lease_index_before", []):
            now = _index_keys(table, key)
            kind = f"{key['pk']['S'].split('#')[0]}/{key['sk']['S'].split('#')[0]}"
            counts.table[kind] += 1
            if was == now:
                continue
            if was is not None:
                counts.deletes[kind] += 1
            if now is not None:
                counts.puts[kind] += 1
                counts.partitions[now[0]] += 1

    events.register("before-parameter-build.dynamodb", before)
    events.register("after-call.dynamodb", after)
    try:
        yield counts
    finally:
        events.unregister("before-parameter-build.dynamodb", before)
        events.unregister("after-call.dynamodb", after)


def _store(aws: AwsResources, buckets: int = 32) -> DynamoDBStore:
    return DynamoDBStore(aws.clients().dynamodb(), aws.table, buckets=buckets)


def test_a_shard_that_ends_before_its_first_renewal_writes_no_index_entry(
    aws_resources: AwsResources,
) -> None:
    store = _store(aws_resources)
    inst = claimed(store, shards=2)
    with counting(store) as counts:
        taken = lease(store, inst, 0, for_s=20).shard
        store.complete_shard(
            inst.instance_id,
            0,
            status=ShardStatus.SUCCEEDED,
            attempt=ended(taken, at=T0 + 2 * S, outcome="succeeded"),
        )
    assert counts.table["INST/SHARD"] == 2  # the lease's put, the final write
    assert (counts.puts["INST/SHARD"], counts.deletes["INST/SHARD"]) == (0, 0)


@pytest.mark.parametrize("length_s", [30, 120])
def test_a_long_shard_moves_its_index_entry_once_a_minute_not_at_each_renewal(
    aws_resources: AwsResources, length_s: int
) -> None:
    """A shard on a 20 s lease renewed every third of it. The first renewal puts the entry;
    a later one moves it (a delete and a put) only when the lease's end enters another minute
    (the entry's key holds the end's minute); the final write deletes it. None for the take."""
    store = _store(aws_resources)
    inst = claimed(store, shards=1)
    renewals = [T0 + timedelta(seconds=20 * n / 3) for n in range(1, length_s * 3 // 20 + 1)]
    minutes = {floor_minute(at + 20 * S) for at in renewals}
    with counting(store) as counts:
        taken = lease(store, inst, 0, for_s=20).shard
        for at in renewals:
            store.extend_lease(inst.instance_id, 0, attempt=1, until=at + 20 * S)
        store.complete_shard(
            inst.instance_id,
            0,
            status=ShardStatus.SUCCEEDED,
            attempt=ended(taken, at=T0 + length_s * S, outcome="succeeded"),
        )
    assert counts.table["INST/SHARD"] == 1 + len(renewals) + 1
    assert counts.puts["INST/SHARD"] == counts.deletes["INST/SHARD"] == len(minutes)
    assert len(minutes) < len(renewals) / 3  # far fewer than one move per renewal


def test_a_lease_whose_entry_is_in_the_current_minute_is_found_only_once_ended(
    aws_resources: AwsResources,
) -> None:
    """An entry's key holds its lease's minute, so a sweep in that minute reads leases still
    live beside ended ones: it returns only those whose lease really ended."""
    store = _store(aws_resources)
    inst = claimed(store, shards=2)
    for index, end_s in ((0, 10), (1, 50)):
        lease(store, inst, index, for_s=5)
        store.extend_lease(inst.instance_id, index, attempt=1, until=T0 + end_s * S)
    assert [s.index for s in store.expired_leases(T0 + 30 * S)] == [0]
    assert sorted(s.index for s in store.expired_leases(T0 + 50 * S)) == [0, 1]


def test_leases_land_in_several_lease_partitions(aws_resources: AwsResources) -> None:
    """Each lease's entry is under `LEASE#<k>`, k from its instance id and shard index over the
    store's buckets; the sweeper's read gathers every bucket in lease-end order."""
    store = _store(aws_resources, buckets=8)
    inst = claimed(store, shards=40)
    with counting(store) as counts:
        for index in range(40):
            lease(store, inst, index, for_s=10)
            # renewed: each to its own end, in reverse index order, over three minutes
            store.extend_lease(inst.instance_id, index, attempt=1, until=T0 + (200 - 3 * index) * S)
    used = set(counts.partitions)
    assert used <= set(partitions("LEASE", lease_buckets(8)))
    assert len(used) >= 4  # 40 keys over 8 buckets: spread, not one partition
    # leases take twice the deployment's buckets: partitions past the eighth are written
    assert any(int(pk.rsplit("#", 1)[1]) >= 8 for pk in used), used
    for index in range(40):
        item = get_backend("dynamodb")[ACCOUNT][REGION].get_item(
            aws_resources.table,
            {"pk": {"S": f"INST#{inst.instance_id}"}, "sk": {"S": f"SHARD#{index:06d}"}},
        )
        pk = item.to_json()["Attributes"]["open_pk"]["S"]
        assert pk == partition("LEASE", f"{inst.instance_id}#{index:06d}", lease_buckets(8))
    expired = store.expired_leases(T0 + 200 * S)
    assert [s.index for s in expired] == list(range(39, -1, -1))  # earliest end first
    # A limit takes the earliest minute's entries first (ends 83 s to 119 s: shards 27 to 39),
    # then returns them in the order of their ends.
    first = [s.index for s in store.expired_leases(T0 + 200 * S, limit=5)]
    assert len(first) == 5 and set(first) <= set(range(27, 40)) and first == sorted(first)[::-1]


def test_raising_the_bucket_count_keeps_every_lease_read(aws_resources: AwsResources) -> None:
    """Leases written under 4 buckets are all read by a store of 8 (buckets only ever grow)."""
    before = _store(aws_resources, buckets=4)
    inst = claimed(before, shards=12)
    for index in range(12):
        lease(before, inst, index, for_s=10)
        before.extend_lease(inst.instance_id, index, attempt=1, until=T0 + (10 + index) * S)
    after = _store(aws_resources, buckets=8)
    assert [s.index for s in after.expired_leases(T0 + 60 * S)] == list(range(12))


# -- what a worker's shards write, end to end on the emulator ------------------------------------


def _worker(aws: AwsResources, handler: Any) -> tuple[Any, Any, list[Any]]:
    """Wiring on the emulator (manual clock, renewals stepped by hand), one task of 10 static
    shards fired, and its 10 messages received (not deleted) as the event source would."""
    import dataclasses

    from iotsched import bootstrap
    from iotsched.clock import ManualClock
    from iotsched.services.definitions.apply import apply_tasks
    from iotsched.services.execution.outcomes import Delivery
    from iotsched.services.execution.schedules import HeldRenewals
    from iotsched.services.scheduling.tick import dispatch_tick
    from tests.support import task

    clock = ManualClock(T0 + S)
    services = bootstrap.build(
        aws.settings, clock=clock, handlers={"h": handler}, clients=aws.clients()
    )
    services = dataclasses.replace(services, renewals=HeldRenewals())
    definition = task(
        "t",
        handler="h",
        timeout_s=300,
        sharding={"strategy": "static", "shards": [{"n": i} for i in range(10)]},
    )
    apply_tasks([definition], services.tasks, now=T0 - timedelta(hours=1))
    dispatch_tick(T0, services)
    sqs = aws.client("sqs")
    received: list[dict[str, Any]] = []
    for _ in range(10):
        received += sqs.receive_message(
            QueueUrl=aws.shard_queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=0
        ).get("Messages", [])
        if len(received) >= 10:
            break
    assert len(received) == 10
    return services, clock, [Delivery(m["Body"], m["ReceiptHandle"]) for m in received]


def _run(services: Any, deliveries: list[Any], gap: timedelta = timedelta(0)) -> None:
    """One invocation; `gap` between records (a finished shard whose commit is due by the next
    record's start is committed then, as the batch's timer would have done)."""
    from iotsched.services.execution.batch import ShardBatch
    from iotsched.services.execution.outcomes import (
        PendingShard,
        ShardOutcome,
    )

    batch = ShardBatch(services, worker="w1")
    batch.expect(deliveries)
    results = []
    for d in deliveries:
        results.append(batch.run(d))
        services.clock.advance(gap)
    batch.end()
    outcomes = [r.outcome if isinstance(r, PendingShard) else r for r in results]
    assert outcomes == [ShardOutcome.SUCCEEDED] * len(deliveries)


def test_a_batch_of_quick_shards_writes_no_lease_index_entry(aws_resources: AwsResources) -> None:
    services, _clock, deliveries = _worker(aws_resources, lambda ctx: None)
    store = services.instances
    assert isinstance(store, DynamoDBStore)
    with counting(store) as counts:
        _run(services, deliveries)
    # per shard: the lease's put and the final write (one transaction for the batch)
    assert counts.table["INST/SHARD"] == 2 * 10
    assert counts.index("INST/SHARD") == 0


def test_a_30_s_shard_pays_its_renewals_table_and_index_writes(
    aws_resources: AwsResources,
) -> None:
    """Each shard runs 30 s on the default 20 s lease, renewed every third of it: 4 renewals
    (the first puts the lease's index entry, a later one moves it only into another minute),
    then the final write (which deletes it): none for the take."""
    from iotsched.services.execution.schedules import HeldRenewals

    def handler(ctx: Any) -> None:
        for _ in range(4):
            clock.advance(timedelta(seconds=20 / 3))
            renewals.step()
        clock.advance(timedelta(seconds=30 - 4 * 20 / 3))

    services, clock, deliveries = _worker(aws_resources, handler)
    renewals = services.renewals
    assert isinstance(renewals, HeldRenewals)
    store = services.instances
    assert isinstance(store, DynamoDBStore)
    with counting(store) as counts:
        # a long shard commits alone: 5 s (the batch's hold) after it ended
        _run(services, deliveries[:3], gap=timedelta(seconds=5))
    per_shard = {k: v / 3 for k, v in counts.table.items()}
    assert per_shard["INST/SHARD"] == 1 + 4 + 1  # the take, 4 renewals, the final write
    # the lease's end stays in one minute for all but a shard whose renewals cross one
    assert 1 <= counts.puts["INST/SHARD"] / 3 == counts.deletes["INST/SHARD"] / 3 < 2


def test_a_lease_left_in_the_partition_of_earlier_versions_is_still_read(
    aws_resources: AwsResources,
) -> None:
    """Earlier versions indexed every lease under the one `LEASE` partition: a worker that died
    at an upgrade left its lease there, and the sweeper still finds it."""
    store = _store(aws_resources)
    inst = claimed(store, shards=2)
    lease(store, inst, 0, for_s=10)
    store._ddb.update_item(
        TableName=aws_resources.table,
        Key={"pk": {"S": f"INST#{inst.instance_id}"}, "sk": {"S": "SHARD#000000"}},
        UpdateExpression="SET open_pk = :pk, open_sk = :sk",
        ExpressionAttributeValues={
            ":pk": {"S": "LEASE"},
            ":sk": {"S": f"2026-11-29T12:00:10Z#{inst.instance_id}#000000"},
        },
    )
    lease(store, inst, 1, for_s=5)
    store.extend_lease(inst.instance_id, 1, attempt=1, until=T0 + 5 * S)
    assert [s.index for s in store.expired_leases(T0 + 60 * S)] == [1, 0]
