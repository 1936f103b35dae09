"""A large instance keeps its shard records in parts: every shard operation finds its record.

On DynamoDB an instance of more than `keys.SHARDS_PER_PART` shards keeps each shard record on
`INST#<instance id>#P<index % parts>` (its parts fixed at the claim and stored on the instance
item), so that no partition key takes every start's and every end's write; an instance of one
part, and every instance stored before the parts, keeps them on `INST#<instance id>`. A store
that has not read the instance learns its parts with one read, once.
"""

from __future__ import annotations

import json
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from pydantic import ValidationError

from iotsched.adapters.dynamodb import DynamoDBStore, keys
from iotsched.adapters.dynamodb.codec import instance_item, striped_counts
from iotsched.adapters.dynamodb.keys import SHARD_PARTS, SHARDS_PER_PART, shard_parts
from iotsched.core.decisions import Firing
from iotsched.core.instance_record import InstanceRecord, InstanceStatus, TriggerKind
from iotsched.core.shard_record import ShardStatus
from iotsched.ports.shards import CompletionVerdict, LeaseResult, ShardCompletion
from iotsched.services.scheduling.build import build_instance
from tests.contract.conftest import Store
from tests.contract.test_store import ended, lease
from tests.support import T0, TEST_INDEX_BUCKETS, AwsResources, task, task_record

S = timedelta(seconds=1)
SHARDS = 5_000  # five parts
#: A sample of each part, both ends of the instance, and the reduce (its index is the count).
SAMPLE = [0, 1, 2, 3, 4, 5, 6, 999, 1_000, 1_001, 2_503, 4_998, 4_999, SHARDS]


def big(shards: int = SHARDS, task_id: str = "big") -> InstanceRecord:
    definition = task(
        task_id, sharding={"strategy": "id_range", "shards": shards, "id_max": shards * 10}
    )
    return build_instance(
        task_record(definition, next_fire=T0),
        Firing(slot=T0, kind=TriggerKind.SCHEDULED, status=InstanceStatus.PLANNING),
        claimed_at=T0,
        dispatch_lease_s=60,
    )


def take(store: Store, inst: InstanceRecord, index: int, *, worker: str = "w1") -> LeaseResult:
    """`test_store.lease`, the reduce's too (its index is the shard count; it has no bounds)."""
    if index < inst.plan.count:
        return lease(store, inst, index, worker=worker)
    return store.take_lease(
        inst.instance_id,
        index,
        bounds={},
        worker=worker,
        now=T0,
        lease_until=T0 + 60 * S,
        max_attempts=3,
    )


def dynamodb(aws: AwsResources) -> DynamoDBStore:
    return DynamoDBStore(aws.clients().dynamodb(), aws.table, buckets=TEST_INDEX_BUCKETS)


def pks(store: DynamoDBStore, instance_id: str) -> Counter[str]:
    """Each partition key the instance's shard records sit on, with how many."""
    items = store._ddb.scan(TableName=store._table)["Items"]
    return Counter(
        item["pk"]["S"]
        for item in items
        if item.get("instance_id", {}).get("S") == instance_id
        and item["sk"]["S"].startswith("SHARD#")
    )


def test_the_parts_rule_keeps_each_part_small_and_their_number_bounded() -> None:
    assert [shard_parts(n) for n in (0, 1, SHARDS_PER_PART)] == [1, 1, 1]
    assert shard_parts(SHARDS_PER_PART + 1) == 2
    assert shard_parts(SHARDS) == 5
    assert shard_parts(10**9) == SHARD_PARTS
    for n in range(1, 200_000, 997):
        parts = shard_parts(n)
        assert 1 <= parts <= SHARD_PARTS
        assert parts == SHARD_PARTS or -(-n // parts) <= SHARDS_PER_PART


def test_every_shard_operation_of_a_large_instance_finds_its_record(store: Store) -> None:
    inst = big()
    assert store.claim_instance(inst) is None
    iid = inst.instance_id
    for index in SAMPLE:
        assert take(store, inst, index).taken
    # a second take of a live lease is refused by the record it finds
    refused = take(store, inst, 1_001, worker="w2")
    assert not refused.taken and refused.shard.owner == "w1"
    store.extend_lease(iid, 2_503, attempt=1, until=T0 + 600 * S)
    assert store.record_effect("bill#7", instance_id=iid, index=6, attempt=1)
    assert not store.record_effect("bill#7", instance_id=iid, index=6, attempt=1)
    failed = store.get_shard(iid, 4)
    assert failed is not None
    store.release_shard(iid, 4, attempt=ended(failed, at=T0 + S, outcome="failed", error="x"))
    given = store.get_shard(iid, 5)
    assert given is not None
    store.give_back_lease(given)  # a first attempt's record goes
    verdicts = store.complete_shards(
        [
            ShardCompletion(
                instance_id=iid,
                index=index,
                status=ShardStatus.SUCCEEDED,
                attempt=ended(shard, at=T0 + 2 * S, outcome="succeeded"),
            )
            for index in (0, 1, 2, 3, 999, 1_000)
            if (shard := store.get_shard(iid, index)) is not None
        ]
    )
    assert verdicts == [CompletionVerdict.COMMITTED] * 6

    listed = store.list_shards(iid)
    assert [s.index for s in listed] == [i for i in SAMPLE if i != 5]  # in index order
    by_index = {s.index: s for s in listed}
    assert by_index[2_503].lease_until == T0 + 600 * S
    assert by_index[6].attempts[-1].keys == ["bill#7"]
    assert by_index[4].status is ShardStatus.PENDING
    assert {by_index[i].status for i in (0, 1, 2, 3, 999, 1_000)} == {ShardStatus.SUCCEEDED}
    assert [by_index[i].bounds["start"] for i in (999, 1_000)] == [9_990, 10_000]
    found = store.get_instance(iid)
    assert found is not None and found.remaining == SHARDS - 6


@pytest.mark.moto
def test_a_large_instances_records_spread_over_its_parts_and_a_small_ones_stay_whole(
    aws_resources: AwsResources,
) -> None:
    store = dynamodb(aws_resources)
    large, small = big(), big(SHARDS_PER_PART, task_id="small")
    for inst in (large, small):
        assert store.claim_instance(inst) is None
        for index in range(0, inst.plan.count, 37):  # coprime with the parts
            assert lease(store, inst, index).taken
    spread = pks(store, large.instance_id)
    assert set(spread) == {f"INST#{large.instance_id}#P{k}" for k in range(5)}
    assert max(spread.values()) - min(spread.values()) <= 1  # index % parts: even
    assert set(pks(store, small.instance_id)) == {f"INST#{small.instance_id}"}


@pytest.mark.moto
def test_a_store_that_never_read_the_instance_learns_its_parts_with_one_read(
    aws_resources: AwsResources,
) -> None:
    inst = big()
    assert dynamodb(aws_resources).claim_instance(inst) is None
    client = aws_resources.clients().dynamodb()
    reads: list[str] = []
    client.meta.events.register(
        "provide-client-params.dynamodb.GetItem",
        lambda params, **_: reads.append(params["Key"]["pk"]["S"]),
    )
    worker = DynamoDBStore(client, aws_resources.table, buckets=TEST_INDEX_BUCKETS)
    for index in (3, 8, 13):  # all of part 3
        assert lease(worker, inst, index).taken
    assert reads == [f"TASK#{inst.task_id}"]  # the instance item, once
    assert pks(worker, inst.instance_id) == Counter({f"INST#{inst.instance_id}#P3": 3})


@pytest.mark.moto
def test_an_instance_stored_before_the_parts_keeps_its_records_where_they_were(
    aws_resources: AwsResources,
) -> None:
    # Its item has no parts: its shards, some taken before an upgrade, are found by the new
    # version's workers, sweeper and readers where the previous version put them.
    inst = big()
    claimer = dynamodb(aws_resources)
    assert claimer.claim_instance(inst) is None
    as_claimed_before(claimer, inst, "REMOVE shard_parts, counter_stripes")
    upgraded = dynamodb(aws_resources)
    for index in (0, 1, 4_999):
        assert lease(upgraded, inst, index).taken
    assert pks(upgraded, inst.instance_id) == Counter({f"INST#{inst.instance_id}": 3})
    shard = upgraded.get_shard(inst.instance_id, 4_999)
    assert shard is not None
    (verdict,) = upgraded.complete_shards(
        [
            ShardCompletion(
                instance_id=inst.instance_id,
                index=4_999,
                status=ShardStatus.SUCCEEDED,
                attempt=ended(shard, at=T0 + S, outcome="succeeded"),
            )
        ]
    )
    assert verdict is CompletionVerdict.COMMITTED
    assert [s.index for s in dynamodb(aws_resources).list_shards(inst.instance_id)] == [0, 1, 4_999]
    assert current_counts(upgraded, inst.instance_id) == (SHARDS - 1, 0)  # its one counter


def as_claimed_before(store: DynamoDBStore, inst: InstanceRecord, removal: str) -> None:
    """Make the claimed `inst` as an earlier version stored it: `removal` of its item's layout
    attributes, and the one counter item that version's claim made."""
    (stored,) = [
        i
        for i in store._ddb.scan(TableName=store._table)["Items"]
        if i.get("kind", {}).get("S") == "instance"
    ]
    assert stored["shard_parts"] == {"N": str(shard_parts(inst.plan.count))}
    store._ddb.update_item(
        TableName=store._table,
        Key={"pk": stored["pk"], "sk": stored["sk"]},
        UpdateExpression=removal,
    )
    store._ddb.put_item(
        TableName=store._table,
        Item={
            "pk": {"S": f"INST#{inst.instance_id}"},
            "sk": {"S": "COUNT"},
            "kind": {"S": "counter"},
            "remaining": {"N": str(inst.remaining)},
            "failed_shards": {"N": "0"},
        },
    )


# -- the counts of an instance kept in parts: stripes ------------------------------------------

SMALL = 12  # with a part per 2 shards: 6 parts, counted on 4 stripes


@pytest.fixture
def parts_of_two(monkeypatch: pytest.MonkeyPatch) -> None:
    """A part per 2 shards: a 12-shard instance is kept in parts and counted on stripes."""
    monkeypatch.setattr(keys, "SHARDS_PER_PART", 2)


def end_all(store: Store, inst: InstanceRecord, indexes: range, *, failing: int = -1) -> None:
    """Take and end `indexes` in batches of three, the batches side by side (as workers would):
    each batch's count lands on one stripe, and the batches contend."""

    def batch(first: int) -> list[CompletionVerdict]:
        done = []
        for index in range(first, min(first + 3, indexes.stop)):
            taken = take(store, inst, index).shard
            status = ShardStatus.FAILED if index == failing else ShardStatus.SUCCEEDED
            outcome = "failed" if index == failing else "succeeded"
            done.append(
                ShardCompletion(
                    instance_id=inst.instance_id,
                    index=index,
                    status=status,
                    attempt=ended(taken, at=T0 + S, outcome=outcome),
                )
            )
        return store.complete_shards(done)

    with ThreadPoolExecutor(4) as pool:
        verdicts = [v for vs in pool.map(batch, indexes[::3]) for v in vs]
    assert verdicts == [CompletionVerdict.COMMITTED] * len(indexes)


@pytest.mark.usefixtures("parts_of_two")
def test_a_striped_instance_drains_reduces_once_and_ends_once(store: Store) -> None:
    inst = big(SMALL)
    assert store.claim_instance(inst) is None
    iid = inst.instance_id
    end_all(store, inst, range(SMALL - 3))
    assert current_counts(store, iid) == (3, 0)
    assert not store.finalize_instance(iid, status=InstanceStatus.SUCCEEDED, finished_at=T0)
    assert not store.start_reduce(iid, now=T0, until=T0 + 60 * S)
    end_all(store, inst, range(SMALL - 3, SMALL))
    assert current_counts(store, iid) == (0, 0)
    with ThreadPoolExecutor(3) as pool:  # every caller that saw zero: one reduce
        started = list(pool.map(lambda _: store.start_reduce(iid, now=T0, until=T0 + S), range(3)))
    assert started.count(True) == 1
    assert current_counts(store, iid) == (1, 0)  # the reduce, counted
    assert not store.finalize_instance(iid, status=InstanceStatus.SUCCEEDED, finished_at=T0)
    reduce = take(store, inst, SMALL).shard
    result = store.complete_shard(
        iid,
        SMALL,
        status=ShardStatus.SUCCEEDED,
        attempt=ended(reduce, at=T0 + S, outcome="succeeded"),
    )
    assert (result.remaining, result.failed_shards) == (0, 0)
    with ThreadPoolExecutor(3) as pool:
        ends = list(
            pool.map(
                lambda _: store.finalize_instance(
                    iid, status=InstanceStatus.SUCCEEDED, finished_at=T0 + 2 * S
                ),
                range(3),
            )
        )
    assert ends.count(True) == 1
    final = store.get_instance(iid)
    assert final is not None and final.status is InstanceStatus.SUCCEEDED


@pytest.mark.usefixtures("parts_of_two")
def test_a_striped_instance_counts_failures_and_dead_letters_and_never_reduces_with_them(
    store: Store,
) -> None:
    inst = big(SMALL)
    assert store.claim_instance(inst) is None
    iid = inst.instance_id
    end_all(store, inst, range(SMALL - 1), failing=4)
    dead = store.dead_letter_shard(
        iid, SMALL - 1, bounds=inst.plan.bounds(SMALL - 1), max_attempts=3, error="x", now=T0
    )
    assert dead is not None and (dead.remaining, dead.failed_shards, dead.unrun_shards) == (0, 2, 1)
    assert (
        store.dead_letter_shard(  # ended already: counted once
            iid, SMALL - 1, bounds=inst.plan.bounds(SMALL - 1), max_attempts=3, error="x", now=T0
        )
        is None
    )
    assert not store.start_reduce(iid, now=T0, until=T0 + S)
    assert store.finalize_instance(iid, status=InstanceStatus.FAILED, finished_at=T0)
    final = store.get_instance(iid)
    assert final is not None
    assert (final.status, final.remaining, final.failed_shards) == (InstanceStatus.FAILED, 0, 2)


def current_counts(store: Store, instance_id: str) -> tuple[int, int]:
    found = store.get_instance(instance_id)
    assert found is not None
    return found.remaining, found.failed_shards


@pytest.mark.moto
@pytest.mark.usefixtures("parts_of_two")
def test_each_batch_counts_on_one_stripe_and_no_counter_item_takes_them_all(
    aws_resources: AwsResources,
) -> None:
    store = dynamodb(aws_resources)
    inst = big(SMALL)
    assert store.claim_instance(inst) is None
    end_all(store, inst, range(SMALL))
    counters = {
        item["pk"]["S"]: int(item["ended"]["N"])
        for item in store._ddb.scan(TableName=store._table)["Items"]
        if item["sk"]["S"] == "COUNT"
    }
    assert set(counters) <= {f"INST#{inst.instance_id}#C{j}" for j in range(4)}
    # 4 batches of 3, each counted whole on one stripe
    assert sum(counters.values()) == SMALL
    assert all(ended % 3 == 0 for ended in counters.values())


def test_a_version_before_the_parts_refuses_to_read_an_instance_kept_in_parts() -> None:
    # Its workers read the instance before they take a lease: one that cannot read it never
    # keys, nor runs, a shard of it (its record fails, and a newer worker runs it).
    body = json.loads(instance_item(big(), TEST_INDEX_BUCKETS)["body"]["S"])
    with pytest.raises(ValidationError, match="shard_parts"):
        InstanceRecord.model_validate(body)
    small = json.loads(instance_item(big(SHARDS_PER_PART), TEST_INDEX_BUCKETS)["body"]["S"])
    assert "shard_parts" not in small


@pytest.mark.moto
@pytest.mark.usefixtures("parts_of_two")
def test_an_instance_kept_in_parts_before_the_stripes_counts_on_its_one_counter(
    aws_resources: AwsResources,
) -> None:
    # Claimed by the version that kept shard records in parts but one counter item: its counts
    # stay there, where its earlier workers counted, and it ends when they reach zero.
    inst = big(SMALL)
    assert dynamodb(aws_resources).claim_instance(inst) is None
    as_claimed_before(dynamodb(aws_resources), inst, "REMOVE counter_stripes")
    store = dynamodb(aws_resources)
    end_all(store, inst, range(SMALL), failing=5)
    assert current_counts(store, inst.instance_id) == (0, 1)
    assert store.finalize_instance(inst.instance_id, status=InstanceStatus.FAILED, finished_at=T0)
    counters = [
        item["pk"]["S"]
        for item in store._ddb.scan(TableName=store._table)["Items"]
        if item["sk"]["S"] == "COUNT"
    ]
    assert counters == [f"INST#{inst.instance_id}"]


def test_stripes_read_between_a_reduce_s_mark_and_its_count_never_say_less_than_zero() -> None:
    # stripe 0 read before the reduce's mark, another after the reduce's own count
    before_mark = {"ended": {"N": "1"}}
    after_count = {"ended": {"N": "3"}}
    counted = striped_counts(3, [before_mark, after_count])
    assert (counted.remaining, counted.reducing) == (0, False)
    marked = striped_counts(3, [{**before_mark, "reducing": {"BOOL": True}}, {"ended": {"N": "2"}}])
    assert (marked.remaining, marked.reducing) == (1, True)
