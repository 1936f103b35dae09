"""A redelivered message of a shard under a live lease waits for the lease instead of dying."""

from __future__ import annotations

from datetime import timedelta
from typing import cast

import pytest

from iotsched import bootstrap
from iotsched.adapters.memory import MemoryShardQueue
from iotsched.clock import ManualClock
from iotsched.services.dispatch import dispatch_tick
from iotsched.services.tasks import apply_tasks
from iotsched.services.work import Delivery, RetryShardError, ShardOutcome, run_shard
from tests.support import T0, task


def test_a_redelivery_under_a_live_lease_comes_back_when_the_lease_ends() -> None:
    clock = ManualClock(T0 + timedelta(seconds=1))
    services = bootstrap.build_memory(clock=clock)
    apply_tasks([task("t", timeout_s=60)], services.tasks, now=T0 - timedelta(hours=1))
    dispatch_tick(T0, services)
    queue = cast("MemoryShardQueue", services.queue)
    (message,) = queue.sent
    # the holder leased the shard and is still running it (lease: 60 s + 30 s margin)
    holder = services.instances.take_lease(
        message.instance_id,
        0,
        bounds=message.bounds,
        worker="holder",
        now=clock.now(),
        lease_until=clock.now() + timedelta(seconds=90),
        max_attempts=3,
    )
    assert holder.taken
    clock.advance(timedelta(seconds=40))
    body = message.model_dump_json()
    # a first delivery of another copy (a dispatcher's resend) is simply acknowledged
    assert run_shard(Delivery(body, "copy", receive_count=1), services, worker="w2") is (
        ShardOutcome.DUPLICATE
    )
    # the holder's own message, shown again: hidden until the lease ends, not deleted
    with pytest.raises(RetryShardError, match="live lease"):
        run_shard(Delivery(body, "again", receive_count=2), services, worker="w2")
    assert queue.visibility["again"] == 51
    (shard,) = services.instances.list_shards(message.instance_id)
    assert (shard.attempt, shard.owner) == (1, "holder")
