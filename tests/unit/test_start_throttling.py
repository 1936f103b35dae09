"""Throttling at any step of a shard's start (past the store's retries) is a wait, not a failure:
the delivery is acknowledged with a delayed copy of its message (never counted toward the DLQ),
the shard is neither failed nor counted, its tenant's slot is given back, and the copy starts
the shard once the store answers again."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest

from iotsched import bootstrap
from iotsched.clock import ManualClock
from iotsched.core.quotas import TenantQuotas
from iotsched.core.shard_record import ShardStatus
from iotsched.ports.store_errors import StoreContendedError
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.execution.batch import ShardBatch
from iotsched.services.execution.outcomes import Delivery, PendingShard, ShardOutcome
from iotsched.services.scheduling.send import shard_messages
from iotsched.services.scheduling.tick import dispatch_tick
from tests.support import T0, Timers, task

S = timedelta(seconds=1)
ID = "fleet@2026-11-29T12:00Z"


class ThrottledOnce:
    """The instance store, whose first call of `method` (the `nth` of them) is throttled."""

    def __init__(self, store: Any, method: str, nth: int = 1) -> None:
        self._store = store
        self._method = method
        self._left = nth
        self.throttled = False

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if name != self._method or self.throttled:
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            self._left -= 1
            if self._left == 0:
                self.throttled = True
                raise StoreContendedError(f"{name}: throttled past the SDK's retries")
            return attr(*args, **kwargs)

        return call


#: Each start step's store call: the instance read, the slot, the rollout's seat, the lease,
#: the fence read after it.
STEPS = [
    ("get_instance", 1),
    ("take_tenant_slot", 1),
    ("take_seat", 1),
    ("take_lease", 1),
    ("starts_closed", 1),
]


@pytest.mark.parametrize(("method", "nth"), STEPS, ids=[f"{m}-{n}" for m, n in STEPS])
def test_a_throttled_start_step_defers_the_shard_and_never_fails_it(method: str, nth: int) -> None:
    clock = ManualClock(T0 + 5 * S)
    services = bootstrap.build_memory(clock=clock)
    apply_tasks(
        [
            task(
                "fleet",
                tenant="acme",
                retry={"max_attempts": 1},
                sharding={"strategy": "static", "shards": [{"n": i} for i in range(2)]},
                rollout={"max_shards_per_minute": 100},
                abort={"failure_percent": 50, "min_executed": 2},
            )
        ],
        services.tasks,
        now=T0 - timedelta(hours=1),
    )
    assert services.tasks.set_task_quotas("fleet", TenantQuotas(max_concurrent_shards=1))
    assert dispatch_tick(T0, services).claimed == [ID]
    instance = services.instances.get_instance(ID)
    assert instance is not None
    first = shard_messages(instance)[0]
    store = services.instances
    throttled = ThrottledOnce(store, method, nth)
    queue = services.queue
    sent = len(queue.sent)  # type: ignore[attr-defined]

    batch = ShardBatch(
        dataclasses.replace(services, instances=throttled), worker="w", timer=Timers()
    )
    outcome = batch.run(Delivery(first.model_dump_json(), "rh-0"))  # no raise: acknowledged
    batch.commit()

    assert throttled.throttled
    assert outcome is ShardOutcome.DEFERRED
    [copy] = queue.sent[sent:]  # type: ignore[attr-defined]
    assert copy.shard == 0
    assert 5 <= queue.delays[-1] <= 10  # type: ignore[attr-defined]
    shard = store.get_shard(ID, 0)
    assert shard is None or shard.status is ShardStatus.PENDING  # not failed, not ended
    after = store.get_instance(ID)
    assert after is not None and (after.remaining, after.failed_shards) == (2, 0)
    now = clock.now()
    assert store.take_tenant_slot("acme", "probe", cap=1, now=now, until=now + 60 * S) is not None
    store.release_tenant_slot("acme", 0, "probe")
    # the copy starts it once the store answers (its one attempt not used up by the wait)
    again = ShardBatch(services, worker="w2", timer=Timers())
    assert isinstance(again.run(Delivery(copy.model_dump_json(), "rh-1")), PendingShard)
