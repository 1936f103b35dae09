"""The tick's batched writes (iotsched.ports): claim_instances, mark_running, advance_tasks.

Each group of `claim_instances` is all or nothing, groups are independent, and exactly one of
any number of callers creates an instance whichever method each uses: on the fake and on
DynamoDB (moto), where the groups travel in TransactWriteItems and a cancelled transaction's
CancellationReasons decide which groups lost and which go again.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import pytest

from iotsched.core.instance_record import InstanceStatus
from iotsched.ports.instances import MAX_CLAIM_GROUP
from iotsched.ports.tasks import TaskAdvance
from tests.contract.conftest import Store
from tests.support import T0, instance, task, task_record

M = timedelta(minutes=1)


def test_groups_whose_keys_are_free_are_created_and_a_group_with_a_taken_key_writes_nothing(
    store: Store,
) -> None:
    taken = instance("b", T0 + M)
    assert store.claim_instance(taken) is None
    groups = [
        [instance("a", T0)],
        [instance("b", T0), taken.model_copy(update={"reason": "mine"}), instance("b", T0 + 2 * M)],
        [],
        [instance("c", T0), instance("c", T0 + M)],
    ]

    assert store.claim_instances(groups) == [True, False, True, True]

    for instance_id in ("a@2026-11-29T12:00Z", "c@2026-11-29T12:00Z", "c@2026-11-29T12:01Z"):
        assert store.get_instance(instance_id) is not None
    # Nothing of the losing group: neither its free keys nor a change to the taken one.
    assert store.get_instance("b@2026-11-29T12:00Z") is None
    assert store.get_instance("b@2026-11-29T12:02Z") is None
    assert store.get_instance(taken.instance_id) == taken
    assert store.claim_instances([[instance("a", T0)]]) == [False]  # claimed now


def test_claimed_instances_round_trip_as_a_single_claim_stores_them(store: Store) -> None:
    inst = instance("r", shards=[{"tenant": "acme"}, {"tenant": "globex"}], claimed_at=T0 + M)
    assert store.claim_instances([[inst]]) == [True]
    assert store.get_instance(inst.instance_id) == inst
    assert [i.instance_id for i in store.list_instances(status=InstanceStatus.PLANNING)] == [
        inst.instance_id
    ]
    assert store.claim_instance(inst) == inst  # the one-by-one path sees the batched claim


def test_more_groups_than_one_transaction_holds_are_all_claimed(store: Store) -> None:
    groups = [[instance(f"t{n:03d}", T0)] for n in range(150)]
    groups += [[instance(f"u{n:03d}", T0), instance(f"u{n:03d}", T0 + M)] for n in range(30)]
    assert store.claim_instances(groups) == [True] * 180
    assert len(store.list_instances(status=InstanceStatus.PLANNING, limit=500)) == 210


def test_groups_that_no_transaction_can_carry_are_refused_whole(store: Store) -> None:
    too_big = [instance("big", T0 + n * M) for n in range(MAX_CLAIM_GROUP + 1)]
    twice = [instance("twice", T0), instance("twice", T0)]
    fine = [instance("fine", T0)]
    assert store.claim_instances([too_big, twice, fine]) == [False, False, True]
    assert store.get_instance(too_big[0].instance_id) is None
    assert store.get_instance(twice[0].instance_id) is None


def test_two_groups_naming_one_instance_create_it_once(store: Store) -> None:
    first, second = instance("same", T0), instance("same", T0, claimed_at=T0 + M)
    assert store.claim_instances([[first], [second]]) == [True, False]
    assert store.get_instance(first.instance_id) == first


def test_concurrent_batched_and_single_claims_have_one_winner_per_instance(store: Store) -> None:
    """Six batch claimers and two one-by-one claimers race for the same 40 instances."""
    ids = [f"race{n:02d}" for n in range(40)]
    batchers, singles = 6, 2
    barrier = threading.Barrier(batchers + singles)

    def batch(caller: int) -> list[str]:
        mine = [[instance(i, T0, claimed_at=T0 + caller * M)] for i in ids]
        barrier.wait(timeout=30)
        won = store.claim_instances(mine)
        return [g[0].instance_id for g, ok in zip(mine, won, strict=True) if ok]

    def single(caller: int) -> list[str]:
        mine = [instance(i, T0, claimed_at=T0 + caller * M) for i in reversed(ids)]
        barrier.wait(timeout=30)
        return [i.instance_id for i in mine if store.claim_instance(i) is None]

    with ThreadPoolExecutor(max_workers=batchers + singles) as pool:
        futures = [pool.submit(batch, n) for n in range(batchers)]
        futures += [pool.submit(single, batchers + n) for n in range(singles)]
        results = [f.result() for f in futures]

    winners = [iid for won in results for iid in won]
    assert sorted(winners) == sorted(f"{i}@2026-11-29T12:00Z" for i in ids)
    for caller, won in enumerate(results):  # each stored instance is its winner's
        for instance_id in won:
            stored = store.get_instance(instance_id)
            assert stored is not None
            assert stored.created_at == T0 + caller * M


def test_mark_running_moves_planning_instances_only(store: Store) -> None:
    planning = [instance(f"p{n}", T0) for n in range(3)]
    ended = instance("ended", T0)
    assert store.claim_instances([[i] for i in [*planning, ended]]) == [True] * 4
    assert store.end_instance(
        ended.instance_id, status=InstanceStatus.CANCELLED, reason="test", finished_at=T0
    )

    ids = [planning[0].instance_id, ended.instance_id, "nope@2026-11-29T12:00Z"]
    ids += [i.instance_id for i in planning[1:]]
    assert store.mark_running(ids) == [True, False, False, True, True]

    for inst in planning:
        stored = store.get_instance(inst.instance_id)
        assert stored is not None
        assert stored == inst.model_copy(update={"status": InstanceStatus.RUNNING})
    stored_ended = store.get_instance(ended.instance_id)
    assert stored_ended is not None
    assert stored_ended.status is InstanceStatus.CANCELLED
    # The status index follows: `instances --status running` lists exactly these.
    running = store.list_instances(status=InstanceStatus.RUNNING)
    assert sorted(i.instance_id for i in running) == sorted(i.instance_id for i in planning)
    assert store.list_instances(status=InstanceStatus.PLANNING) == []
    assert store.mark_running([planning[0].instance_id]) == [False]  # already running


def test_many_running_marks_cross_transactions(store: Store) -> None:
    insts = [instance(f"m{n:03d}", T0) for n in range(120)]
    assert all(store.claim_instances([[i] for i in insts]))
    assert store.mark_running([i.instance_id for i in insts]) == [True] * 120
    assert len(store.list_instances(status=InstanceStatus.RUNNING, limit=500)) == 120


def put_due(store: Store, task_ids: list[str]) -> None:
    store.put_tasks([task_record(task(t, trigger={"rate": "1m"}), next_fire=T0) for t in task_ids])


def test_advance_tasks_decides_each_advance_alone(store: Store) -> None:
    put_due(store, ["a", "b", "c"])
    assert store.advance_task("b", expected_next_fire=T0, next_fire=T0 + M, last_slot=T0)

    advances = [
        TaskAdvance("a", expected_next_fire=T0, next_fire=T0 + M, last_slot=T0),
        TaskAdvance("b", expected_next_fire=T0, next_fire=T0 + 5 * M, last_slot=T0),  # stale
        TaskAdvance("nope", expected_next_fire=T0, next_fire=T0 + M, last_slot=T0),
        TaskAdvance("c", expected_next_fire=T0, next_fire=None, last_slot=T0),
    ]
    assert store.advance_tasks(advances) == [True, False, False, True]

    clocks = {t.task_id: (t.next_fire, t.last_slot) for t in store.list_tasks()}
    assert clocks == {"a": (T0 + M, T0), "b": (T0 + M, T0), "c": (None, T0)}
    assert [t.task_id for t in store.due_tasks(T0 + M)] == ["a", "b"]  # c left the due index
    assert store.advance_tasks([]) == []


def test_many_advances_cross_transactions(store: Store) -> None:
    ids = [f"t{n:03d}" for n in range(130)]
    put_due(store, ids)
    advances = [TaskAdvance(t, expected_next_fire=T0, next_fire=T0 + M, last_slot=T0) for t in ids]
    assert store.advance_tasks(advances) == [True] * 130
    assert store.due_tasks(T0) == []
    assert len(store.due_tasks(T0 + M)) == 130


@pytest.mark.parametrize("method", ["claim_instances", "mark_running", "advance_tasks"])
def test_an_empty_batch_is_an_empty_answer(store: Store, method: str) -> None:
    call: Any = getattr(store, method)
    assert call([]) == []
