"""Effect keys (`record_effect`, the store's `effects` part): once per key, fenced on the
attempt, listed on it up to the worker's limit; on the fake and on DynamoDB (moto)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from iotsched.core.attempt_record import AttemptOutcome
from iotsched.core.shard_record import ShardStatus
from iotsched.ports.shards import (
    CompletionVerdict,
    ShardCompletion,
    StaleAttemptError,
)
from tests.contract.conftest import Store
from tests.contract.test_store import (
    claimed,
    ended,
    lease,
    run_together,
    shard_of,
    zombie_and_successor,
)
from tests.support import T0, TEST_INDEX_BUCKETS

S = timedelta(seconds=1)


def test_an_effect_is_recorded_once_and_listed_on_its_attempt(store: Store) -> None:
    key = "bill#acct-7#2026-11-28"
    first, other = claimed(store, shards=4), claimed(store, slot=T0 + timedelta(days=1))
    lease(store, first, 0)
    lease(store, other, 0)
    assert store.record_effect(key, instance_id=first.instance_id, index=0, attempt=1)
    assert not store.record_effect(key, instance_id=other.instance_id, index=0, attempt=1)
    assert store.record_effect(key + "x", instance_id=first.instance_id, index=0, attempt=1)
    assert shard_of(store, first).attempts[0].keys == [key, key + "x"]
    assert shard_of(store, other).attempts[0].keys == []


def test_a_second_run_of_a_shard_skips_an_applied_effect(store: Store) -> None:
    inst = claimed(store, shards=1)
    lease(store, inst, 0, for_s=10)
    assert store.record_effect("notice#dev-1", instance_id=inst.instance_id, index=0, attempt=1)
    lease(store, inst, 0, worker="w2", at=T0 + 11 * S)  # attempt 1 died; attempt 2 runs
    assert not store.record_effect("notice#dev-1", instance_id=inst.instance_id, index=0, attempt=2)
    assert [a.keys for a in shard_of(store, inst).attempts] == [["notice#dev-1"], []]


def test_a_zombie_attempt_records_no_effect(store: Store) -> None:
    inst, _zombie, successor = zombie_and_successor(store)
    with pytest.raises(StaleAttemptError):
        store.record_effect("bill#acct-7", instance_id=inst.instance_id, index=0, attempt=1)
    assert shard_of(store, inst) == successor
    # the key is still free for the attempt that holds the lease
    assert store.record_effect("bill#acct-7", instance_id=inst.instance_id, index=0, attempt=2)


def test_concurrent_effects_have_one_winner(store: Store) -> None:
    inst = claimed(store, shards=8)
    for i in range(8):
        lease(store, inst, i)
    results = run_together(
        8,
        lambda i: store.record_effect(
            "notice#dev-1", instance_id=inst.instance_id, index=i, attempt=1
        ),
    )
    assert results.count(True) == 1


def test_effects_past_the_listed_ones_leave_the_shard_record_as_it_was(store: Store) -> None:
    inst = claimed(store, shards=1)
    lease(store, inst, 0)
    for n in range(3):
        assert store.record_effect(f"k{n}", instance_id=inst.instance_id, index=0, attempt=1)
    before = shard_of(store, inst)
    for n in range(3, 40):
        assert store.record_effect(
            f"k{n}", instance_id=inst.instance_id, index=0, attempt=1, listed=False
        )
    assert shard_of(store, inst) == before  # fenced by a check, never written
    assert before.attempts[0].keys == ["k0", "k1", "k2"]
    # Each key is claimed all the same: a second claim finds it.
    assert not store.record_effect("k39", instance_id=inst.instance_id, index=0, attempt=1)


@pytest.mark.moto
def test_the_shard_item_does_not_grow_with_unlisted_effects(aws_resources: Any) -> None:
    from iotsched.adapters.dynamodb import DynamoDBStore

    store = DynamoDBStore(
        aws_resources.clients().dynamodb(), aws_resources.table, buckets=TEST_INDEX_BUCKETS
    )
    ddb = aws_resources.client("dynamodb")
    inst = claimed(store, shards=1)
    lease(store, inst, 0)
    key = {"pk": {"S": f"INST#{inst.instance_id}"}, "sk": {"S": "SHARD#000000"}}
    item = ddb.get_item(TableName=aws_resources.table, Key=key, ConsistentRead=True)["Item"]
    for n in range(25):
        store.record_effect(
            f"notice#{n:04d}", instance_id=inst.instance_id, index=0, attempt=1, listed=False
        )
    after = ddb.get_item(TableName=aws_resources.table, Key=key, ConsistentRead=True)["Item"]
    assert after == item
    effect = ddb.get_item(
        TableName=aws_resources.table,
        Key={"pk": {"S": "EFFECT#notice#0024"}, "sk": {"S": "EFFECT"}},
        ConsistentRead=True,
    )["Item"]
    assert (effect["instance_id"]["S"], effect["idx"]["N"], effect["attempt"]["N"]) == (
        inst.instance_id,
        "0",
        "1",
    )


@pytest.mark.parametrize("end", ["release", "complete", "complete_batch"])
def test_an_effect_the_worker_never_heard_of_stays_on_its_attempt(store: Store, end: str) -> None:
    # The effect's transaction landed but its call raised (a response lost past the SDK's
    # retries): the worker's own list lacks the key when it ends the attempt. Its end must
    # not erase what the ledger and the record agree on.
    inst = claimed(store, shards=1)
    taken = lease(store, inst, 0)
    assert store.record_effect("bill#acct-7", instance_id=inst.instance_id, index=0, attempt=1)
    outcome = "failed" if end == "release" else "succeeded"
    unaware = ended(taken.shard, at=T0 + 5 * S, outcome=outcome, error="lost response")
    unaware = unaware.model_copy(update={"keys": [], "key_count": 0})
    if end == "release":
        store.release_shard(inst.instance_id, 0, attempt=unaware)
    elif end == "complete":
        store.complete_shard(inst.instance_id, 0, status=ShardStatus.SUCCEEDED, attempt=unaware)
    else:
        (verdict,) = store.complete_shards(
            [
                ShardCompletion(
                    instance_id=inst.instance_id,
                    index=0,
                    status=ShardStatus.SUCCEEDED,
                    attempt=unaware,
                )
            ]
        )
        assert verdict is CompletionVerdict.COMMITTED
    (attempt,) = shard_of(store, inst).attempts
    assert attempt.keys == ["bill#acct-7"]
    assert (attempt.outcome, attempt.error) == (AttemptOutcome(outcome), "lost response")
    assert attempt.ended_at == T0 + 5 * S
