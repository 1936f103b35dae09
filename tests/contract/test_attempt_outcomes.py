"""A takeover closes the attempt it replaces: outcome `lost`, its end time, in the same write."""

from __future__ import annotations

from typing import Any

import pytest

from iotsched.adapters.dynamodb import DynamoDBStore
from iotsched.core.shard_record import ShardStatus
from iotsched.ports.shards import StaleAttemptError
from tests.contract.conftest import Store
from tests.contract.test_store import S, claimed, ended, lease, run_together, shard_of
from tests.support import T0, TEST_INDEX_BUCKETS, AwsResources


def test_a_takeover_closes_the_expired_attempt_as_lost(store: Store) -> None:
    inst = claimed(store, shards=2)
    first = lease(store, inst, worker="w1", for_s=60).shard
    assert store.record_effect("k-zombie", instance_id=inst.instance_id, index=0, attempt=1)
    requests: list[str] = []

    def count(model: Any, **_: Any) -> None:
        requests.append(model.name)

    ddb = store._ddb if isinstance(store, DynamoDBStore) else None
    if ddb is not None:  # the takeover's requests, as DynamoDB sees them
        ddb.meta.events.register("before-call.dynamodb", count)
    try:
        taken = lease(store, inst, worker="w2", at=T0 + 90 * S)
    finally:
        if ddb is not None:
            ddb.meta.events.unregister("before-call.dynamodb", count)
    assert taken.taken
    if ddb is not None:
        # the put that finds the record, then one conditional update: closing the lost
        # attempt costs no request of its own
        assert requests == ["PutItem", "UpdateItem"]
    for shard in (taken.shard, shard_of(store, inst)):  # what the lease returned, as stored
        lost, running = shard.attempts
        assert (lost.number, lost.worker, lost.started_at) == (
            1,
            "w1",
            first.attempts[0].started_at,
        )
        assert lost.outcome == "lost"
        assert lost.ended_at == T0 + 90 * S  # when the next attempt took over
        assert lost.duration_ms == 90_000
        assert lost.error is not None and "lease expired" in lost.error
        assert lost.keys == ["k-zombie"]  # what it did before it was lost stays listed
        assert (running.number, running.worker, running.outcome) == (2, "w2", None)
        assert (shard.status, shard.attempt, shard.owner) == (ShardStatus.RUNNING, 2, "w2")
        assert shard.error is None


def test_a_zombie_cannot_reopen_its_lost_attempt(store: Store) -> None:
    inst = claimed(store, shards=2)
    zombie = lease(store, inst, worker="w1", for_s=60).shard
    lease(store, inst, worker="w2", at=T0 + 61 * S)
    after_takeover = shard_of(store, inst)
    with pytest.raises(StaleAttemptError):
        store.complete_shard(
            inst.instance_id,
            0,
            status=ShardStatus.SUCCEEDED,
            attempt=ended(zombie, at=T0 + 70 * S, outcome="succeeded"),
        )
    assert shard_of(store, inst) == after_takeover
    assert after_takeover.attempts[0].outcome == "lost"


def test_concurrent_takeovers_close_the_lost_attempt_once(store: Store) -> None:
    inst = claimed(store)
    lease(store, inst, worker="w0", for_s=60)
    results = run_together(
        6,
        lambda i: store.take_lease(
            inst.instance_id,
            0,
            bounds={},
            worker=f"w{i + 1}",
            now=T0 + 61 * S,
            lease_until=T0 + 121 * S,
            max_attempts=3,
        ),
    )
    winners = [r for r in results if r.taken]
    assert len(winners) == 1
    shard = shard_of(store, inst)
    assert [a.outcome for a in shard.attempts] == ["lost", None]
    assert shard.attempts[1].worker == winners[0].shard.owner


def test_the_next_attempt_of_a_released_shard_leaves_its_failed_attempt_as_it_was(
    store: Store,
) -> None:
    inst = claimed(store)
    first = lease(store, inst, worker="w1").shard
    failed = ended(first, at=T0 + 2 * S, outcome="failed", error="E: x")
    store.release_shard(inst.instance_id, 0, attempt=failed)
    retry = lease(store, inst, worker="w2", at=T0 + 40 * S)
    assert retry.taken
    assert shard_of(store, inst).attempts[0] == failed
    assert [a.outcome for a in shard_of(store, inst).attempts] == ["failed", None]


def test_a_live_lease_is_not_taken_and_its_attempt_stays_open(store: Store) -> None:
    inst = claimed(store)
    lease(store, inst, worker="w1", for_s=60)
    busy = lease(store, inst, worker="w2", at=T0 + 30 * S)
    assert not busy.taken
    assert [a.outcome for a in shard_of(store, inst).attempts] == [None]


@pytest.mark.moto
def test_a_takeover_that_loses_the_race_to_the_expired_attempts_release_takes_it_anyway(
    aws_resources: AwsResources,
) -> None:
    """The takeover's write is fenced on the running attempt it read; if that attempt released
    the shard in between (its handler raised after its lease expired), the takeover decides
    again on the released record rather than acknowledging a message whose shard then waits."""
    store = DynamoDBStore(
        aws_resources.clients().dynamodb(), aws_resources.table, buckets=TEST_INDEX_BUCKETS
    )
    inst = claimed(store)
    first = lease(store, inst, worker="w1", for_s=60).shard
    read = shard_of(store, inst)  # what the takeover's put found: running, lease expired
    failed = ended(first, at=T0 + 70 * S, outcome="failed", error="E: late")
    store.release_shard(inst.instance_id, 0, attempt=failed)  # lands before the takeover
    taken = store._retake_lease(
        inst.instance_id,
        0,
        previous=read,
        bounds={},
        worker="w2",
        now=T0 + 90 * S,
        lease_until=T0 + 150 * S,
        max_attempts=3,
    )
    assert taken.taken
    shard = shard_of(store, inst)
    assert shard.attempts[0] == failed  # its own outcome stands; it was not lost
    assert [(a.worker, a.outcome) for a in shard.attempts] == [("w1", "failed"), ("w2", None)]
    assert (shard.status, shard.attempt, shard.owner) == (ShardStatus.RUNNING, 2, "w2")
