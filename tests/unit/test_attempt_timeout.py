"""The per-attempt timeout (`timeout_s`): the handler is interrupted, the attempt retried."""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import pytest

from iotsched import bootstrap
from iotsched.clock import ManualClock
from iotsched.context import ShardContext
from iotsched.core.shard_record import ShardStatus
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.execution.batch import run_shard
from iotsched.services.execution.outcomes import (
    Delivery,
    RetryShardError,
    ShardOutcome,
)
from iotsched.services.scheduling.tick import dispatch_tick
from iotsched.tasklib import registry
from tests.support import T0, task


def slow(ctx: ShardContext) -> Mapping[str, Any] | None:
    time.sleep(5)  # interrupted after timeout_s
    return None


def test_an_attempt_past_its_timeout_is_interrupted_then_retried_then_timed_out() -> None:
    clock = ManualClock(T0)
    services = bootstrap.build_memory(clock=clock, handlers={**registry(), "slow": slow})
    definition = task("t", handler="slow", timeout_s=1, retry={"max_attempts": 2, "backoff_s": 0})
    apply_tasks([definition], services.tasks, now=T0 - timedelta(minutes=5))
    report = dispatch_tick(T0 + timedelta(minutes=1), services)
    (instance_id,) = report.claimed
    (message,) = services.queue.sent  # type: ignore[attr-defined]
    delivery = Delivery(body=message.model_dump_json(), receipt_handle="rh")

    started = time.monotonic()
    with pytest.raises(RetryShardError, match="timeout_s=1"):
        run_shard(delivery, services, worker="w1")
    assert time.monotonic() - started < 3  # interrupted, not slept out

    assert run_shard(delivery, services, worker="w2") is ShardOutcome.TIMED_OUT
    (shard,) = services.instances.list_shards(instance_id)
    assert shard.status is ShardStatus.TIMED_OUT
    assert [a.outcome for a in shard.attempts] == ["timed_out", "timed_out"]
    assert all("timeout_s=1" in (a.error or "") for a in shard.attempts)
    instance = services.instances.get_instance(instance_id)
    assert instance is not None and instance.status.value == "failed"
