"""A single conditional write that meets an item in a transaction under way is sent again.

DynamoDB answers a PutItem or UpdateItem on an item that an ongoing TransactWriteItems holds
with TransactionConflictException: nothing was written, and botocore does not retry it. The
adapter sends it again (a few rounds with jittered backoff), and never reads it as a failed
condition; a conflict through every round is StoreContendedError. And a transaction that
landed but whose response was lost is retried by botocore with the same ClientRequestToken,
which DynamoDB answers as committed: the effect and the completion count once. DynamoDB only:
the in-memory fake has no transactions under way and no responses to lose.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from iotsched.adapters.dynamodb import DynamoDBStore
from iotsched.adapters.dynamodb import transact_outcomes as transact
from iotsched.core.instance_record import InstanceStatus
from iotsched.core.shard_record import ShardStatus
from iotsched.ports.store_errors import StoreContendedError
from tests.contract.test_store import lease, shard_of
from tests.faults import Faults
from tests.support import T0, TEST_INDEX_BUCKETS, AwsResources, instance

pytestmark = pytest.mark.moto

S = timedelta(seconds=1)
CONFLICT = "TransactionConflictException"


@pytest.fixture(autouse=True)
def _quick_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transact, "BACKOFF_BASE_S", 0.001)
    monkeypatch.setattr(transact, "BACKOFF_CAP_S", 0.002)


def rigged(aws: AwsResources, faults: Faults) -> DynamoDBStore:
    return faults.install(
        DynamoDBStore(aws.clients().dynamodb(), aws.table, buckets=TEST_INDEX_BUCKETS), aws
    )


def test_a_conflicted_claim_put_is_sent_again(aws_resources: AwsResources) -> None:
    faults = Faults().reject(CONFLICT, operation="PutItem", times=2)
    store = rigged(aws_resources, faults)
    inst = instance(shards=1)
    assert store.claim_instance(inst) is None
    assert faults.pending == 0
    assert store.get_instance(inst.instance_id) == inst


def test_a_conflicted_lease_is_sent_again(aws_resources: AwsResources) -> None:
    faults = Faults()
    store = rigged(aws_resources, faults)
    inst = instance(shards=1)
    store.claim_instance(inst)
    faults.reject(CONFLICT, operation="PutItem")
    assert lease(store, inst, 0).taken
    faults.reject(CONFLICT, operation="UpdateItem")
    store.extend_lease(inst.instance_id, 0, attempt=1, until=T0 + 600 * S)
    assert faults.pending == 0
    shard = shard_of(store, inst)
    assert (shard.status, shard.lease_until) == (ShardStatus.RUNNING, T0 + 600 * S)


def test_a_conflicted_conditional_update_is_not_read_as_its_condition_failing(
    aws_resources: AwsResources,
) -> None:
    faults = Faults()
    store = rigged(aws_resources, faults)
    inst = instance(shards=1)
    store.claim_instance(inst)
    faults.reject(CONFLICT, operation="UpdateItem", times=3)
    assert store.set_instance_status(
        inst.instance_id, expected=InstanceStatus.PLANNING, status=InstanceStatus.RUNNING
    )
    assert faults.pending == 0
    found = store.get_instance(inst.instance_id)
    assert found is not None and found.status is InstanceStatus.RUNNING


def test_a_conflict_through_every_round_raises_contended(aws_resources: AwsResources) -> None:
    faults = Faults()
    store = rigged(aws_resources, faults)
    inst = instance(shards=1)
    store.claim_instance(inst)
    faults.reject(CONFLICT, operation="UpdateItem", times=transact.ROUNDS)
    with pytest.raises(StoreContendedError, match="conflict"):
        store.set_instance_status(
            inst.instance_id, expected=InstanceStatus.PLANNING, status=InstanceStatus.RUNNING
        )
    assert faults.pending == 0
    found = store.get_instance(inst.instance_id)
    assert found is not None and found.status is InstanceStatus.PLANNING


def test_an_effect_whose_response_was_lost_is_claimed_once(aws_resources: AwsResources) -> None:
    faults = Faults()
    store = rigged(aws_resources, faults)
    inst = instance(shards=1)
    store.claim_instance(inst)
    lease(store, inst, 0)
    faults.lose_response()
    assert store.record_effect("bill#a", instance_id=inst.instance_id, index=0, attempt=1)
    assert (faults.pending, faults.replays) == (0, 1)
    assert shard_of(store, inst).attempts[0].keys == ["bill#a"]  # written once, not twice
    assert not store.record_effect("bill#a", instance_id=inst.instance_id, index=0, attempt=1)


def test_a_completion_whose_response_was_lost_is_counted_once(aws_resources: AwsResources) -> None:
    faults = Faults()
    store = rigged(aws_resources, faults)
    inst = instance(shards=2)
    store.claim_instance(inst)
    attempt = lease(store, inst, 0).shard.attempts[-1]
    faults.lose_response()
    result = store.complete_shard(
        inst.instance_id, 0, status=ShardStatus.SUCCEEDED, attempt=attempt
    )
    assert (faults.pending, faults.replays) == (0, 1)
    assert result.remaining == 1
