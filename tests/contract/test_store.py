"""TaskStore and InstanceStore contracts (iotsched.ports), on the fake and on DynamoDB (moto)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any

import pytest

from iotsched.core.attempt_record import (
    Attempt,
    AttemptOutcome,
)
from iotsched.core.instance_record import (
    InstanceRecord,
    InstanceStatus,
    TriggerKind,
)
from iotsched.core.shard_record import (
    ShardRecord,
    ShardStatus,
)
from iotsched.ports.blocking import ClaimOutcome
from iotsched.ports.shards import (
    CompletionResult,
    CompletionVerdict,
    ShardCompletion,
    StaleAttemptError,
)
from tests.contract.conftest import Store
from tests.support import T0, instance, task, task_record

S = timedelta(seconds=1)
M = timedelta(minutes=1)
MAX = 3


def run_together(n: int, action: Callable[[int], Any]) -> list[Any]:
    """Run `action(i)` for i in range(n) on n threads released together.

    The threads share one store: boto3 clients are thread-safe, and each request is a separate
    conditional write, which is what the contracts are about.
    """
    barrier = threading.Barrier(n)

    def go(i: int) -> Any:
        barrier.wait(timeout=30)
        return action(i)

    with ThreadPoolExecutor(max_workers=n) as pool:
        return list(pool.map(go, range(n)))


def claimed(store: Store, **kwargs: Any) -> InstanceRecord:
    """Claim a fresh instance (see `tests.support.instance`) and return it."""
    inst = instance(**kwargs)
    assert store.claim_instance(inst) is None
    return inst


def lease(
    store: Store,
    inst: InstanceRecord,
    index: int = 0,
    *,
    worker: str = "w1",
    at: datetime = T0,
    for_s: int = 60,
    max_attempts: int = MAX,
) -> Any:
    return store.take_lease(
        inst.instance_id,
        index,
        bounds=inst.plan.bounds(index),
        worker=worker,
        now=at,
        lease_until=at + for_s * S,
        max_attempts=max_attempts,
    )


def ended(shard: ShardRecord, *, at: datetime, outcome: str, error: str | None = None) -> Attempt:
    """The shard's current attempt, ended at `at` with `outcome`."""
    current = shard.attempts[-1]
    return current.model_copy(
        update={
            "ended_at": at,
            "duration_ms": int((at - current.started_at).total_seconds() * 1000),
            "outcome": AttemptOutcome(outcome),
            "error": error,
        }
    )


def shard_of(store: Store, inst: InstanceRecord, index: int = 0) -> ShardRecord:
    (found,) = [s for s in store.list_shards(inst.instance_id) if s.index == index]
    return found


def current(store: Store, inst: InstanceRecord) -> InstanceRecord:
    found = store.get_instance(inst.instance_id)
    assert found is not None
    return found


# -- claim --------------------------------------------------------------------------------------


def test_claim_is_exactly_once_and_the_loser_sees_the_stored_instance(store: Store) -> None:
    first = instance(
        "t",
        shards=[{"tenant": "acme"}, {"tenant": "globex"}],
        tenant="acme",
        params={"nested": {"a": [1, 2.5, "x"]}, "flag": True},
    )
    assert store.claim_instance(first) is None
    rival = instance("t", shards=5, claimed_at=T0 + 30 * S)
    assert rival.instance_id == first.instance_id
    assert store.claim_instance(rival) == first
    assert store.get_instance(first.instance_id) == first


def test_instances_round_trip_unchanged(store: Store) -> None:
    inst = instance(
        "rt",
        shards=[{"r": "eu"}],
        status=InstanceStatus.SKIPPED,
        tenant="initech",
        params={"x": 1},
        trigger={"cron": "5 0 * * *", "timezone": "Europe/Berlin"},
        retry={"max_attempts": 5, "backoff_s": 7},
        alerts={"severity": "low"},
    ).model_copy(
        update={
            "reason": "misfire",
            "trigger_kind": TriggerKind.CATCH_UP,
            "covers": [T0 - 60 * S, T0 - 120 * S],
            "finished_at": T0,
            "dispatch_lease_until": None,
        }
    )
    assert store.claim_instance(inst) is None
    assert store.get_instance(inst.instance_id) == inst


def test_concurrent_claims_have_one_winner(store: Store) -> None:
    candidates = [instance("race", claimed_at=T0 + i * S) for i in range(8)]
    results = run_together(8, lambda i: store.claim_instance(candidates[i]))
    winners = [i for i, r in enumerate(results) if r is None]
    assert len(winners) == 1
    stored = candidates[winners[0]]
    assert all(r == stored for r in results if r is not None)
    assert store.get_instance(stored.instance_id) == stored


@pytest.mark.parametrize("instance_id", ["nope@2026-11-29T12:00Z", "no-at-sign"])
def test_get_unknown_instance_is_none(store: Store, instance_id: str) -> None:
    assert store.get_instance(instance_id) is None


# -- dispatch lease -----------------------------------------------------------------------------


def test_take_dispatch_waits_for_the_claimers_dispatch_lease(store: Store) -> None:
    inst = claimed(store, dispatch_lease_s=60)
    iid = inst.instance_id
    assert inst.dispatch_lease_until == T0 + 60 * S
    assert store.take_dispatch(iid, now=T0 + 59 * S, until=T0 + 120 * S) is False
    assert store.take_dispatch(iid, now=T0 + 60 * S, until=T0 + 120 * S) is True
    assert current(store, inst).dispatch_lease_until == T0 + 120 * S
    # The resumer's lease now holds the others off in turn.
    assert store.take_dispatch(iid, now=T0 + 61 * S, until=T0 + 180 * S) is False
    assert store.take_dispatch(iid, now=T0 + 120 * S, until=T0 + 180 * S) is True


def test_take_dispatch_only_while_planning(store: Store) -> None:
    inst = claimed(store)
    assert store.set_instance_status(
        inst.instance_id, expected=InstanceStatus.PLANNING, status=InstanceStatus.RUNNING
    )
    assert store.take_dispatch(inst.instance_id, now=T0 + 3600 * S, until=T0 + 3660 * S) is False
    skipped = claimed(store, task_id="s", status=InstanceStatus.SKIPPED)
    assert store.take_dispatch(skipped.instance_id, now=T0, until=T0 + 60 * S) is False
    assert store.take_dispatch("ghost@2026-11-29T12:00Z", now=T0, until=T0 + 60 * S) is False


def test_take_dispatch_without_a_lease_is_immediate(store: Store) -> None:
    inst = instance().model_copy(update={"dispatch_lease_until": None})
    assert store.claim_instance(inst) is None
    assert store.take_dispatch(inst.instance_id, now=T0, until=T0 + 60 * S) is True


def test_concurrent_take_dispatch_has_one_winner(store: Store) -> None:
    inst = claimed(store)
    later = T0 + 61 * S
    results = run_together(
        8, lambda i: store.take_dispatch(inst.instance_id, now=later, until=later + 60 * S)
    )
    assert results.count(True) == 1


# -- instance status ----------------------------------------------------------------------------


def test_set_instance_status_is_compare_and_set(store: Store) -> None:
    inst = claimed(store)
    iid = inst.instance_id
    assert (
        store.set_instance_status(
            iid, expected=InstanceStatus.RUNNING, status=InstanceStatus.CANCELLED
        )
        is False
    )
    assert current(store, inst).status is InstanceStatus.PLANNING
    assert store.set_instance_status(
        iid, expected=InstanceStatus.PLANNING, status=InstanceStatus.RUNNING
    )
    assert (
        store.set_instance_status(
            iid, expected=InstanceStatus.PLANNING, status=InstanceStatus.RUNNING
        )
        is False
    )
    assert store.set_instance_status(
        iid,
        expected=InstanceStatus.RUNNING,
        status=InstanceStatus.CANCELLED,
        reason="operator",
        finished_at=T0 + 90 * S,
    )
    after = current(store, inst)
    assert (after.status, after.reason, after.finished_at) == (
        InstanceStatus.CANCELLED,
        "operator",
        T0 + 90 * S,
    )
    assert after.model_copy(
        update={"status": inst.status, "reason": None, "finished_at": None}
    ) == (inst)
    assert (
        store.set_instance_status(
            "ghost@2026-11-29T12:00Z",
            expected=InstanceStatus.PLANNING,
            status=InstanceStatus.RUNNING,
        )
        is False
    )


def complete_all(store: Store, inst: InstanceRecord, *, fail: frozenset[int] = frozenset()) -> None:
    for index in range(inst.plan.count):
        taken = lease(store, inst, index)
        assert taken.taken
        failed = index in fail
        store.complete_shard(
            inst.instance_id,
            index,
            status=ShardStatus.FAILED if failed else ShardStatus.SUCCEEDED,
            attempt=ended(taken.shard, at=T0 + 5 * S, outcome="failed" if failed else "succeeded"),
            error="boom" if failed else None,
        )


def test_finalize_only_at_zero_and_exactly_once(store: Store) -> None:
    inst = claimed(store, shards=2)
    iid = inst.instance_id
    assert store.finalize_instance(iid, status=InstanceStatus.SUCCEEDED, finished_at=T0) is False
    assert current(store, inst).status is InstanceStatus.PLANNING
    complete_all(store, inst)
    assert current(store, inst).remaining == 0
    assert store.finalize_instance(iid, status=InstanceStatus.SUCCEEDED, finished_at=T0 + 9 * S)
    assert store.finalize_instance(iid, status=InstanceStatus.FAILED, finished_at=T0) is False
    after = current(store, inst)
    assert (after.status, after.finished_at) == (InstanceStatus.SUCCEEDED, T0 + 9 * S)


def test_finalize_from_running(store: Store) -> None:
    inst = claimed(store)
    store.set_instance_status(
        inst.instance_id, expected=InstanceStatus.PLANNING, status=InstanceStatus.RUNNING
    )
    complete_all(store, inst, fail=frozenset({0}))
    assert current(store, inst).failed_shards == 1
    assert store.finalize_instance(inst.instance_id, status=InstanceStatus.FAILED, finished_at=T0)
    assert current(store, inst).status is InstanceStatus.FAILED


def test_a_final_instance_is_never_finalized(store: Store) -> None:
    skipped = claimed(store, status=InstanceStatus.SKIPPED)
    assert skipped.remaining == 0
    assert (
        store.finalize_instance(
            skipped.instance_id, status=InstanceStatus.SUCCEEDED, finished_at=T0
        )
        is False
    )
    assert current(store, skipped).status is InstanceStatus.SKIPPED


def test_concurrent_finalizers_have_one_winner(store: Store) -> None:
    inst = claimed(store, shards=1)
    complete_all(store, inst)
    results = run_together(
        8,
        lambda i: store.finalize_instance(
            inst.instance_id, status=InstanceStatus.SUCCEEDED, finished_at=T0
        ),
    )
    assert results.count(True) == 1


# -- leases -------------------------------------------------------------------------------------


def test_a_new_shard_is_taken_as_attempt_one(store: Store) -> None:
    inst = claimed(store, shards=[{"tenant": "acme"}])
    result = lease(store, inst, worker="w1", for_s=60)
    assert result.taken
    shard = result.shard
    assert (shard.instance_id, shard.index, shard.bounds) == (
        inst.instance_id,
        0,
        {"tenant": "acme"},
    )
    assert (shard.status, shard.attempt, shard.owner) == (ShardStatus.RUNNING, 1, "w1")
    assert shard.lease_until == T0 + 60 * S
    assert shard.attempts == [Attempt(number=1, worker="w1", started_at=T0)]
    assert shard_of(store, inst) == shard


def test_a_live_lease_is_not_taken(store: Store) -> None:
    inst = claimed(store)
    first = lease(store, inst, worker="w1", for_s=60)
    for at in (T0, T0 + 59 * S):
        second = lease(store, inst, worker="w2", at=at)
        assert not second.taken
        assert second.shard == first.shard
    assert shard_of(store, inst) == first.shard


def test_an_expired_lease_is_taken_over_as_the_next_attempt(store: Store) -> None:
    inst = claimed(store)
    lease(store, inst, worker="w1", for_s=60)
    takeover = lease(store, inst, worker="w2", at=T0 + 60 * S, for_s=60)
    assert takeover.taken
    shard = takeover.shard
    assert (shard.status, shard.attempt, shard.owner) == (ShardStatus.RUNNING, 2, "w2")
    assert shard.lease_until == T0 + 120 * S
    assert shard.attempts == [
        Attempt(number=1, worker="w1", started_at=T0).lost(T0 + 60 * S),
        Attempt(number=2, worker="w2", started_at=T0 + 60 * S),
    ]
    assert shard_of(store, inst) == shard


def test_an_expired_last_attempt_is_not_taken(store: Store) -> None:
    inst = claimed(store)
    for n in range(MAX):
        assert lease(store, inst, worker=f"w{n}", at=T0 + n * 100 * S).taken
    exhausted = lease(store, inst, worker="late", at=T0 + 1000 * S)
    assert not exhausted.taken
    assert (exhausted.shard.attempt, exhausted.shard.status) == (MAX, ShardStatus.RUNNING)
    assert exhausted.shard.owner == f"w{MAX - 1}"


def test_a_finished_shard_is_not_taken(store: Store) -> None:
    inst = claimed(store, shards=2)
    complete_all(store, inst)
    again = lease(store, inst, 1, worker="w9", at=T0 + 3600 * S)
    assert not again.taken
    assert (again.shard.status, again.shard.attempt) == (ShardStatus.SUCCEEDED, 1)


def test_a_released_shard_is_taken_as_the_next_attempt(store: Store) -> None:
    inst = claimed(store)
    first = lease(store, inst, worker="w1")
    assert store.record_effect("k1", instance_id=inst.instance_id, index=0, attempt=1)
    store.release_shard(
        inst.instance_id,
        0,
        attempt=ended(first.shard, at=T0 + 2 * S, outcome="failed", error="E: x"),
    )
    released = shard_of(store, inst)
    assert (released.status, released.owner, released.lease_until) == (
        ShardStatus.PENDING,
        None,
        None,
    )
    assert released.error == "E: x"
    assert released.attempts[0].outcome == "failed"
    assert released.attempts[0].ended_at == T0 + 2 * S
    assert released.attempts[0].duration_ms == 2000
    assert released.attempts[0].keys == ["k1"]

    retry = lease(store, inst, worker="w2", at=T0 + 3 * S)
    assert retry.taken
    assert retry.shard.attempt == 2
    assert [a.worker for a in retry.shard.attempts] == ["w1", "w2"]
    assert retry.shard.attempts[0].outcome == "failed"


def test_a_lease_given_back_leaves_the_shard_as_before_its_take(store: Store) -> None:
    """A first attempt given back leaves no record, as before it; the next take is attempt
    one."""
    inst = claimed(store)
    first = lease(store, inst, worker="w1", for_s=60)
    store.give_back_lease(first.shard)
    assert store.get_shard(inst.instance_id, 0) is None
    store.give_back_lease(first.shard)  # sent again: already done
    again = lease(store, inst, worker="w2", at=T0 + S)
    assert again.taken and again.shard.attempt == 1
    assert again.shard.attempts == [Attempt(number=1, worker="w2", started_at=T0 + S)]
    with pytest.raises(StaleAttemptError):
        store.extend_lease(inst.instance_id, 0, attempt=2, until=T0 + 500 * S)


def test_a_give_back_sent_again_after_a_new_take_of_its_number_leaves_that_take(
    store: Store,
) -> None:
    """The number comes round again after a give-back (attempt one, then one again): the first
    take's give-back, sent again late (its answer lost), is fenced on the take itself, so the
    new holder keeps its lease and no second holder can start beside it."""
    inst = claimed(store)
    first = lease(store, inst, worker="w1", for_s=60)
    store.give_back_lease(first.shard)
    second = lease(store, inst, worker="w2", at=T0 + S, for_s=60)
    assert second.taken and second.shard.attempt == 1
    with pytest.raises(StaleAttemptError):
        store.give_back_lease(first.shard)
    held = shard_of(store, inst)
    assert (held.status, held.owner, held.attempt) == (ShardStatus.RUNNING, "w2", 1)
    assert not lease(store, inst, worker="w3", at=T0 + 2 * S).taken  # w2's lease is live


def test_a_takeover_given_back_keeps_the_lost_attempt_and_uses_none(store: Store) -> None:
    inst = claimed(store)
    lease(store, inst, worker="w1", for_s=60)
    takeover = lease(store, inst, worker="w2", at=T0 + 60 * S, for_s=60)
    assert takeover.shard.attempt == 2
    store.give_back_lease(takeover.shard)
    back = shard_of(store, inst)
    assert (back.status, back.attempt) == (ShardStatus.PENDING, 1)
    assert back.attempts == [Attempt(number=1, worker="w1", started_at=T0).lost(T0 + 60 * S)]
    # the zombie of attempt one stays fenced out: its writes need it running
    with pytest.raises(StaleAttemptError):
        store.extend_lease(inst.instance_id, 0, attempt=1, until=T0 + 500 * S)
    retry = lease(store, inst, worker="w3", at=T0 + 61 * S, for_s=60)
    assert retry.taken and retry.shard.attempt == 2
    with pytest.raises(StaleAttemptError):
        store.give_back_lease(takeover.shard)  # late, after w3's take of the same number
    assert shard_of(store, inst).owner == "w3"


def test_concurrent_lease_requests_have_one_winner(store: Store) -> None:
    inst = claimed(store)
    results = run_together(
        8,
        lambda i: store.take_lease(
            inst.instance_id,
            0,
            bounds={},
            worker=f"w{i}",
            now=T0,
            lease_until=T0 + 60 * S,
            max_attempts=MAX,
        ),
    )
    winners = [r for r in results if r.taken]
    assert len(winners) == 1
    assert shard_of(store, inst).owner == winners[0].shard.owner
    assert len(shard_of(store, inst).attempts) == 1


# -- fencing ------------------------------------------------------------------------------------


def zombie_and_successor(store: Store) -> tuple[InstanceRecord, ShardRecord, ShardRecord]:
    """Attempt 1 leased shard 0 and stalled; attempt 2 took it over. Two shards in all."""
    inst = claimed(store, shards=2)
    zombie = lease(store, inst, worker="w1", for_s=60).shard
    successor = lease(store, inst, worker="w2", at=T0 + 61 * S).shard
    assert successor.attempt == 2
    return inst, zombie, successor


def test_a_stale_attempt_cannot_extend_the_lease(store: Store) -> None:
    inst, _zombie, successor = zombie_and_successor(store)
    with pytest.raises(StaleAttemptError):
        store.extend_lease(inst.instance_id, 0, attempt=1, until=T0 + 999 * S)
    assert shard_of(store, inst) == successor
    store.extend_lease(inst.instance_id, 0, attempt=2, until=T0 + 500 * S)
    assert shard_of(store, inst).lease_until == T0 + 500 * S


def test_a_stale_attempt_cannot_release_the_shard(store: Store) -> None:
    inst, zombie, successor = zombie_and_successor(store)
    with pytest.raises(StaleAttemptError):
        store.release_shard(
            inst.instance_id, 0, attempt=ended(zombie, at=T0 + 70 * S, outcome="failed")
        )
    assert shard_of(store, inst) == successor


def test_a_stale_attempt_cannot_complete_the_shard(store: Store) -> None:
    inst, zombie, successor = zombie_and_successor(store)
    with pytest.raises(StaleAttemptError):
        store.complete_shard(
            inst.instance_id,
            0,
            status=ShardStatus.SUCCEEDED,
            attempt=ended(zombie, at=T0 + 70 * S, outcome="succeeded"),
        )
    assert shard_of(store, inst) == successor
    assert (current(store, inst).remaining, current(store, inst).failed_shards) == (2, 0)


def test_no_write_touches_a_finished_shard(store: Store) -> None:
    inst = claimed(store, shards=2)
    taken = lease(store, inst).shard
    done = ended(taken, at=T0 + 5 * S, outcome="succeeded")
    store.complete_shard(inst.instance_id, 0, status=ShardStatus.SUCCEEDED, attempt=done)
    finished = shard_of(store, inst)
    with pytest.raises(StaleAttemptError):
        store.complete_shard(inst.instance_id, 0, status=ShardStatus.FAILED, attempt=done)
    with pytest.raises(StaleAttemptError):
        store.release_shard(inst.instance_id, 0, attempt=done)
    with pytest.raises(StaleAttemptError):
        store.extend_lease(inst.instance_id, 0, attempt=1, until=T0 + 999 * S)
    assert shard_of(store, inst) == finished
    assert current(store, inst).remaining == 1


def test_a_released_attempt_cannot_complete_the_shard(store: Store) -> None:
    """After release (pending, no lease) the same attempt number holds nothing any more."""
    inst = claimed(store, shards=2)
    taken = lease(store, inst).shard
    store.release_shard(inst.instance_id, 0, attempt=ended(taken, at=T0 + 2 * S, outcome="failed"))
    released = shard_of(store, inst)
    with pytest.raises(StaleAttemptError):
        store.complete_shard(
            inst.instance_id,
            0,
            status=ShardStatus.SUCCEEDED,
            attempt=ended(taken, at=T0 + 3 * S, outcome="succeeded"),
        )
    assert shard_of(store, inst) == released
    assert current(store, inst).remaining == 2


def test_fenced_writes_on_a_shard_nobody_leased_are_stale(store: Store) -> None:
    inst = claimed(store)
    attempt = Attempt(number=1, worker="w", started_at=T0)
    with pytest.raises(StaleAttemptError):
        store.extend_lease(inst.instance_id, 0, attempt=1, until=T0 + 60 * S)
    with pytest.raises(StaleAttemptError):
        store.release_shard(inst.instance_id, 0, attempt=attempt)
    with pytest.raises(StaleAttemptError):
        store.complete_shard(inst.instance_id, 0, status=ShardStatus.SUCCEEDED, attempt=attempt)
    assert current(store, inst).remaining == 1


# -- completion ---------------------------------------------------------------------------------


def test_complete_shard_decrements_remaining_and_counts_failures(store: Store) -> None:
    inst = claimed(store, shards=3)
    results = []
    for index, status in enumerate(
        [ShardStatus.SUCCEEDED, ShardStatus.FAILED, ShardStatus.TIMED_OUT]
    ):
        taken = lease(store, inst, index, worker=f"w{index}").shard
        assert store.record_effect(
            f"k{index}", instance_id=inst.instance_id, index=index, attempt=1
        )
        results.append(
            store.complete_shard(
                inst.instance_id,
                index,
                status=status,
                attempt=ended(taken, at=T0 + 4 * S, outcome=status.value),
                error=None if status is ShardStatus.SUCCEEDED else f"{status} here",
            )
        )
    assert results == [
        CompletionResult(remaining=2, failed_shards=0),
        CompletionResult(remaining=1, failed_shards=1),
        CompletionResult(remaining=0, failed_shards=2),
    ]
    after = current(store, inst)
    assert (after.remaining, after.failed_shards) == (0, 2)
    assert after.status is InstanceStatus.PLANNING  # completion does not finalize by itself
    shards = store.list_shards(inst.instance_id)
    assert [(s.status, s.error) for s in shards] == [
        (ShardStatus.SUCCEEDED, None),
        (ShardStatus.FAILED, "failed here"),
        (ShardStatus.TIMED_OUT, "timed_out here"),
    ]
    for shard in shards:
        assert shard.lease_until is None
        (attempt,) = shard.attempts
        assert attempt.ended_at == T0 + 4 * S
        assert attempt.duration_ms == 4000
        assert attempt.outcome == shard.status.value
        assert attempt.keys == [f"k{shard.index}"]  # listed by the effect, kept by the end
    assert [s.keys_written for s in shards] == [["k0"], ["k1"], ["k2"]]


def test_concurrent_completions_each_count_once(store: Store) -> None:
    inst = claimed(store, shards=8)
    leased = [lease(store, inst, i, worker=f"w{i}").shard for i in range(8)]
    run_together(
        8,
        lambda i: store.complete_shard(
            inst.instance_id,
            i,
            status=ShardStatus.FAILED if i % 2 else ShardStatus.SUCCEEDED,
            attempt=ended(leased[i], at=T0 + S, outcome="succeeded"),
        ),
    )
    after = current(store, inst)
    assert (after.remaining, after.failed_shards) == (0, 4)


def test_list_shards_lists_touched_shards_by_index(store: Store) -> None:
    inst = claimed(store, shards=12)
    for index in (10, 2, 0):
        lease(store, inst, index, worker=f"w{index}")
    assert [s.index for s in store.list_shards(inst.instance_id)] == [0, 2, 10]
    assert [s.bounds for s in store.list_shards(inst.instance_id)] == [
        {"n": 0},
        {"n": 2},
        {"n": 10},
    ]
    other = claimed(store, task_id="other")
    assert store.list_shards(other.instance_id) == []


# -- listing instances --------------------------------------------------------------------------


def test_list_instances_by_task_and_status_newest_first(store: Store) -> None:
    slots = [T0 + h * 3600 * S for h in range(4)]
    for slot in slots:
        claimed(store, task_id="a", slot=slot)
    claimed(store, task_id="ab", slot=T0 + 30 * 60 * S)
    claimed(store, task_id="b", slot=T0 + 90 * 60 * S, status=InstanceStatus.SKIPPED)
    running = instance("a", slot=slots[1]).instance_id
    store.set_instance_status(
        running, expected=InstanceStatus.PLANNING, status=InstanceStatus.RUNNING
    )

    by_task = store.list_instances(task_id="a")
    assert [i.slot for i in by_task] == slots[::-1]
    assert {i.task_id for i in by_task} == {"a"}
    assert [i.slot for i in store.list_instances(task_id="a", limit=2)] == slots[:1:-1]

    assert [i.instance_id for i in store.list_instances(status=InstanceStatus.RUNNING)] == [running]
    assert [i.task_id for i in store.list_instances(status=InstanceStatus.SKIPPED)] == ["b"]
    assert [i.slot for i in store.list_instances(task_id="a", status=InstanceStatus.PLANNING)] == [
        slots[3],
        slots[2],
        slots[0],
    ]
    assert store.list_instances(task_id="b", status=InstanceStatus.PLANNING) == []

    everything = store.list_instances()
    assert len(everything) == 6
    assert [i.slot for i in everything] == sorted((i.slot for i in everything), reverse=True)
    assert len(store.list_instances(limit=3)) == 3
    assert store.list_instances(task_id="nobody") == []


# -- ending what nobody else ends -----------------------------------------------------------------


def test_end_instance_ends_an_open_instance_once(store: Store) -> None:
    inst = claimed(store, shards=3)
    assert store.end_instance(
        inst.instance_id, status=InstanceStatus.CANCELLED, reason="by ops", finished_at=T0
    )
    assert not store.end_instance(
        inst.instance_id, status=InstanceStatus.TIMED_OUT, reason="late", finished_at=T0
    )
    now = current(store, inst)
    assert (now.status, now.reason, now.finished_at) == (InstanceStatus.CANCELLED, "by ops", T0)
    assert inst.instance_id not in [i.instance_id for i in store.open_instances()]


def test_instance_ended_reads_an_instances_end_and_a_missing_one_as_ended(store: Store) -> None:
    inst = claimed(store, shards=3)
    assert not store.instance_ended(inst.instance_id)
    assert store.end_instance(
        inst.instance_id, status=InstanceStatus.ABORTED, reason="abort", finished_at=T0
    )
    assert store.instance_ended(inst.instance_id)
    other = claimed(store, slot=T0 + M, shards=1)
    complete_all(store, other)
    assert not store.instance_ended(other.instance_id)  # drained, not yet final
    assert store.finalize_instance(
        other.instance_id, status=InstanceStatus.SUCCEEDED, finished_at=T0
    )
    assert store.instance_ended(other.instance_id)
    assert store.instance_ended("never-claimed@2026-11-29T12:00Z")
    assert store.instance_ended("not an instance id")


def test_open_instances_by_deadline(store: Store) -> None:
    late = claimed(store, slot=T0, instance_timeout_s=90 * 60)
    soon = claimed(store, slot=T0 + M, instance_timeout_s=5 * 60)
    done = claimed(store, slot=T0 + 2 * M, shards=1)
    complete_all(store, done)
    assert store.finalize_instance(
        done.instance_id, status=InstanceStatus.SUCCEEDED, finished_at=T0
    )
    assert [i.instance_id for i in store.open_instances()] == [soon.instance_id, late.instance_id]


def test_expired_leases_lists_running_shards_past_their_lease(store: Store) -> None:
    inst = claimed(store, shards=3)
    for index, for_s in ((0, 10), (1, 100), (2, 10)):
        lease(store, inst, index, for_s=for_s)
        # renewed once, to the same end: in the lease index from here on
        store.extend_lease(inst.instance_id, index, attempt=1, until=T0 + for_s * S)
    taken = store.get_shard(inst.instance_id, 2)
    assert taken is not None
    store.complete_shard(
        inst.instance_id,
        2,
        status=ShardStatus.SUCCEEDED,
        attempt=ended(taken, at=T0 + 5 * S, outcome="succeeded"),
    )
    assert store.expired_leases(T0 + 5 * S) == []
    expired = store.expired_leases(T0 + 10 * S)
    assert [(s.index, s.attempt, s.max_attempts) for s in expired] == [(0, 1, MAX)]
    store.extend_lease(inst.instance_id, 0, attempt=1, until=T0 + 200 * S)
    assert [s.index for s in store.expired_leases(T0 + 150 * S)] == [1]


def test_a_lease_enters_the_lease_index_with_its_first_renewal(store: Store) -> None:
    """A lease is listed by `expired_leases` only once its end was moved (a renewal, the
    sweeper's move, a delivery's indexing move): a shard that ends before its first renewal
    never writes the index. Until then its message covers its worker's death."""
    inst = claimed(store, shards=2)
    lease(store, inst, 0, for_s=10)
    lease(store, inst, 1, for_s=20)
    assert store.expired_leases(T0 + 60 * S) == []  # neither renewed: not in the index
    store.extend_lease(inst.instance_id, 1, attempt=1, until=T0 + 20 * S)  # in it, same end
    assert [s.index for s in store.expired_leases(T0 + 60 * S)] == [1]
    store.extend_lease(inst.instance_id, 0, attempt=1, until=T0 + 30 * S, was=T0 + 10 * S)
    assert [s.index for s in store.expired_leases(T0 + 60 * S)] == [1, 0]  # lease-end order


def test_a_lease_taken_indexed_is_listed_at_once(store: Store) -> None:
    """A lease shorter than the hold of its message (a short `timeout_s`) is indexed with its
    take, a first attempt's or a later one's."""
    inst = claimed(store, shards=2)
    first = store.take_lease(
        inst.instance_id,
        0,
        bounds={},
        worker="w1",
        now=T0,
        lease_until=T0 + 3 * S,
        max_attempts=MAX,
        indexed=True,
    )
    assert first.taken
    assert [(s.index, s.attempt) for s in store.expired_leases(T0 + 3 * S)] == [(0, 1)]
    second = store.take_lease(
        inst.instance_id,
        0,
        bounds={},
        worker="w2",
        now=T0 + 4 * S,
        lease_until=T0 + 7 * S,
        max_attempts=MAX,
        indexed=True,
    )
    assert second.taken and second.shard.attempt == 2
    assert store.expired_leases(T0 + 6 * S) == []
    assert [(s.index, s.attempt) for s in store.expired_leases(T0 + 7 * S)] == [(0, 2)]


def test_a_new_attempt_starts_out_of_the_lease_index(store: Store) -> None:
    """A takeover or a retry is a new attempt: its lease enters the index with its own first
    renewal, not with the lost attempt's entry."""
    inst = claimed(store, shards=2)
    lease(store, inst, 0, for_s=10)
    store.extend_lease(inst.instance_id, 0, attempt=1, until=T0 + 10 * S)
    assert [s.index for s in store.expired_leases(T0 + 10 * S)] == [0]
    taken = lease(store, inst, 0, worker="w2", at=T0 + 11 * S, for_s=10)  # the takeover
    assert taken.taken and taken.shard.attempt == 2
    assert store.expired_leases(T0 + 60 * S) == []
    store.extend_lease(inst.instance_id, 0, attempt=2, until=T0 + 40 * S)
    assert [(s.index, s.attempt) for s in store.expired_leases(T0 + 60 * S)] == [(0, 2)]
    # a retry: attempt 1 of shard 1, renewed, released; attempt 2 is not indexed
    first = lease(store, inst, 1, for_s=10).shard
    store.extend_lease(inst.instance_id, 1, attempt=1, until=T0 + 10 * S)
    store.release_shard(
        inst.instance_id, 1, attempt=ended(first, at=T0 + 5 * S, outcome="failed", error="x")
    )
    assert lease(store, inst, 1, worker="w2", at=T0 + 6 * S, for_s=10).taken
    assert [(s.index, s.attempt) for s in store.expired_leases(T0 + 60 * S)] == [(0, 2)]


def test_a_lease_moved_only_if_its_end_is_still_the_one_read(store: Store) -> None:
    """The sweeper's move of an expired lease yields to a renewal made since its read."""
    inst = claimed(store, shards=1)
    read = lease(store, inst, 0, for_s=10).shard
    assert read.lease_until == T0 + 10 * S
    store.extend_lease(inst.instance_id, 0, attempt=1, until=T0 + 100 * S)  # a renewal
    with pytest.raises(StaleAttemptError):
        store.extend_lease(inst.instance_id, 0, attempt=1, until=T0 + 20 * S, was=read.lease_until)
    (shard,) = store.list_shards(inst.instance_id)
    assert shard.lease_until == T0 + 100 * S  # the renewal stands
    store.extend_lease(inst.instance_id, 0, attempt=1, until=T0 + 20 * S, was=T0 + 100 * S)
    (shard,) = store.list_shards(inst.instance_id)
    assert shard.lease_until == T0 + 20 * S


def test_dead_letter_ends_an_unfinished_shard_once(store: Store) -> None:
    inst = claimed(store, shards=3)
    lease(store, inst, 1)
    first = store.dead_letter_shard(
        inst.instance_id, 0, bounds={"b": 0}, max_attempts=MAX, error="dead_lettered", now=T0
    )
    assert first is not None and (first.remaining, first.failed_shards) == (2, 1)
    second = store.dead_letter_shard(
        inst.instance_id, 1, bounds={"b": 1}, max_attempts=MAX, error="dead_lettered", now=T0
    )
    assert second is not None and (second.remaining, second.failed_shards) == (1, 2)
    assert (
        store.dead_letter_shard(
            inst.instance_id, 0, bounds={"b": 0}, max_attempts=MAX, error="dead_lettered", now=T0
        )
        is None
    )
    shards = {s.index: s for s in store.list_shards(inst.instance_id)}
    assert shards[0].status is ShardStatus.FAILED and shards[0].error == "dead_lettered"
    assert shards[0].bounds == {"b": 0} and shards[0].attempts == []
    assert shards[1].status is ShardStatus.FAILED and shards[1].attempt == 1
    assert store.expired_leases(T0 + 9999 * S) == []
    assert (current(store, inst).remaining, current(store, inst).failed_shards) == (1, 2)


# -- tasks --------------------------------------------------------------------------------------


def test_put_get_list_tasks(store: Store) -> None:
    rich = task(
        "b-rich",
        tenant="acme",
        trigger={"cron": "5 0 * * *", "timezone": "Europe/Berlin"},
        sharding={"strategy": "static", "shards": [{"tenant": "acme"}, {"tenant": "globex"}]},
        misfire={"policy": "catch_up", "max_catch_up": 2},
        params={"deep": {"list": [1, "two", 3.5]}},
        reduce="noop",
    )
    records = [
        task_record(rich, next_fire=T0, last_slot=T0 - 86_400 * S, version=3),
        task_record(task("a-plain"), next_fire=None),
    ]
    store.put_tasks(records)
    assert store.get_task("b-rich") == records[0]
    assert store.get_task("a-plain") == records[1]
    assert store.get_task("missing") is None
    assert store.list_tasks() == [records[1], records[0]]

    replaced = task_record(rich.model_copy(update={"description": "v4"}), next_fire=T0, version=4)
    store.put_tasks([replaced])
    assert store.get_task("b-rich") == replaced
    assert len(store.list_tasks()) == 2


def test_children_of_names_the_tasks_triggered_after_a_task(store: Store) -> None:
    after = {"after": ["parent", "other-parent"]}
    store.put_tasks(
        [
            task_record(task("parent"), next_fire=T0),
            task_record(task("other-parent"), next_fire=T0),
            task_record(task("child-b", trigger=after), next_fire=None),
            task_record(task("child-a", trigger={"after": ["parent"]}), next_fire=None),
            task_record(task("unrelated"), next_fire=T0),
        ]
    )
    assert store.children_of("parent") == ["child-a", "child-b"]
    assert store.children_of("other-parent") == ["child-b"]
    assert store.children_of("child-a") == []
    assert store.children_of("nobody") == []


def test_put_tasks_writes_more_than_one_batch(store: Store) -> None:
    records = [task_record(task(f"t{i:03d}"), next_fire=T0) for i in range(130)]
    store.put_tasks(records)
    assert [t.task_id for t in store.list_tasks()] == [f"t{i:03d}" for i in range(130)]


def test_due_tasks(store: Store) -> None:
    store.put_tasks(
        [
            task_record(task("late"), next_fire=T0 - 3600 * S),
            task_record(task("now"), next_fire=T0),
            task_record(task("soon"), next_fire=T0 + 60 * S),
            task_record(task("never"), next_fire=None),
            task_record(task("paused", enabled=False), next_fire=T0 - 60 * S),
        ]
    )
    assert [t.task_id for t in store.due_tasks(T0)] == ["late", "now"]
    assert [t.task_id for t in store.due_tasks(T0 + 59 * S)] == ["late", "now"]
    assert [t.task_id for t in store.due_tasks(T0 + 60 * S)] == ["late", "now", "soon"]
    assert store.due_tasks(T0 - 7200 * S) == []
    (late, *_) = store.due_tasks(T0)
    assert late == store.get_task("late")


def test_due_tasks_return_the_whole_record(store: Store) -> None:
    """The due query reads only the attributes a record is built from (DynamoDB: a projection):
    every one of them must come back, the blocking hold and the clock included."""
    serial = {"blocking": {"policy": "serial", "max_queued": 2}}
    store.put_tasks(
        [task_record(task("held", **serial), next_fire=T0, last_slot=T0 - 3600 * S, version=3)]
    )
    holder = instance("held", T0 - 3600 * S, **serial)
    waiting = instance("held", T0 - 1800 * S, **serial)
    assert store.claim_exclusive(holder).outcome is ClaimOutcome.CLAIMED
    assert store.enqueue_instance(waiting, max_queued=2).outcome is ClaimOutcome.CLAIMED
    assert store.set_paused("held", paused=True)
    assert store.due_tasks(T0) == []
    assert store.set_paused("held", paused=False, restart=(T0, T0 - 3600 * S))

    (due,) = store.due_tasks(T0)
    assert due == store.get_task("held")
    assert (due.active, due.queue) == (holder.instance_id, [waiting.instance_id])
    assert (due.version, due.next_fire, due.last_slot) == (3, T0, T0 - 3600 * S)
    assert due.definition.blocking.max_queued == 2


def test_advance_task_is_conditional_on_the_expected_next_fire(store: Store) -> None:
    store.put_tasks([task_record(task("a"), next_fire=T0)])
    assert (
        store.advance_task(
            "a", expected_next_fire=T0 - 60 * S, next_fire=T0 + 3600 * S, last_slot=T0
        )
        is False
    )
    assert store.get_task("a") == task_record(task("a"), next_fire=T0)

    assert store.advance_task("a", expected_next_fire=T0, next_fire=T0 + 3600 * S, last_slot=T0)
    advanced = store.get_task("a")
    assert advanced is not None
    assert (advanced.next_fire, advanced.last_slot, advanced.version) == (T0 + 3600 * S, T0, 1)
    assert store.due_tasks(T0 + 3599 * S) == []
    assert [t.task_id for t in store.due_tasks(T0 + 3600 * S)] == ["a"]
    # A second dispatcher with the old view loses.
    assert (
        store.advance_task("a", expected_next_fire=T0, next_fire=T0 + 7200 * S, last_slot=T0)
        is False
    )
    assert store.advance_task("ghost", expected_next_fire=T0, next_fire=T0, last_slot=T0) is False


def test_a_task_advanced_to_no_next_fire_is_never_due(store: Store) -> None:
    store.put_tasks([task_record(task("once"), next_fire=T0)])
    assert store.advance_task("once", expected_next_fire=T0, next_fire=None, last_slot=T0)
    record = store.get_task("once")
    assert record is not None
    assert (record.next_fire, record.last_slot) == (None, T0)
    assert store.due_tasks(T0 + 86_400 * 365 * S) == []


def test_a_task_advanced_from_no_next_fire_becomes_due(store: Store) -> None:
    store.put_tasks([task_record(task("revived"), next_fire=None)])
    assert store.advance_task("revived", expected_next_fire=None, next_fire=T0, last_slot=None)
    record = store.get_task("revived")
    assert record is not None
    assert record.next_fire == T0
    assert [t.task_id for t in store.due_tasks(T0)] == ["revived"]


def test_a_paused_task_stays_not_due_when_advanced(store: Store) -> None:
    """A dispatcher that read the task before it was paused still advances it: not due."""
    store.put_tasks([task_record(task("p", enabled=False), next_fire=T0)])
    assert store.due_tasks(T0) == []
    assert store.advance_task("p", expected_next_fire=T0, next_fire=T0 + 60 * S, last_slot=T0)
    assert store.due_tasks(T0 + 3600 * S) == []


# -- a worker batch's completions together ------------------------------------------------------


def completion(
    inst: InstanceRecord, shard: ShardRecord, status: ShardStatus, **fields: Any
) -> ShardCompletion:
    return ShardCompletion(
        instance_id=inst.instance_id,
        index=shard.index,
        status=status,
        attempt=ended(shard, at=T0 + 5 * S, outcome=status.value),
        **fields,
    )


def test_complete_shards_writes_every_shard_and_counts_each_instance_once(store: Store) -> None:
    a = claimed(store, task_id="a", shards=3)
    b = claimed(store, task_id="b", shards=2)
    batch = [
        completion(a, lease(store, a, 0).shard, ShardStatus.SUCCEEDED, result={"n": 0}),
        completion(b, lease(store, b, 1).shard, ShardStatus.FAILED, error="boom"),
        completion(a, lease(store, a, 2).shard, ShardStatus.TIMED_OUT, error="late"),
        completion(b, lease(store, b, 0).shard, ShardStatus.SUCCEEDED),
    ]

    assert store.complete_shards(batch) == [CompletionVerdict.COMMITTED] * 4

    assert (current(store, a).remaining, current(store, a).failed_shards) == (1, 1)
    assert (current(store, b).remaining, current(store, b).failed_shards) == (0, 1)
    first = shard_of(store, a, 0)
    assert (first.status, first.result, first.lease_until) == (
        ShardStatus.SUCCEEDED,
        {"n": 0},
        None,
    )
    assert first.attempts[-1].outcome == "succeeded"
    assert (shard_of(store, b, 1).status, shard_of(store, b, 1).error) == (
        ShardStatus.FAILED,
        "boom",
    )
    assert shard_of(store, a, 2).status is ShardStatus.TIMED_OUT
    assert [s.index for s in store.list_shards(a.instance_id)] == [0, 2]
    # Written once: the same completions again are stale and change nothing.
    assert store.complete_shards(batch) == [CompletionVerdict.STALE] * 4
    assert current(store, a).remaining == 1
    assert current(store, b).remaining == 0


def test_a_zombie_in_a_batch_is_stale_and_the_others_commit(store: Store) -> None:
    inst, zombie, successor = zombie_and_successor(store)
    other = claimed(store, task_id="o", shards=2)
    batch = [
        completion(other, lease(store, other, 0).shard, ShardStatus.SUCCEEDED),
        completion(inst, zombie, ShardStatus.SUCCEEDED),
        completion(inst, lease(store, inst, 1, at=T0 + 61 * S).shard, ShardStatus.FAILED),
        completion(other, lease(store, other, 1).shard, ShardStatus.SUCCEEDED),
    ]

    assert store.complete_shards(batch) == [
        CompletionVerdict.COMMITTED,
        CompletionVerdict.STALE,
        CompletionVerdict.COMMITTED,
        CompletionVerdict.COMMITTED,
    ]

    assert shard_of(store, inst, 0) == successor  # the zombie changed nothing
    assert shard_of(store, inst, 1).status is ShardStatus.FAILED
    # The zombie's instance counts its one other shard only.
    assert (current(store, inst).remaining, current(store, inst).failed_shards) == (1, 1)
    assert (current(store, other).remaining, current(store, other).failed_shards) == (0, 0)


def test_a_batch_whose_every_attempt_is_stale_changes_nothing(store: Store) -> None:
    inst = claimed(store, shards=2)
    taken = lease(store, inst).shard
    store.release_shard(inst.instance_id, 0, attempt=ended(taken, at=T0 + 2 * S, outcome="failed"))
    never = Attempt(number=1, worker="w", started_at=T0)
    batch = [
        completion(inst, taken, ShardStatus.SUCCEEDED),  # released: holds nothing any more
        ShardCompletion(inst.instance_id, 1, ShardStatus.SUCCEEDED, never),  # never leased
    ]
    assert store.complete_shards(batch) == [CompletionVerdict.STALE] * 2
    assert current(store, inst).remaining == 2
    assert store.complete_shards([]) == []


def test_a_shard_twice_in_one_batch_is_refused(store: Store) -> None:
    inst = claimed(store, shards=1)
    done = completion(inst, lease(store, inst).shard, ShardStatus.SUCCEEDED)
    with pytest.raises(ValueError, match="twice"):
        store.complete_shards([done, done])
    assert current(store, inst).remaining == 1
    assert shard_of(store, inst).status is ShardStatus.RUNNING


def test_concurrent_batches_count_every_shard_once(store: Store) -> None:
    """Four workers complete their batches of one instance's shards at the same time."""
    inst = claimed(store, shards=12)
    batches = [
        [
            completion(inst, lease(store, inst, i, worker=f"w{w}").shard, ShardStatus.SUCCEEDED)
            for i in range(w * 3, w * 3 + 3)
        ]
        for w in range(4)
    ]
    verdicts = run_together(4, lambda w: store.complete_shards(batches[w]))
    assert verdicts == [[CompletionVerdict.COMMITTED] * 3] * 4
    assert (current(store, inst).remaining, current(store, inst).failed_shards) == (0, 0)
    assert {s.status for s in store.list_shards(inst.instance_id)} == {ShardStatus.SUCCEEDED}


def test_instances_for_a_business_date_are_found_by_key_at_any_age(store: Store) -> None:
    day = timedelta(days=1)
    old = instance("a", T0 - 300 * day)
    rerun = old.model_copy(
        update={"instance_id": f"{old.instance_id}~run2", "run": 2, "created_at": T0}
    )
    newer = [instance("a", T0 - 300 * day + k * day) for k in range(1, 202)]
    other_task = instance("b", T0 - 300 * day)
    groups = [[old, rerun, other_task], newer[:100], newer[100:200], newer[200:]]
    assert store.claim_instances(groups) == [True] * 4
    assert len(store.list_instances(task_id="a", limit=200)) == 200  # the old one is not there
    found = store.instances_for_date("a", old.business_date)
    assert found == [old, rerun]  # oldest first, the whole records
    assert store.instances_for_date("a", old.business_date - day) == []
    assert [i.instance_id for i in store.instances_for_date("a", newer[-1].business_date)] == [
        newer[-1].instance_id
    ]


# -- what the counter counts as failed -----------------------------------------------------------


def test_a_cancelled_shard_is_not_counted_as_failed(store: Store) -> None:
    """A shard cancelled while it ran (its instance ended) is not a failure of the shard: the
    counter's `failed_shards` counts failed and timed-out ends only."""
    inst = claimed(store, shards=3)
    for index, status in enumerate(
        (ShardStatus.FAILED, ShardStatus.TIMED_OUT, ShardStatus.CANCELLED)
    ):
        taken = lease(store, inst, index)
        result = store.complete_shard(
            inst.instance_id,
            index,
            status=status,
            attempt=ended(taken.shard, at=T0 + 5 * S, outcome=status.value),
        )
        assert result.failed_shards == min(index + 1, 2)
    counted = current(store, inst)
    assert (counted.remaining, counted.failed_shards, counted.unrun_shards) == (0, 2, 0)


def test_a_shard_dead_lettered_before_any_handler_ran_is_counted_unrun(store: Store) -> None:
    """Dead-lettered with no record, or pending with every take given back: failed (the work
    was not done) and unrun; with an attempt that ran (running, or released for a retry):
    failed only."""
    inst = claimed(store, shards=4)
    store.give_back_lease(lease(store, inst, 1).shard)
    ran = lease(store, inst, 2)
    store.release_shard(
        inst.instance_id, 2, attempt=ended(ran.shard, at=T0 + S, outcome="failed", error="x")
    )
    lease(store, inst, 3)  # running when its message is dead-lettered
    unrun = []
    for index in range(4):
        result = store.dead_letter_shard(
            inst.instance_id,
            index,
            bounds={"n": index},
            max_attempts=MAX,
            error="dead_lettered",
            now=T0 + 10 * S,
        )
        assert result is not None
        unrun.append(result.unrun_shards)
    assert unrun == [1, 2, 2, 2]
    counted = current(store, inst)
    assert (counted.remaining, counted.failed_shards, counted.unrun_shards) == (0, 4, 2)
