"""The sweeper re-sends a lost shard's own message, the reduce's included, after a rerun of some
shards; one item that fails never aborts the rest of the sweep."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any, cast

import pytest

from iotsched import bootstrap
from iotsched.adapters.memory.queues import MemoryShardQueue
from iotsched.clock import ManualClock
from iotsched.context import ShardContext
from iotsched.core.instance_record import InstanceRecord
from iotsched.core.shard_message import ShardMessage
from iotsched.ports.shards import StaleAttemptError
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.execution.batch import run_shard
from iotsched.services.execution.outcomes import (
    Delivery,
    RetryShardError,
)
from iotsched.services.execution.sweep import sweep
from iotsched.services.operations.actions import rerun_instance
from iotsched.services.scheduling.send import reduce_message
from iotsched.services.scheduling.tick import dispatch_tick
from iotsched.services.wiring import Wiring
from iotsched.tasklib import registry
from tests.support import T0, task

S = timedelta(seconds=1)
REQUEUE_AFTER_S = 60


class Died(BaseException):
    """The worker process died here: its lease stays until it expires."""


class Fleet:
    """Shard handlers whose shards fail or whose workers die, as the test says."""

    def __init__(self) -> None:
        self.fail: set[int] = set()
        self.die: set[int] = set()  # the reduce is shard 4

    def work(self, ctx: ShardContext) -> Mapping[str, Any]:
        if ctx.shard in self.die:
            ctx.heartbeat()  # a renewal (the lease in the index), then the process dies
            raise Died
        if ctx.shard in self.fail:
            raise RuntimeError("boom")
        return {"n": 1}

    def total(self, ctx: ShardContext) -> Mapping[str, Any]:
        if ctx.shard in self.die:
            ctx.heartbeat()  # a renewal (the lease in the index), then the process dies
            raise Died
        return {"n": len(ctx.partials())}


def deliver_all(services: Wiring) -> None:
    """Deliver every sent message; a retried attempt is delivered again, a death is left."""
    queue = cast("MemoryShardQueue", services.queue)
    while queue.sent:
        message = queue.sent.pop(0)
        for _ in range(3):
            try:
                run_shard(
                    Delivery(body=message.model_dump_json(), receipt_handle="rh"),
                    services,
                    worker="w",
                )
            except RetryShardError:
                continue
            except Died:
                pass
            break


def rerun_of_1_and_3(fleet: Fleet) -> tuple[Wiring, ManualClock, InstanceRecord]:
    """Run 1 of a 4-shard task with a reduce fails shards 1 and 3; run 2 re-runs those two."""
    clock = ManualClock(T0 + 5 * S)
    services = bootstrap.build_memory(
        clock=clock, handlers={**registry(), "work": fleet.work, "total": fleet.total}
    )
    definition = task(
        "scan",
        handler="work",
        reduce="total",
        trigger={"cron": "0 12 * * *"},
        sharding={"strategy": "id_range", "shards": 4, "id_max": 4000},
        retry={"max_attempts": 2, "backoff_s": 1},
    )
    apply_tasks([definition], services.tasks, now=T0 - timedelta(hours=1))
    fleet.fail = {1, 3}
    (first,) = dispatch_tick(T0, services).claimed
    deliver_all(services)
    fleet.fail = set()
    second = rerun_instance(first, services, failed_only=True)
    assert second.only == [1, 3]
    return services, clock, second


def sweep_after_the_leases(services: Wiring, clock: ManualClock, instance_id: str) -> Any:
    leases = [s.lease_until for s in services.instances.list_shards(instance_id) if s.lease_until]
    clock.set(max(leases) + REQUEUE_AFTER_S * S)
    return sweep(services, requeue_after_s=REQUEUE_AFTER_S)


def sent(services: Wiring) -> list[ShardMessage]:
    queue = cast("MemoryShardQueue", services.queue)
    return sorted(queue.sent, key=lambda m: m.shard)


def test_lost_shards_of_a_rerun_get_their_own_messages() -> None:
    fleet = Fleet()
    services, clock, second = rerun_of_1_and_3(fleet)
    fleet.die = {1, 3}
    deliver_all(services)  # both workers die mid-shard
    report = sweep_after_the_leases(services, clock, second.instance_id)
    iid = second.instance_id
    assert report.requeued_shards == [f"{iid}#1", f"{iid}#3"]
    assert [(m.shard, m.bounds) for m in sent(services)] == [
        (1, second.plan.bounds(1)),
        (3, second.plan.bounds(3)),
    ]
    fleet.die = set()
    deliver_all(services)
    done = services.instances.get_instance(iid)
    assert done is not None and done.status.value == "succeeded"


def test_a_lost_reduce_gets_the_reduce_message() -> None:
    fleet = Fleet()
    services, clock, second = rerun_of_1_and_3(fleet)
    fleet.die = {4}
    deliver_all(services)  # shards 1 and 3 succeed; the reduce's worker dies
    report = sweep_after_the_leases(services, clock, second.instance_id)
    assert report.requeued_shards == [f"{second.instance_id}#4"]
    current = services.instances.get_instance(second.instance_id)
    assert current is not None
    assert sent(services) == [reduce_message(current)]


def test_one_failing_item_does_not_abort_the_sweep(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    fleet = Fleet()
    services, clock, second = rerun_of_1_and_3(fleet)
    fleet.die = {1, 3}
    deliver_all(services)
    queue = cast("MemoryShardQueue", services.queue)
    real_send = queue.send
    calls: list[int] = []

    def send_fails_once(messages: list[ShardMessage]) -> int:
        calls.append(len(messages))
        if len(calls) == 1:
            raise RuntimeError("SQS is down for this one")
        return real_send(messages)

    monkeypatch.setattr(queue, "send", send_fails_once)
    report = sweep_after_the_leases(services, clock, second.instance_id)
    assert report.requeued_shards == [f"{second.instance_id}#3"]
    assert [m.shard for m in sent(services)] == [3]
    assert "sweep of an expired lease failed" in caplog.text


def never_listed(instance_id: str) -> list[Any]:
    raise AssertionError(f"the sweep listed every shard of {instance_id}")


def test_a_move_whose_answer_was_lost_still_sends_reading_only_that_shard(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The move of the lease's end landed, its answer was lost, and its retry was refused (the
    # end is no longer the one read): the message is still owed. Finding that out reads the one
    # shard's record, not the instance's (100,000 records for a large one).
    fleet = Fleet()
    services, clock, second = rerun_of_1_and_3(fleet)
    fleet.die = {1}
    deliver_all(services)  # shard 1's worker dies; shard 3 succeeds
    leases = [s.lease_until for s in services.instances.list_shards(second.instance_id)]
    clock.set(max(t for t in leases if t) + REQUEUE_AFTER_S * S)
    store = services.instances
    real_extend = store.extend_lease

    def landed_then_refused(*args: Any, **kwargs: Any) -> None:
        real_extend(*args, **kwargs)
        raise StaleAttemptError("its retry: the end is no longer the one read")

    monkeypatch.setattr(store, "extend_lease", landed_then_refused)
    monkeypatch.setattr(store, "list_shards", never_listed)
    report = sweep(services, requeue_after_s=REQUEUE_AFTER_S)
    assert report.requeued_shards == [f"{second.instance_id}#1"]
    assert [m.shard for m in sent(services)] == [1]


def test_a_reduce_never_sent_is_sent_by_the_sweep_reading_only_its_record(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fleet = Fleet()
    services, clock, second = rerun_of_1_and_3(fleet)
    queue = cast("MemoryShardQueue", services.queue)
    while queue.sent:  # shards 1 and 3 run; the reduce's message is lost on its way
        message = queue.sent.pop(0)
        if not message.reduce:
            run_shard(
                Delivery(body=message.model_dump_json(), receipt_handle="rh"),
                services,
                worker="w",
            )
    reducing = services.instances.get_instance(second.instance_id)
    assert reducing is not None and reducing.status.value == "reducing"
    assert reducing.dispatch_lease_until is not None
    clock.set(reducing.dispatch_lease_until + S)
    monkeypatch.setattr(services.instances, "list_shards", never_listed)
    report = sweep(services)
    assert report.resumed == [second.instance_id]
    assert sent(services) == [reduce_message(reducing)]
