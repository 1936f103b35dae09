"""Deleting a task, on the fake and on DynamoDB: refused while instances are open (unless
forced, which cancels them first), always refused while other tasks depend on it; the history
stays."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from iotsched import bootstrap
from iotsched.clock import ManualClock
from iotsched.core.instance_record import InstanceStatus
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.definitions.control import (
    TaskInUseError,
    TaskNotFoundError,
    delete_task,
)
from iotsched.services.operations.actions import cancel_instance
from iotsched.services.operations.on_demand import submit
from iotsched.services.scheduling.tick import dispatch_tick
from iotsched.services.wiring import Wiring
from tests.contract.conftest import Store
from tests.support import T0, task

M = timedelta(minutes=1)


def services_on(store: Store, clock: ManualClock) -> Wiring:
    return replace(
        bootstrap.build_memory(clock=clock), tasks=store, instances=store, blocking=store
    )


def fire(services: Wiring, clock: ManualClock, minutes: int) -> None:
    """Tick each minute from T0 (nothing runs a shard in between: instances stay open)."""
    for n in range(minutes):
        clock.set(T0 + n * M + timedelta(seconds=5))
        dispatch_tick(T0 + n * M, services)


def statuses(services: Wiring, task_id: str) -> dict[str, InstanceStatus]:
    return {
        i.instance_id: i.status
        for i in services.instances.list_instances(task_id=task_id, limit=100)
    }


def test_a_task_without_open_instances_is_deleted_and_its_history_stays(store: Store) -> None:
    clock = ManualClock(T0)
    services = services_on(store, clock)
    apply_tasks([task("t", trigger={"rate": "1m"})], store, now=T0 - M)
    fire(services, clock, 1)
    cancel_instance("t@2026-11-29T12:00Z", services)  # ended: history, not open

    deleted = delete_task("t", services)

    assert (deleted.task_id, deleted.version, deleted.cancelled) == ("t", 1, [])
    assert store.get_task("t") is None
    assert [t.task_id for t in store.list_tasks()] == []
    assert statuses(services, "t") == {"t@2026-11-29T12:00Z": InstanceStatus.CANCELLED}
    with pytest.raises(TaskNotFoundError):
        delete_task("t", services)


def test_open_instances_refuse_the_delete_and_force_cancels_them_first(store: Store) -> None:
    clock = ManualClock(T0)
    services = services_on(store, clock)
    serial = task("t", trigger={"rate": "1m"}, blocking={"policy": "serial", "max_queued": 1})
    apply_tasks([serial], store, now=T0 - M)
    fire(services, clock, 2)  # 12:00 runs (holds the task), 12:01 waits queued behind it
    assert statuses(services, "t") == {
        "t@2026-11-29T12:01Z": InstanceStatus.QUEUED,
        "t@2026-11-29T12:00Z": InstanceStatus.RUNNING,
    }
    # the hold alone stops the store from dropping the definition (and the queue with it)
    assert not store.delete_task("t")

    with pytest.raises(TaskInUseError, match=r"2 open instance\(s\).*12:01Z.*12:00Z.*force"):
        delete_task("t", services)
    assert store.get_task("t") is not None  # nothing changed
    assert set(statuses(services, "t").values()) == {
        InstanceStatus.QUEUED,
        InstanceStatus.RUNNING,
    }

    deleted = delete_task("t", services, force=True)

    # queued first, so that the running one's end does not start it
    assert deleted.cancelled == ["t@2026-11-29T12:01Z", "t@2026-11-29T12:00Z"]
    assert store.get_task("t") is None
    assert set(statuses(services, "t").values()) == {InstanceStatus.CANCELLED}


def test_a_parent_of_other_tasks_is_never_deleted(store: Store) -> None:
    services = services_on(store, ManualClock(T0))
    apply_tasks([task("parent"), task("child", trigger={"after": ["parent"]})], store, now=T0 - M)
    with pytest.raises(TaskInUseError, match="parent of child"):
        delete_task("parent", services, force=True)
    assert store.get_task("parent") is not None
    # the child goes first; then the parent may go (the stale edge does not count)
    delete_task("child", services)
    assert delete_task("parent", services).task_id == "parent"
    assert store.list_tasks() == []


def test_a_submission_not_yet_due_is_cancelled_and_never_fires(store: Store) -> None:
    clock = ManualClock(T0)
    services = services_on(store, clock)
    apply_tasks([task("t", trigger={"cron": "0 3 * * *"})], store, now=T0 - M)
    submitted = submit("t", services, at=T0 + 10 * M)
    assert submitted.status is InstanceStatus.SCHEDULED

    cancelled = cancel_instance(submitted.instance_id, services)

    assert (cancelled.status, cancelled.reason) == (
        InstanceStatus.CANCELLED,
        "cancelled by operator",
    )
    assert store.due_submissions(T0 + 20 * M) == []  # out of the due index with its end
    fire(services, clock, 12)  # past its fire time: nothing fires it
    assert statuses(services, "t") == {submitted.instance_id: InstanceStatus.CANCELLED}


def test_a_deleted_task_takes_its_alert_state_with_it(store: Store) -> None:
    """A task created again under the same id must not announce the recovery of a failure of
    the one deleted."""
    clock = ManualClock(T0)
    services = services_on(store, clock)
    kept = timedelta(days=30)
    apply_tasks([task("t"), task("u")], store, now=T0 - M)
    for task_id in ("t", "u"):
        store.mark_failing(task_id, f"{task_id}@1", at=T0, expires_at=T0 + kept)

    delete_task("t", services)  # with its audit record: a transaction
    assert store.delete_task("u")  # the store's own delete, no record

    apply_tasks([task("t"), task("u")], store, now=T0)
    for task_id in ("t", "u"):
        assert (
            store.clear_failing(task_id, by=f"{task_id}@ok", at=T0 + M, expires_at=T0 + kept)
            is None
        )
