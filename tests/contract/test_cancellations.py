"""Every transactional write reads DynamoDB's cancellations the same way, on both backends.

moto never cancels a transaction for a conflict or throttling; `tests.faults.Faults` answers
chosen requests as DynamoDB does (one CancellationReasons entry per action, the given code at
the given index, "None" elsewhere), on the DynamoDB adapter (a botocore hook) and on the
in-memory fake (its fault hook). Per path and reason code:

| reason                         | record_effect        | complete_shard | dead_letter_shard | claims       |
|--------------------------------|----------------------|----------------|-------------------|--------------|
| conflict, throttling           | sent again, True     | sent again     | sent again        | sent again   |
| the same, every round          | StoreContendedError  | the same       | the same          | the same     |
| ValidationError                | WriteRejectedError   | the same       | the same          | the same     |
| condition: fence / effect      | StaleAttemptError / False | stale     | None              | duplicate / held |
| condition: a caller's write    | EffectConditionError | -              | -                 | -            |

`complete_shards` (a worker batch) sends contended rounds again for longer (12 rounds within
5 s) and leaves what it could not write UNWRITTEN rather than raising.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import pytest

from iotsched.adapters.dynamodb import DynamoDBStore
from iotsched.adapters.dynamodb import transact_outcomes as transact
from iotsched.adapters.memory.store import MemoryStore
from iotsched.core.attempt_record import (
    Attempt,
    AttemptOutcome,
)
from iotsched.core.instance_record import InstanceStatus
from iotsched.core.shard_record import ShardStatus
from iotsched.ports.blocking import ClaimOutcome
from iotsched.ports.effects import EffectConditionError
from iotsched.ports.shards import (
    CompletionVerdict,
    ShardCompletion,
)
from iotsched.ports.store_errors import (
    StoreContendedError,
    WriteRejectedError,
)
from tests.contract.conftest import Store
from tests.contract.test_store import claimed, lease, shard_of
from tests.faults import Faults
from tests.support import T0, TEST_INDEX_BUCKETS, AwsResources, instance, task, task_record

S = timedelta(seconds=1)
M = timedelta(minutes=1)

RETRYABLE = [
    "TransactionConflict",
    "ThrottlingError",
    "ProvisionedThroughputExceeded",
    "RequestLimitExceeded",
]


@dataclass
class Rig:
    store: Store
    faults: Faults


@pytest.fixture(params=["memory", pytest.param("dynamodb", marks=pytest.mark.moto)])
def rig(request: pytest.FixtureRequest) -> Rig:
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


@pytest.fixture(autouse=True)
def _quick_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transact, "BACKOFF_BASE_S", 0.001)
    monkeypatch.setattr(transact, "BACKOFF_CAP_S", 0.002)


def done(store: Store, inst_id: str, index: int = 0) -> Attempt:
    (shard,) = [s for s in store.list_shards(inst_id) if s.index == index]
    return shard.attempts[-1].model_copy(
        update={"ended_at": T0 + S, "outcome": AttemptOutcome.SUCCEEDED}
    )


# -- record_effect (ctx.once) -------------------------------------------------------------------


@pytest.mark.parametrize("at", [0, 1], ids=["on-the-shard", "on-the-effect"])
@pytest.mark.parametrize("code", RETRYABLE)
def test_a_retryable_cancellation_of_an_effect_is_sent_again_not_read_as_applied(
    rig: Rig, code: str, at: int
) -> None:
    store = rig.store
    inst = claimed(store, shards=1)
    lease(store, inst, 0)
    rig.faults.cancel(code, at=at)
    assert store.record_effect("bill#a", instance_id=inst.instance_id, index=0, attempt=1)
    assert rig.faults.pending == 0
    assert shard_of(store, inst).attempts[0].keys == ["bill#a"]
    assert not store.record_effect("bill#a", instance_id=inst.instance_id, index=0, attempt=1)


def test_a_bystander_of_a_retryable_cancellation_is_sent_again_too(rig: Rig) -> None:
    store = rig.store
    inst = claimed(store, shards=1)
    lease(store, inst, 0)
    # The caller's write conflicts (index 2); the fence and the effect are bystanders.
    rig.faults.cancel("TransactionConflict", at=2)
    write = {"Put": {"Item": {"pk": {"S": "NOTE#1"}, "sk": {"S": "N"}}}}
    assert store.record_effect(
        "n#1", instance_id=inst.instance_id, index=0, attempt=1, writes=[write]
    )
    assert rig.faults.pending == 0


def test_an_effect_contended_every_round_raises_and_writes_nothing(rig: Rig) -> None:
    store = rig.store
    inst = claimed(store, shards=1)
    lease(store, inst, 0)
    rig.faults.cancel("TransactionConflict", at=0, times=transact.ROUNDS)
    with pytest.raises(StoreContendedError, match="bill#a"):
        store.record_effect("bill#a", instance_id=inst.instance_id, index=0, attempt=1)
    assert rig.faults.pending == 0
    # Nothing was written: the key is still free.
    assert store.record_effect("bill#a", instance_id=inst.instance_id, index=0, attempt=1)


@pytest.mark.parametrize("code", ["ValidationError", "ItemCollectionSizeLimitExceeded"])
def test_an_invalid_effect_raises_rather_than_reading_as_applied(rig: Rig, code: str) -> None:
    store = rig.store
    inst = claimed(store, shards=1)
    lease(store, inst, 0)
    rig.faults.cancel(code, at=2)  # e.g. the caller's write makes an item over 400 KB
    write = {"Put": {"Item": {"pk": {"S": "NOTE#1"}, "sk": {"S": "N"}}}}
    with pytest.raises(WriteRejectedError, match=code):
        store.record_effect("n#1", instance_id=inst.instance_id, index=0, attempt=1, writes=[write])
    assert rig.faults.pending == 0
    assert shard_of(store, inst).attempts[0].keys == []
    assert store.record_effect("n#1", instance_id=inst.instance_id, index=0, attempt=1)


def test_a_failed_condition_of_the_caller_s_write_raises_and_claims_nothing(rig: Rig) -> None:
    store = rig.store
    inst = claimed(store, shards=1)
    lease(store, inst, 0)
    rig.faults.cancel("ConditionalCheckFailed", at=3)
    writes = [
        {"Put": {"Item": {"pk": {"S": "NOTE#1"}, "sk": {"S": "N"}}}},
        {"Put": {"Item": {"pk": {"S": "NOTE#2"}, "sk": {"S": "N"}}}},
    ]
    with pytest.raises(EffectConditionError) as raised:
        store.record_effect("n#1", instance_id=inst.instance_id, index=0, attempt=1, writes=writes)
    assert raised.value.index == 1
    assert store.record_effect("n#1", instance_id=inst.instance_id, index=0, attempt=1)


@pytest.mark.moto
def test_a_real_failed_condition_of_the_caller_s_write_raises(aws_resources: AwsResources) -> None:
    store = DynamoDBStore(
        aws_resources.clients().dynamodb(), aws_resources.table, buckets=TEST_INDEX_BUCKETS
    )
    inst = claimed(store, shards=1)
    lease(store, inst, 0)
    debit = {
        "Update": {
            "Key": {"pk": {"S": "ACCOUNT#x"}, "sk": {"S": "a"}},
            "UpdateExpression": "SET balance = balance - :one",
            "ConditionExpression": "attribute_exists(balance)",  # no such account
            "ExpressionAttributeValues": {":one": {"N": "1"}},
        }
    }
    with pytest.raises(EffectConditionError) as raised:
        store.record_effect(
            "bill#x", instance_id=inst.instance_id, index=0, attempt=1, writes=[debit]
        )
    assert raised.value.index == 0
    assert store.record_effect("bill#x", instance_id=inst.instance_id, index=0, attempt=1)


# -- complete_shard ------------------------------------------------------------------------------


@pytest.mark.parametrize("at", [0, 1], ids=["on-the-shard", "on-the-counter"])
@pytest.mark.parametrize("code", RETRYABLE)
def test_a_retryable_cancellation_of_a_completion_is_sent_again_not_read_as_stale(
    rig: Rig, code: str, at: int
) -> None:
    store = rig.store
    inst = claimed(store, shards=2)
    lease(store, inst, 0)
    rig.faults.cancel(code, at=at)
    result = store.complete_shard(
        inst.instance_id, 0, status=ShardStatus.SUCCEEDED, attempt=done(store, inst.instance_id)
    )
    assert rig.faults.pending == 0
    assert (result.remaining, shard_of(store, inst).status) == (1, ShardStatus.SUCCEEDED)


def test_a_completion_contended_every_round_or_invalid_raises_and_writes_nothing(rig: Rig) -> None:
    store = rig.store
    inst = claimed(store, shards=2)
    lease(store, inst, 0)
    attempt = done(store, inst.instance_id)
    rig.faults.cancel("TransactionConflict", at=1, times=transact.ROUNDS)
    with pytest.raises(StoreContendedError):
        store.complete_shard(inst.instance_id, 0, status=ShardStatus.SUCCEEDED, attempt=attempt)
    rig.faults.cancel("ValidationError", at=0)
    with pytest.raises(WriteRejectedError, match="ValidationError"):
        store.complete_shard(inst.instance_id, 0, status=ShardStatus.SUCCEEDED, attempt=attempt)
    assert rig.faults.pending == 0
    assert shard_of(store, inst).status is ShardStatus.RUNNING
    assert (
        store.complete_shard(
            inst.instance_id, 0, status=ShardStatus.SUCCEEDED, attempt=attempt
        ).remaining
        == 1
    )


def test_a_busy_counter_is_waited_for_through_more_than_five_rounds(rig: Rig) -> None:
    store = rig.store
    inst = claimed(store, shards=2)
    lease(store, inst, 0)
    completion = ShardCompletion(
        inst.instance_id, 0, ShardStatus.SUCCEEDED, done(store, inst.instance_id)
    )
    rig.faults.cancel("TransactionConflict", at=1, times=8)
    assert store.complete_shards([completion]) == [CompletionVerdict.COMMITTED]
    assert rig.faults.pending == 0


@pytest.mark.parametrize(
    ("code", "at", "verdict"),
    [
        *((code, 1, CompletionVerdict.COMMITTED) for code in RETRYABLE),  # sent again
        ("ValidationError", 0, CompletionVerdict.UNWRITTEN),  # its message comes back
    ],
)
def test_a_batch_completion_reads_each_reason(
    rig: Rig, code: str, at: int, verdict: CompletionVerdict
) -> None:
    store = rig.store
    inst = claimed(store, shards=2)
    lease(store, inst, 0)
    completion = ShardCompletion(
        inst.instance_id, 0, ShardStatus.SUCCEEDED, done(store, inst.instance_id)
    )
    rig.faults.cancel(code, at=at)
    assert store.complete_shards([completion]) == [verdict]
    assert rig.faults.pending == 0
    written = verdict is CompletionVerdict.COMMITTED
    assert shard_of(store, inst).status is (
        ShardStatus.SUCCEEDED if written else ShardStatus.RUNNING
    )


# -- dead_letter_shard ---------------------------------------------------------------------------


@pytest.mark.parametrize("code", RETRYABLE)
def test_a_dead_letter_whose_counter_conflicts_is_sent_again_not_lost(rig: Rig, code: str) -> None:
    store = rig.store
    inst = claimed(store, shards=2)
    rig.faults.cancel(code, at=1)
    result = store.dead_letter_shard(
        inst.instance_id,
        0,
        bounds=inst.plan.bounds(0),
        max_attempts=3,
        error="dead-lettered",
        now=T0,
    )
    assert rig.faults.pending == 0
    assert result is not None and (result.remaining, result.failed_shards) == (1, 1)
    assert shard_of(store, inst).status is ShardStatus.FAILED


def test_an_invalid_dead_letter_raises_rather_than_reading_as_already_ended(rig: Rig) -> None:
    store = rig.store
    inst = claimed(store, shards=2)
    rig.faults.cancel("ValidationError", at=0)
    with pytest.raises(WriteRejectedError):
        store.dead_letter_shard(
            inst.instance_id, 0, bounds=inst.plan.bounds(0), max_attempts=3, error="x", now=T0
        )
    # A duplicate delivery of an ended shard is still None (its condition failed for real).
    assert store.dead_letter_shard(
        inst.instance_id, 0, bounds=inst.plan.bounds(0), max_attempts=3, error="x", now=T0
    )
    assert (
        store.dead_letter_shard(
            inst.instance_id, 0, bounds=inst.plan.bounds(0), max_attempts=3, error="x", now=T0
        )
        is None
    )


# -- claims with the task's hold --------------------------------------------------------------


@pytest.fixture
def held(rig: Rig) -> Rig:
    rig.store.put_tasks([task_record(task("t", blocking={"policy": "serial"}), next_fire=T0)])
    return rig


@pytest.mark.parametrize("at", [0, 1], ids=["on-the-instance", "on-the-task"])
@pytest.mark.parametrize("code", RETRYABLE)
def test_a_queued_claim_cancelled_for_contention_is_queued_not_full(
    held: Rig, code: str, at: int
) -> None:
    store = held.store
    first = instance(slot=T0)
    assert store.claim_exclusive(first).outcome is ClaimOutcome.CLAIMED
    queued = instance(slot=T0 + M).model_copy(update={"status": InstanceStatus.QUEUED})
    held.faults.cancel(code, at=at)
    claim = store.enqueue_instance(queued, max_queued=2)
    assert held.faults.pending == 0
    assert (claim.outcome, claim.holder) == (ClaimOutcome.CLAIMED, first.instance_id)
    task_now = store.get_task("t")
    assert task_now is not None and task_now.queue == [queued.instance_id]


@pytest.mark.parametrize("code", RETRYABLE)
def test_a_take_over_cancelled_for_contention_takes_over_not_blocked(held: Rig, code: str) -> None:
    store = held.store
    first, cover = instance(slot=T0), instance(slot=T0 + M)
    store.claim_exclusive(first)
    held.faults.cancel(code, at=1)
    claim = store.take_over(cover, holder=first.instance_id)
    assert held.faults.pending == 0
    assert claim.outcome is ClaimOutcome.CLAIMED
    task_now = store.get_task("t")
    assert task_now is not None and task_now.active == cover.instance_id


def test_an_exclusive_claim_contended_every_round_raises_rather_than_recursing(held: Rig) -> None:
    store = held.store
    first = instance(slot=T0)
    held.faults.cancel("TransactionConflict", at=1, times=50)
    with pytest.raises(StoreContendedError):
        store.claim_exclusive(first)
    assert held.faults.pending == 50 - transact.ROUNDS  # bounded: a few rounds, not 50
    assert store.get_instance(first.instance_id) is None


@pytest.mark.parametrize("method", ["claim_exclusive", "enqueue_instance", "take_over"])
def test_an_invalid_claim_raises_rather_than_reading_as_the_task_s_hold(
    held: Rig, method: str
) -> None:
    store = held.store
    first, second = instance(slot=T0), instance(slot=T0 + M)
    if method != "claim_exclusive":
        store.claim_exclusive(first)
    held.faults.cancel("ValidationError", at=0)  # e.g. an instance item over 400 KB
    with pytest.raises(WriteRejectedError, match="ValidationError"):
        if method == "claim_exclusive":
            store.claim_exclusive(second)
        elif method == "enqueue_instance":
            store.enqueue_instance(second, max_queued=2)
        else:
            store.take_over(second, holder=first.instance_id)
    assert held.faults.pending == 0
    assert store.get_instance(second.instance_id) is None


def test_an_effect_refused_as_a_whole_raises_write_rejected(rig: Rig) -> None:
    # A request-level refusal (the 4 MB transaction limit, a malformed write of the caller's)
    # is WriteRejectedError as the port says, on DynamoDB as on the fake: not botocore's error.
    store = rig.store
    inst = claimed(store, shards=1)
    lease(store, inst, 0)
    rig.faults.reject("ValidationException")
    write = {"Put": {"Item": {"pk": {"S": "NOTE#1"}, "sk": {"S": "N"}}}}
    with pytest.raises(WriteRejectedError, match="ValidationException"):
        store.record_effect("n#1", instance_id=inst.instance_id, index=0, attempt=1, writes=[write])
    assert rig.faults.pending == 0
    assert store.record_effect("n#1", instance_id=inst.instance_id, index=0, attempt=1)


@pytest.mark.moto
@pytest.mark.adversarial
def test_an_effect_write_over_400_kb_names_the_item_size(
    adversarial_resources: AwsResources, adversary: object
) -> None:
    # The adversarial DynamoDB cancels as DynamoDB does: ValidationError on the action, with the
    # cause in that action's own message.
    store = DynamoDBStore(
        adversarial_resources.clients().dynamodb(),
        adversarial_resources.table,
        buckets=TEST_INDEX_BUCKETS,
    )
    inst = claimed(store, shards=1)
    lease(store, inst, 0)
    big = {"Put": {"Item": {"pk": {"S": "NOTE#1"}, "sk": {"S": "N"}, "b": {"S": "x" * 420_000}}}}
    with pytest.raises(WriteRejectedError, match="Item size has exceeded"):
        store.record_effect("n#1", instance_id=inst.instance_id, index=0, attempt=1, writes=[big])
    assert store.record_effect("n#1", instance_id=inst.instance_id, index=0, attempt=1)
