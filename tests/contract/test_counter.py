"""The remaining-shard counter is an item of its own, and every condition reads it.

On DynamoDB the counter (`remaining`, `failed_shards`) lives at `INST#<instance id>` / `COUNT`,
beside the shard records and with no index key: a completion writes its shard records and that
small item, never the instance item (its plan, its index entries). finalize_instance and
start_reduce are transactions of the instance's move and the counter, read with
`transact.classify` on both backends (cancellations injected by `tests.faults.Faults`). An
instance written by the previous version (its counter on the instance item) is carried over
exactly the first time a counter write finds no counter item.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest

from iotsched.adapters.dynamodb import DynamoDBStore
from iotsched.adapters.dynamodb import transact_outcomes as transact
from iotsched.adapters.memory.store import MemoryStore
from iotsched.core.attempt_record import AttemptOutcome
from iotsched.core.instance_record import InstanceStatus
from iotsched.core.shard_record import ShardStatus
from iotsched.ports.shards import (
    CompletionVerdict,
    ShardCompletion,
)
from iotsched.ports.store_errors import (
    StoreContendedError,
    WriteRejectedError,
)
from tests.contract.conftest import Store
from tests.contract.test_cancellations import RETRYABLE, Rig, done
from tests.contract.test_store import claimed, current, lease, run_together
from tests.faults import Faults
from tests.support import T0, TEST_INDEX_BUCKETS, AwsResources, instance

S = timedelta(seconds=1)
INDEX_KEYS = {"status_pk", "status_sk", "open_pk", "open_sk", "due_pk", "due_sk", "date_pk"}


@pytest.fixture(params=["memory", pytest.param("dynamodb", marks=pytest.mark.moto)])
def rig(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Rig:
    """A store whose transactions answer as a test scripts (as test_cancellations' rig), its
    backoff short: the scripted conflicts are answered at once."""
    monkeypatch.setattr(transact, "BACKOFF_BASE_S", 0.001)
    monkeypatch.setattr(transact, "BACKOFF_CAP_S", 0.002)
    faults = Faults()
    if request.param == "memory":
        return Rig(faults.install(MemoryStore()), faults)
    aws: AwsResources = request.getfixturevalue("aws_resources")
    return Rig(
        faults.install(
            DynamoDBStore(aws.clients().dynamodb(), aws.table, buckets=TEST_INDEX_BUCKETS), aws
        ),
        faults,
    )


def counter_of(store: Store, instance_id: str) -> tuple[int, int] | None:
    """On DynamoDB, the counter item's (remaining, failed_shards) as stored (None: no item);
    in memory, the instance's own counts (the fake keeps them on the record)."""
    if not isinstance(store, DynamoDBStore):
        found = store.get_instance(instance_id)
        return None if found is None else (found.remaining, found.failed_shards)
    item = store._ddb.get_item(
        TableName=store._table,
        Key={"pk": {"S": f"INST#{instance_id}"}, "sk": {"S": "COUNT"}},
        ConsistentRead=True,
    ).get("Item")
    if item is None:
        return None
    return int(item["remaining"]["N"]), int(item["failed_shards"]["N"])


def succeed(store: Store, instance_id: str, index: int) -> None:
    store.complete_shard(
        instance_id, index, status=ShardStatus.SUCCEEDED, attempt=done(store, instance_id, index)
    )


def drained(store: Store, *, shards: int = 2, **fields: Any) -> str:
    """A claimed instance whose every shard succeeded (its counter at zero)."""
    inst = claimed(store, shards=shards, **fields)
    for index in range(shards):
        lease(store, inst, index)
        succeed(store, inst.instance_id, index)
    assert current(store, inst).remaining == 0
    return inst.instance_id


def reduce_done(store: Store, instance_id: str) -> None:
    """The reduce of a reducing instance taken and counted."""
    inst = store.get_instance(instance_id)
    assert inst is not None and inst.status is InstanceStatus.REDUCING
    assert store.take_lease(
        instance_id,
        inst.plan.count,  # the reduce's own record, after the shards'
        bounds={},
        worker="w",
        now=T0,
        lease_until=T0 + 60 * S,
        max_attempts=1,
    ).taken
    succeed(store, instance_id, inst.plan.count)


# -- the moto backend: what a completion writes -------------------------------------------------


class Writes:
    """Every item a DynamoDB client writes, by (pk, sk), counted per request action."""

    def __init__(self) -> None:
        self.items: list[tuple[str, str]] = []
        self.checked: list[tuple[str, str]] = []

    def hook(self, params: dict[str, Any], model: Any, **kwargs: Any) -> None:
        def key(body: dict[str, Any]) -> tuple[str, str]:
            k = body.get("Key") or body["Item"]
            return (k["pk"]["S"], k["sk"]["S"])

        name = model.name
        if name in ("PutItem", "UpdateItem", "DeleteItem"):
            self.items.append(key(params))
        elif name == "TransactWriteItems":
            for action in params["TransactItems"]:
                ((kind, body),) = action.items()
                (self.checked if kind == "ConditionCheck" else self.items).append(key(body))
        elif name == "BatchWriteItem":
            for requests in params["RequestItems"].values():
                for r in requests:
                    ((_, body),) = r.items()
                    self.items.append(key(body))


@contextmanager
def counted(aws: AwsResources) -> Iterator[tuple[DynamoDBStore, Writes]]:
    client = aws.new_clients().dynamodb()
    writes = Writes()
    client.meta.events.register("before-parameter-build.dynamodb", writes.hook)
    yield DynamoDBStore(client, aws.table, buckets=TEST_INDEX_BUCKETS), writes


def raw(aws: AwsResources, pk: str, sk: str) -> dict[str, Any] | None:
    item = aws.client("dynamodb").get_item(
        TableName=aws.table, Key={"pk": {"S": pk}, "sk": {"S": sk}}, ConsistentRead=True
    )
    found: dict[str, Any] | None = item.get("Item")
    return found


def keys_of(instance_id: str) -> dict[str, tuple[str, str]]:
    task_id, _, slot = instance_id.rpartition("@")
    return {
        "instance": (f"TASK#{task_id}", f"INST#{slot}"),
        "counter": (f"INST#{instance_id}", "COUNT"),
    }


@pytest.mark.moto
def test_completions_write_the_shard_records_and_the_counter_never_the_instance(
    aws_resources: AwsResources,
) -> None:
    with counted(aws_resources) as (store, writes):
        inst = claimed(store, shards=4)
        iid = inst.instance_id
        for index in range(4):
            lease(store, inst, index)
        keys = keys_of(iid)
        shard = {n: (f"INST#{iid}", f"SHARD#{n:06d}") for n in range(4)}
        writes.items.clear()

        succeed(store, iid, 0)  # one by one
        batch = [
            ShardCompletion(iid, n, ShardStatus.SUCCEEDED, done(store, iid, n)) for n in (1, 2)
        ]
        assert store.complete_shards(batch) == [CompletionVerdict.COMMITTED] * 2  # a batch
        assert store.dead_letter_shard(  # a dead letter
            iid, 3, bounds=inst.plan.bounds(3), max_attempts=3, error="dead_lettered", now=T0
        )

    # each completion: its shard record(s) and the counter, once per request; nothing else
    assert writes.items == [
        shard[0],
        keys["counter"],
        shard[1],
        shard[2],
        keys["counter"],
        shard[3],
        keys["counter"],
    ]
    counter = raw(aws_resources, *keys["counter"])
    assert counter is not None and not INDEX_KEYS & set(counter)  # no index entry to rewrite
    assert (counter["remaining"], counter["failed_shards"]) == ({"N": "0"}, {"N": "1"})
    item = raw(aws_resources, *keys["instance"])
    assert item is not None and "remaining" not in item  # the instance item holds no counter
    assert current(store, inst).remaining == 0


@pytest.mark.moto
def test_reduce_moves_both_items_at_once_and_finalize_reads_the_counter_then_writes_once(
    aws_resources: AwsResources,
) -> None:
    with counted(aws_resources) as (store, writes):
        iid = drained(store, reduce="sum")
        writes.items.clear()
        assert store.start_reduce(iid, now=T0, until=T0 + 60 * S)
        assert sorted(writes.items) == sorted(keys_of(iid).values())  # one transaction
        counter = raw(aws_resources, *keys_of(iid)["counter"])
        assert counter is not None and counter["remaining"] == {"N": "1"}
        writes.items.clear()
        # the reduce not counted yet: no write at all
        assert not store.finalize_instance(iid, status=InstanceStatus.SUCCEEDED, finished_at=T0)
        assert writes.items == []
        reduce_done(store, iid)
        writes.items.clear()
        assert store.finalize_instance(iid, status=InstanceStatus.SUCCEEDED, finished_at=T0)
        assert writes.items == [keys_of(iid)["instance"]]  # a plain write: no transaction


@pytest.mark.moto
def test_a_reduce_started_between_finalize_s_read_and_its_write_wins(
    aws_resources: AwsResources,
) -> None:
    store = DynamoDBStore(
        aws_resources.clients().dynamodb(), aws_resources.table, buckets=TEST_INDEX_BUCKETS
    )
    iid = drained(store, reduce="sum")
    client = aws_resources.new_clients().dynamodb()
    racing = DynamoDBStore(client, aws_resources.table, buckets=TEST_INDEX_BUCKETS)
    started: list[bool] = []

    def after_read(model: Any, **_: Any) -> None:
        if model.name == "GetItem" and not started:  # finalize read the counter at zero
            started.append(store.start_reduce(iid, now=T0, until=T0 + 60 * S))

    client.meta.events.register("after-call.dynamodb", after_read)
    assert not racing.finalize_instance(iid, status=InstanceStatus.FAILED, finished_at=T0)
    assert started == [True]
    after = store.get_instance(iid)
    assert after is not None and (after.status, after.remaining) == (InstanceStatus.REDUCING, 1)


def test_reads_report_the_counter(store: Store) -> None:
    inst = claimed(store, shards=3)
    iid = inst.instance_id
    for index in range(2):
        lease(store, inst, index)
    succeed(store, iid, 0)
    store.complete_shard(
        iid,
        1,
        status=ShardStatus.FAILED,
        attempt=done(store, iid, 1).model_copy(update={"outcome": AttemptOutcome.FAILED}),
        error="boom",
    )
    reads = {
        "get_instance": store.get_instance(iid),
        "by task": store.list_instances(task_id=inst.task_id)[0],
        "by status": store.list_instances(status=InstanceStatus.PLANNING)[0],
        "open": store.open_instances()[0],
        "by date": store.instances_for_date(inst.task_id, inst.business_date)[0],
    }
    assert {
        name: (r.remaining, r.failed_shards) for name, r in reads.items() if r
    } == dict.fromkeys(reads, (1, 1))
    assert counter_of(store, iid) == (1, 1)  # what the reads report is the counter's


def test_racing_reducers_and_finalizers_move_the_instance_once(store: Store) -> None:
    iid = drained(store, shards=3, reduce="sum")

    def race(i: int) -> str:
        if i % 2:
            return "reduce" if store.start_reduce(iid, now=T0, until=T0 + 60 * S) else ""
        ok = store.finalize_instance(iid, status=InstanceStatus.FAILED, finished_at=T0)
        return "final" if ok else ""

    won = [r for r in run_together(8, race) if r]
    # every finalizer that ran before the reduce's move could end the instance instead: one
    # caller wins, whichever it is, and the counter says what it did
    assert len(won) == 1
    after = store.get_instance(iid)
    assert after is not None
    if won == ["reduce"]:
        assert (after.status, after.remaining) == (InstanceStatus.REDUCING, 1)
        assert counter_of(store, iid) == (1, 0)
        assert not store.start_reduce(iid, now=T0, until=T0 + 60 * S)
        results = run_together(
            6,
            lambda i: store.finalize_instance(iid, status=InstanceStatus.SUCCEEDED, finished_at=T0),
        )
        assert results.count(True) == 0  # the reduce's count is not done yet
    else:
        assert (after.status, after.remaining) == (InstanceStatus.FAILED, 0)
        assert counter_of(store, iid) == (0, 0)


def test_a_reduce_is_started_once_and_its_count_ends_the_instance(store: Store) -> None:
    iid = drained(store, shards=2, reduce="sum")
    assert (
        run_together(6, lambda i: store.start_reduce(iid, now=T0, until=T0 + 60 * S)).count(True)
        == 1
    )
    inst = store.get_instance(iid)
    assert inst is not None and (inst.status, inst.remaining) == (InstanceStatus.REDUCING, 1)
    assert counter_of(store, iid) == (1, 0)
    reduce_done(store, iid)
    results = run_together(
        6,
        lambda i: store.finalize_instance(iid, status=InstanceStatus.SUCCEEDED, finished_at=T0),
    )
    assert results.count(True) == 1


# -- every backend: DynamoDB's cancellations of finalize and start_reduce ------------------------


@pytest.mark.parametrize("at", [0, 1], ids=["on-the-instance", "on-the-counter"])
@pytest.mark.parametrize("code", RETRYABLE)
def test_a_contended_reduce_start_is_sent_again_and_sets_the_counter_to_one(
    rig: Rig, code: str, at: int
) -> None:
    iid = drained(rig.store, reduce="sum")
    rig.faults.cancel(code, at=at)
    assert rig.store.start_reduce(iid, now=T0, until=T0 + 60 * S)
    assert rig.faults.pending == 0
    after = rig.store.get_instance(iid)
    assert after is not None and (after.status, after.remaining) == (InstanceStatus.REDUCING, 1)


def test_a_failed_condition_of_the_reduce_s_move_is_a_no(rig: Rig) -> None:
    iid = drained(rig.store, reduce="sum")
    rig.faults.cancel("ConditionalCheckFailed", at=0)  # the instance moved on
    assert rig.store.start_reduce(iid, now=T0, until=T0 + 60 * S) is False
    assert rig.faults.pending == 0
    after = rig.store.get_instance(iid)
    assert after is not None and (after.status, after.remaining) == (InstanceStatus.PLANNING, 0)


def test_the_counter_s_refusal_of_a_reduce_is_decided_on_the_counter_as_it_is(rig: Rig) -> None:
    # The counter's condition alone said no (on DynamoDB: its item was not there yet, or it
    # was not at zero then): the store reads it and, drained now, starts the reduce once.
    iid = drained(rig.store, reduce="sum")
    rig.faults.cancel("ConditionalCheckFailed", at=1)
    assert rig.store.start_reduce(iid, now=T0, until=T0 + 60 * S)
    assert not rig.store.start_reduce(iid, now=T0, until=T0 + 60 * S)
    assert rig.faults.pending == 0
    # and one not drained stays as it is
    inst = claimed(rig.store, slot=T0 + 60 * S, shards=1, reduce="sum")
    rig.faults.cancel("ConditionalCheckFailed", at=1)
    assert not rig.store.start_reduce(inst.instance_id, now=T0, until=T0 + 60 * S)
    assert rig.faults.pending == 0
    assert current(rig.store, inst).status is InstanceStatus.PLANNING


def test_a_reduce_start_contended_throughout_or_invalid_raises_and_moves_nothing(
    rig: Rig,
) -> None:
    iid = drained(rig.store, reduce="sum")
    rig.faults.cancel("TransactionConflict", at=1, times=transact.ROUNDS)
    with pytest.raises(StoreContendedError):
        rig.store.start_reduce(iid, now=T0, until=T0 + 60 * S)
    rig.faults.cancel("ValidationError", at=1)
    with pytest.raises(WriteRejectedError, match="ValidationError"):
        rig.store.start_reduce(iid, now=T0, until=T0 + 60 * S)
    assert rig.faults.pending == 0
    after = rig.store.get_instance(iid)
    assert after is not None and (after.status, after.remaining) == (InstanceStatus.PLANNING, 0)
    assert rig.store.start_reduce(iid, now=T0, until=T0 + 60 * S)  # nothing was written


# -- DynamoDB: counters missing (a claimer's crash) or on the instance item (an upgrade) ---------


def _legacy(store: DynamoDBStore, aws: AwsResources, *, shards: int, remaining: int) -> str:
    """An instance as the previous version wrote it: its counter on the instance item."""
    inst = instance(shards=shards)
    item = store._instance_item(inst)
    del item["planned"]
    item["remaining"] = {"N": str(remaining)}
    item["failed_shards"] = {"N": "0"}
    aws.client("dynamodb").put_item(TableName=aws.table, Item=item)
    return inst.instance_id


@pytest.mark.moto
def test_an_instance_of_the_previous_version_is_counted_exactly_across_the_upgrade(
    aws_resources: AwsResources,
) -> None:
    store = DynamoDBStore(
        aws_resources.clients().dynamodb(), aws_resources.table, buckets=TEST_INDEX_BUCKETS
    )
    # four shards, one of them counted on the instance item by the previous version
    iid = _legacy(store, aws_resources, shards=4, remaining=3)
    inst = store.get_instance(iid)
    assert inst is not None and inst.remaining == 3
    for index in (1, 2, 3):
        lease(store, inst, index)
    run_together(2, lambda i: succeed(store, iid, i + 1))  # both find no counter item
    assert raw(aws_resources, *keys_of(iid)["counter"])["remaining"] == {"N": "1"}  # type: ignore[index]
    item = raw(aws_resources, *keys_of(iid)["instance"])
    assert item is not None and "remaining" not in item and item["planned"] == {"N": "3"}
    # a previous-version worker still running: its decrement of the instance item is refused
    # (its shard is retried), never counted where nobody reads it
    with pytest.raises(aws_resources.client("dynamodb").exceptions.ConditionalCheckFailedException):
        aws_resources.client("dynamodb").update_item(
            TableName=aws_resources.table,
            Key={"pk": {"S": item["pk"]["S"]}, "sk": {"S": item["sk"]["S"]}},
            UpdateExpression="SET remaining = remaining - :n",
            ConditionExpression="remaining >= :n",
            ExpressionAttributeValues={":n": {"N": "1"}},
        )
    assert not store.finalize_instance(iid, status=InstanceStatus.SUCCEEDED, finished_at=T0)
    succeed(store, iid, 3)
    assert (
        run_together(
            4,
            lambda i: store.finalize_instance(iid, status=InstanceStatus.SUCCEEDED, finished_at=T0),
        ).count(True)
        == 1
    )


@pytest.mark.moto
def test_a_drained_instance_of_the_previous_version_is_finalized(
    aws_resources: AwsResources,
) -> None:
    store = DynamoDBStore(
        aws_resources.clients().dynamodb(), aws_resources.table, buckets=TEST_INDEX_BUCKETS
    )
    iid = _legacy(store, aws_resources, shards=2, remaining=0)
    assert (
        run_together(
            4,
            lambda i: store.finalize_instance(iid, status=InstanceStatus.SUCCEEDED, finished_at=T0),
        ).count(True)
        == 1
    )


@pytest.mark.moto
def test_a_counter_whose_claimer_died_before_writing_it_is_made_from_the_plan(
    aws_resources: AwsResources,
) -> None:
    store = DynamoDBStore(
        aws_resources.clients().dynamodb(), aws_resources.table, buckets=TEST_INDEX_BUCKETS
    )
    inst = instance(shards=3)
    # the claim's put landed; the claimer died before its counter's
    aws_resources.client("dynamodb").put_item(
        TableName=aws_resources.table, Item=store._instance_item(inst)
    )
    assert current(store, inst).remaining == 3
    for index in range(3):
        lease(store, inst, index)
    batch = [
        ShardCompletion(
            inst.instance_id, n, ShardStatus.SUCCEEDED, done(store, inst.instance_id, n)
        )
        for n in range(2)
    ]
    assert store.complete_shards(batch) == [CompletionVerdict.COMMITTED] * 2
    assert current(store, inst).remaining == 1
    assert counter_of(store, inst.instance_id) == (1, 0)  # made from the plan, then counted
    succeed(store, inst.instance_id, 2)
    assert store.finalize_instance(
        inst.instance_id, status=InstanceStatus.SUCCEEDED, finished_at=T0
    )


@pytest.mark.moto
def test_a_claim_group_past_the_transaction_limit_gets_its_counters(
    aws_resources: AwsResources,
) -> None:
    store = DynamoDBStore(
        aws_resources.clients().dynamodb(), aws_resources.table, buckets=TEST_INDEX_BUCKETS
    )
    group = [instance("big", T0 + n * 60 * S, shards=2) for n in range(60)]  # 120 puts
    assert store.claim_instances([group]) == [True]
    for inst in group:
        counter = raw(aws_resources, *keys_of(inst.instance_id)["counter"])
        assert counter is not None and counter["remaining"] == {"N": "2"}


@pytest.mark.moto
def test_the_counter_item_stays_one_write_unit_whatever_the_instance(
    aws_resources: AwsResources,
) -> None:
    store = DynamoDBStore(
        aws_resources.clients().dynamodb(), aws_resources.table, buckets=TEST_INDEX_BUCKETS
    )
    inst = claimed(store, shards=2, params={"blob": "x" * 3000})  # a large instance item
    counter = raw(aws_resources, *keys_of(inst.instance_id)["counter"])
    assert counter is not None and len(json.dumps(counter)) < 200
