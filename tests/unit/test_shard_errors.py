"""What a handler raises to say what becomes of its shard: `RetryShard` (another attempt, after
its `delay_s` if given, counted against `max_attempts`) and `FailShard` (the shard fails now);
and params that do not fit the handler's model, a permanent failure naming the field."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import timedelta
from typing import Any, cast

import pytest
from pydantic import BaseModel

from iotsched import FailShard, RetryShard, ShardContext, bootstrap, handler
from iotsched.adapters.memory.queues import MemoryShardQueue
from iotsched.clock import ManualClock
from iotsched.core.instance_record import InstanceStatus
from iotsched.core.shard_message import ShardMessage
from iotsched.core.shard_record import ShardStatus
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.execution.batch import run_shard
from iotsched.services.execution.outcomes import (
    Delivery,
    RetryShardError,
    ShardOutcome,
)
from iotsched.services.scheduling.send import shard_messages
from iotsched.services.scheduling.tick import dispatch_tick
from iotsched.services.wiring import Wiring
from tests.support import T0, task


def wired(fn: Callable[..., Any], **fields: Any) -> tuple[Wiring, str, ShardMessage]:
    services = bootstrap.build_memory(
        clock=ManualClock(T0 + timedelta(seconds=5)), handlers={"h": fn}
    )
    apply_tasks([task("job", handler="h", **fields)], services.tasks, now=T0 - timedelta(hours=1))
    (iid,) = dispatch_tick(T0, services).claimed
    instance = services.instances.get_instance(iid)
    assert instance is not None
    (message,) = shard_messages(instance)
    return services, iid, message


def deliver(services: Wiring, message: ShardMessage, receipt: str) -> ShardOutcome | None:
    """The outcome, or None where the attempt failed with attempts left (released to retry)."""
    try:
        return run_shard(
            Delivery(body=message.model_dump_json(), receipt_handle=receipt), services, worker="w"
        )
    except RetryShardError:
        return None


def visibility(services: Wiring) -> dict[str, int]:
    return cast("MemoryShardQueue", services.queue).visibility


def test_retry_shard_retries_after_its_delay() -> None:
    def busy(ctx: ShardContext) -> dict[str, int]:
        if ctx.attempt == 1:
            raise RetryShard("device service busy", delay_s=60)
        return {"attempt": ctx.attempt}

    services, iid, message = wired(busy, retry={"max_attempts": 3, "backoff_s": 5})
    assert deliver(services, message, "rh1") is None
    assert visibility(services)["rh1"] == 60  # its delay, not the task's backoff of 5 s
    (shard,) = services.instances.list_shards(iid)
    assert shard.status is ShardStatus.PENDING
    assert shard.attempts[0].error == "RetryShard: device service busy"
    assert deliver(services, message, "rh2") is ShardOutcome.SUCCEEDED
    (shard,) = services.instances.list_shards(iid)
    assert shard.result == {"attempt": 2}


def test_retry_shard_without_a_delay_takes_the_task_s_backoff() -> None:
    def busy(ctx: ShardContext) -> None:
        raise RetryShard("later")

    services, _, message = wired(busy, retry={"max_attempts": 2, "backoff_s": 7})
    assert deliver(services, message, "rh1") is None
    assert visibility(services)["rh1"] == 7


def test_retry_shard_counts_against_max_attempts() -> None:
    def always_busy(ctx: ShardContext) -> None:
        raise RetryShard("still busy", delay_s=1)

    services, iid, message = wired(always_busy, retry={"max_attempts": 2, "backoff_s": 0})
    assert deliver(services, message, "rh1") is None
    assert deliver(services, message, "rh2") is ShardOutcome.FAILED
    (shard,) = services.instances.list_shards(iid)
    assert shard.status is ShardStatus.FAILED and len(shard.attempts) == 2
    instance = services.instances.get_instance(iid)
    assert instance is not None and instance.status is InstanceStatus.FAILED


def test_retry_shard_refuses_a_delay_sqs_cannot_give() -> None:
    with pytest.raises(ValueError, match=r"0\.\.900"):
        RetryShard("too late", delay_s=901)


def test_fail_shard_fails_now_whatever_max_attempts_says() -> None:
    def strict(ctx: ShardContext) -> None:
        raise FailShard("account acct-7 has no currency")

    services, iid, message = wired(strict, retry={"max_attempts": 5, "backoff_s": 0})
    assert deliver(services, message, "rh1") is ShardOutcome.FAILED
    assert "rh1" not in visibility(services)  # nothing delayed for a retry
    (shard,) = services.instances.list_shards(iid)
    assert shard.status is ShardStatus.FAILED and len(shard.attempts) == 1
    assert shard.error == "FailShard: account acct-7 has no currency"
    instance = services.instances.get_instance(iid)
    assert instance is not None and instance.status is InstanceStatus.FAILED
    with contextlib.suppress(RetryShardError):  # a copy delivered again runs nothing
        assert deliver(services, message, "rh2") is not ShardOutcome.SUCCEEDED
    (shard,) = services.instances.list_shards(iid)
    assert len(shard.attempts) == 1


def test_any_other_exception_is_retried_as_before() -> None:
    def flaky(ctx: ShardContext) -> dict[str, int]:
        if ctx.attempt == 1:
            raise ConnectionError("reset")
        return {"ok": 1}

    services, _, message = wired(flaky, retry={"max_attempts": 2, "backoff_s": 3})
    assert deliver(services, message, "rh1") is None
    assert visibility(services)["rh1"] == 3
    assert deliver(services, message, "rh2") is ShardOutcome.SUCCEEDED


class Close(BaseModel):
    currency: str
    accounts: int = 1


@handler("h", params=Close)
def close(ctx: ShardContext, params: Close) -> Close:
    return params


def test_params_are_parsed_by_the_model_and_a_returned_model_is_stored_as_json() -> None:
    services, iid, message = wired(close, params={"currency": "EUR", "accounts": "3"})
    assert deliver(services, message, "rh1") is ShardOutcome.SUCCEEDED
    (shard,) = services.instances.list_shards(iid)
    assert shard.result == {"currency": "EUR", "accounts": 3}


def test_params_that_do_not_fit_fail_for_good_naming_the_field() -> None:
    # A task stored before its handler took a params model (apply checks them now).
    services, iid, message = wired(
        close, params={"currency": ["EUR"]}, retry={"max_attempts": 4, "backoff_s": 0}
    )
    assert deliver(services, message, "rh1") is ShardOutcome.FAILED
    (shard,) = services.instances.list_shards(iid)
    assert len(shard.attempts) == 1
    assert shard.error is not None
    assert "params.currency: Input should be a valid string" in shard.error
    assert "handler 'h'" in shard.error
