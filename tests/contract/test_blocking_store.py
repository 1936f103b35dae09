"""The task's hold (blocking policies), on the fake and on DynamoDB."""

from __future__ import annotations

from datetime import timedelta

import pytest

from iotsched.core.instance_record import InstanceStatus
from iotsched.ports.blocking import ClaimOutcome
from tests.contract.conftest import Store
from tests.contract.test_store import run_together
from tests.support import T0, instance, task, task_record

M = timedelta(minutes=1)


@pytest.fixture
def held(store: Store) -> Store:
    store.put_tasks([task_record(task("t", blocking={"policy": "serial"}), next_fire=T0)])
    return store


def test_one_exclusive_claim_holds_the_task_and_blocks_the_next(held: Store) -> None:
    first, second = instance(slot=T0), instance(slot=T0 + M)
    assert held.claim_exclusive(first).outcome is ClaimOutcome.CLAIMED
    blocked = held.claim_exclusive(second)
    assert (blocked.outcome, blocked.holder) == (ClaimOutcome.BLOCKED, first.instance_id)
    assert held.get_instance(second.instance_id) is None  # nothing written
    again = held.claim_exclusive(first)
    assert again.outcome is ClaimOutcome.DUPLICATE and again.existing == first
    task_now = held.get_task("t")
    assert task_now is not None and task_now.active == first.instance_id


def test_the_queue_is_bounded_and_released_in_order(held: Store) -> None:
    first = instance(slot=T0)
    held.claim_exclusive(first)
    waiting = [
        instance(slot=T0 + n * M).model_copy(update={"status": InstanceStatus.QUEUED})
        for n in (1, 2, 3)
    ]
    assert held.enqueue_instance(waiting[0], max_queued=2).outcome is ClaimOutcome.CLAIMED
    assert held.enqueue_instance(waiting[1], max_queued=2).outcome is ClaimOutcome.CLAIMED
    full = held.enqueue_instance(waiting[2], max_queued=2)
    assert (full.outcome, full.holder) == (ClaimOutcome.FULL, first.instance_id)
    assert held.get_instance(waiting[2].instance_id) is None
    stored = held.get_instance(waiting[0].instance_id)
    assert stored is not None and stored.status is InstanceStatus.QUEUED
    # only the holder releases; the hold passes to the oldest queued
    assert held.release_task("t", waiting[1].instance_id) is None
    assert held.release_task("t", first.instance_id) == waiting[0].instance_id
    assert held.release_task("t", waiting[0].instance_id) == waiting[1].instance_id
    assert held.release_task("t", waiting[1].instance_id) is None
    free = held.get_task("t")
    assert free is not None and (free.active, free.queue) == (None, [])
    # with nothing holding the task, a queued claim is told to claim instead
    assert held.enqueue_instance(waiting[2], max_queued=2).outcome is ClaimOutcome.FREE


def test_take_over_replaces_only_the_named_holder(held: Store) -> None:
    first, second, third = instance(slot=T0), instance(slot=T0 + M), instance(slot=T0 + 2 * M)
    held.claim_exclusive(first)
    assert held.take_over(second, holder="someone-else").outcome is ClaimOutcome.BLOCKED
    assert held.take_over(second, holder=first.instance_id).outcome is ClaimOutcome.CLAIMED
    assert held.take_over(third, holder=first.instance_id).outcome is ClaimOutcome.BLOCKED
    task_now = held.get_task("t")
    assert task_now is not None and task_now.active == second.instance_id


def test_re_applying_the_task_keeps_its_hold(held: Store) -> None:
    from iotsched.services.definitions.apply import apply_tasks

    first = instance(slot=T0)
    held.claim_exclusive(first)
    apply_tasks([task("t", blocking={"policy": "serial"}, description="new")], held, now=T0)
    task_now = held.get_task("t")
    assert task_now is not None and task_now.version == 2
    assert task_now.active == first.instance_id


def test_concurrent_exclusive_claims_have_one_holder(held: Store) -> None:
    claims = run_together(8, lambda i: held.claim_exclusive(instance(slot=T0 + i * M)).outcome)
    assert claims.count(ClaimOutcome.CLAIMED) == 1
    assert claims.count(ClaimOutcome.BLOCKED) == 7
