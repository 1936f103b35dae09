"""The dispatcher's steps at the sizes the product uses (in memory): a 20,000-shard instance is
20 steps of 1,000 shards, 2,000 SendMessageBatch requests and 19 cursor writes, every shard
sent once; a small instance writes no cursor at all."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from typing import Any, cast

import pytest

from iotsched import bootstrap
from iotsched.adapters.memory.queues import MemoryShardQueue
from iotsched.adapters.memory.store import MemoryStore
from iotsched.clock import ManualClock
from iotsched.core.instance_record import InstanceStatus
from iotsched.core.messages import message_of, reduce_message, send_order, shard_messages
from iotsched.ports.store_errors import StoreContendedError
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.scheduling import send as send_module
from iotsched.services.scheduling.lifecycle import send_shards
from iotsched.services.scheduling.report import TickReport
from iotsched.services.scheduling.send import STEP_SHARDS
from iotsched.services.scheduling.tick import dispatch_tick
from tests.support import T0, instance, task

S = timedelta(seconds=1)


class CountingStore(MemoryStore):
    """The fake store, counting the cursor's writes."""

    def __init__(self) -> None:
        super().__init__()
        self.advances: list[int] = []

    def advance_dispatch(
        self, instance_id: str, *, sent: int, held: datetime | None, until: datetime
    ) -> bool:
        self.advances.append(sent)
        return super().advance_dispatch(instance_id, sent=sent, held=held, until=until)


def fire(shards: int) -> tuple[Any, CountingStore]:
    services = bootstrap.build_memory(clock=ManualClock(T0 + 3 * S))
    store = CountingStore()
    services = type(services)(
        **{**services.__dict__, "tasks": store, "instances": store, "blocking": store}
    )
    definition = task(
        "big",
        trigger={"rate": "15m"},
        sharding={"strategy": "id_range", "shards": shards, "id_max": shards * 10},
    )
    apply_tasks([definition], services.tasks, now=T0 - timedelta(minutes=7))
    return services, store


def test_a_20000_shard_instance_goes_out_in_steps_every_shard_once() -> None:
    services, store = fire(20_000)
    report = dispatch_tick(T0, services)
    queue = cast("MemoryShardQueue", services.queue)
    assert Counter(m.shard for m in queue.sent) == Counter(range(20_000))
    assert report.send_requests == 2_000 and queue.requests == 2_000
    assert store.advances == list(range(STEP_SHARDS, 20_000, STEP_SHARDS))  # 19 cursor writes
    (done,) = services.instances.list_instances()
    assert done.status is InstanceStatus.RUNNING and done.sent == 19_000


def test_a_small_instance_writes_no_cursor() -> None:
    services, store = fire(STEP_SHARDS)
    dispatch_tick(T0, services)
    assert store.advances == []
    assert len(cast("MemoryShardQueue", services.queue).sent) == STEP_SHARDS


def test_messages_are_built_in_one_place_in_send_order() -> None:
    base = instance("t", shards=5, reduce="total")
    rerun = base.model_copy(update={"only": [3, 1, 9]})  # 9 lies outside the plan
    assert list(send_order(rerun)) == [3, 1]
    assert [m.shard for m in shard_messages(rerun)] == [3, 1]
    assert [m.shard for m in shard_messages(base, 2, 4)] == [2, 3]
    assert message_of(rerun, 1) == shard_messages(rerun)[1]
    assert message_of(rerun, 2) is None  # not re-run
    assert message_of(rerun, 5) == reduce_message(rerun)
    reduce = reduce_message(rerun)
    assert (reduce.handler, reduce.bounds, reduce.reduce) == ("total", {"reduce": "total"}, True)


def test_a_big_instance_in_a_batched_page_is_sent_on_its_own_in_steps() -> None:
    services, store = fire(2_500)
    mates = [task(f"mate-{n:02d}", trigger={"rate": "15m"}) for n in range(12)]
    apply_tasks(mates, services.tasks, now=T0 - timedelta(minutes=7))
    report = dispatch_tick(T0, services)  # 13 due tasks: the batched path
    assert len(report.claimed) == 13
    queue = cast("MemoryShardQueue", services.queue)
    counts = Counter((m.instance_id, m.shard) for m in queue.sent)
    assert set(counts.values()) == {1}
    assert sum(1 for iid, _ in counts if iid.startswith("big@")) == 2_500
    assert store.advances == [1_000, 2_000]
    assert {i.status for i in services.instances.list_instances()} == {InstanceStatus.RUNNING}


def test_a_message_too_large_in_a_later_step_ends_the_instance_failed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(send_module, "STEP_SHARDS", 50)
    services = bootstrap.build_memory(clock=ManualClock(T0 + 3 * S))
    base = instance("wide", shards=150, claimed_at=T0)
    explicit = [base.plan.bounds(n) for n in range(150)]
    explicit[120] = {"blob": "x" * (1024 * 1024 + 1)}  # past what SQS takes in a message
    wide = base.model_copy(update={"plan": base.plan.model_copy(update={"explicit": explicit})})
    assert services.instances.claim_instance(wide) is None
    report = TickReport(now=T0)
    send_shards(wide, services, report)
    assert report.failed == [wide.instance_id] and report.messages_sent == 100
    ended = services.instances.get_instance(wide.instance_id)
    assert ended is not None and ended.status is InstanceStatus.FAILED
    assert ended.reason is not None and ended.reason.startswith("enqueue_failed: ")
    (alert,) = [a for a in services.alert_log.recent() if a.task_id == "wide"]
    assert alert.type == "instance_failed"


def test_a_contended_cursor_write_does_not_stop_the_send() -> None:
    services, store = fire(5_000)
    real = store.advance_dispatch
    contended = [2_000, 3_000]  # those two steps' writes meet other writers' transactions

    def advance(instance_id: str, *, sent: int, held: datetime | None, until: datetime) -> bool:
        if sent in contended:
            store.advances.append(sent)
            raise StoreContendedError("in conflict with a transaction after 8 tries")
        return real(instance_id, sent=sent, held=held, until=until)

    store.advance_dispatch = advance  # type: ignore[method-assign]
    dispatch_tick(T0, services)
    queue = cast("MemoryShardQueue", services.queue)
    assert Counter(m.shard for m in queue.sent) == Counter(range(5_000))
    assert store.advances == [1_000, 2_000, 3_000, 4_000]
    (done,) = services.instances.list_instances()
    assert done.status is InstanceStatus.RUNNING and done.sent == 4_000
