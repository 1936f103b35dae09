"""Exactly one reduce after sharded work, on the fake and on moto server (threads)."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import pytest

from iotsched import bootstrap
from iotsched.clock import ManualClock
from iotsched.context import ShardContext
from iotsched.core.instance_record import InstanceStatus
from iotsched.core.shard_message import ShardMessage
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.execution.batch import run_shard
from iotsched.services.execution.outcomes import (
    Delivery,
    ShardOutcome,
)
from iotsched.services.scheduling.tick import dispatch_tick
from iotsched.services.wiring import Wiring
from iotsched.tasklib import registry
from tests.support import T0, AwsResources, task

SHARDS = 50


class Partial:
    """A shard handler that waits at a barrier, so that every shard finishes at once."""

    def __init__(self, parties: int) -> None:
        self.barrier = threading.Barrier(parties, timeout=30)

    def __call__(self, ctx: ShardContext) -> Mapping[str, Any]:
        self.barrier.wait()
        return {"devices": ctx.bounds["n"] + 1}


class Total:
    """A reduce that sums the partial results."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def __call__(self, ctx: ShardContext) -> Mapping[str, Any]:
        partials = ctx.partials()
        self.calls.append(len(partials))
        return {"devices": sum(p["result"]["devices"] for p in partials)}


@pytest.fixture(params=["memory", pytest.param("moto", marks=pytest.mark.moto)])
def wired(request: pytest.FixtureRequest) -> tuple[Wiring, Partial, Total]:
    clock = ManualClock(T0 + timedelta(seconds=5))
    partial, total = Partial(SHARDS), Total()
    handlers = {**registry(), "partial": partial, "total": total}
    if request.param == "memory":
        services = bootstrap.build_memory(clock=clock, handlers=handlers)
    else:
        aws: AwsResources = request.getfixturevalue("aws_resources")
        services = bootstrap.build(
            aws.settings, clock=clock, handlers=handlers, clients=aws.clients()
        )
    return services, partial, total


def sent_messages(services: Wiring, aws: Any = None) -> list[ShardMessage]:
    from tests.support import receive_all, received_shard_messages

    queue = services.queue
    if hasattr(queue, "sent"):
        messages = list(queue.sent)
        queue.sent.clear()
        return messages
    return received_shard_messages(receive_all(aws.client("sqs"), aws.shard_queue_url))


def deliver(services: Wiring, message: ShardMessage) -> ShardOutcome:
    return run_shard(
        Delivery(body=message.model_dump_json(), receipt_handle="rh"), services, worker="w"
    )


def test_fifty_shards_finishing_at_once_start_exactly_one_reduce(
    wired: tuple[Wiring, Partial, Total], request: pytest.FixtureRequest
) -> None:
    services, _partial, total = wired
    aws = request.getfixturevalue("aws_resources") if not hasattr(services.queue, "sent") else None
    shards = [{"n": i} for i in range(SHARDS)]
    apply_tasks(
        [
            task(
                "r",
                handler="partial",
                reduce="total",
                sharding={"strategy": "static", "shards": shards},
            )
        ],
        services.tasks,
        now=T0 - timedelta(minutes=5),
    )
    (instance_id,) = dispatch_tick(T0, services).claimed
    messages = sent_messages(services, aws)
    assert len(messages) == SHARDS
    with ThreadPoolExecutor(max_workers=SHARDS) as pool:
        outcomes = list(pool.map(lambda m: deliver(services, m), messages))
    assert outcomes == [ShardOutcome.SUCCEEDED] * SHARDS
    # exactly one reduce message, however many saw the counter reach zero
    reduces = [m for m in sent_messages(services, aws) if m.reduce]
    assert len(reduces) == 1
    instance = services.instances.get_instance(instance_id)
    assert instance is not None and instance.status is InstanceStatus.REDUCING
    # duplicate shard-completion messages do not start a second reduce
    assert [deliver(services, m) for m in messages[:3]] == [ShardOutcome.DUPLICATE] * 3
    assert [m for m in sent_messages(services, aws) if m.reduce] == []
    # the reduce runs once, reads every partial result, and ends the instance
    assert deliver(services, reduces[0]) is ShardOutcome.SUCCEEDED
    assert deliver(services, reduces[0]) is ShardOutcome.NOT_STARTED
    assert total.calls == [SHARDS]
    done = services.instances.get_instance(instance_id)
    assert done is not None and done.status is InstanceStatus.SUCCEEDED
    (record,) = [s for s in services.instances.list_shards(instance_id) if s.index == SHARDS]
    assert record.result == {"devices": sum(range(1, SHARDS + 1))}
    assert [a.outcome for a in record.attempts] == ["succeeded"]


def test_a_failed_shard_means_no_reduce_and_a_failed_instance_naming_it(
    wired: tuple[Wiring, Partial, Total], request: pytest.FixtureRequest
) -> None:
    services, _partial, total = wired
    aws = request.getfixturevalue("aws_resources") if not hasattr(services.queue, "sent") else None
    services = dataclasses.replace(
        services, handlers={**services.handlers, "partial": registry()["noop"]}
    )
    apply_tasks(
        [
            task(
                "r",
                handler="partial",
                reduce="total",
                sharding={"strategy": "static", "shards": [{"n": 0}, {"n": 1}, {"n": 2}]},
                params={"fail": [1]},
                retry={"max_attempts": 1},
            )
        ],
        services.tasks,
        now=T0 - timedelta(minutes=5),
    )
    (instance_id,) = dispatch_tick(T0, services).claimed
    outcomes = [deliver(services, m) for m in sent_messages(services, aws)]
    assert outcomes == [ShardOutcome.SUCCEEDED, ShardOutcome.FAILED, ShardOutcome.SUCCEEDED]
    assert [m for m in sent_messages(services, aws) if m.reduce] == []
    assert total.calls == []
    done = services.instances.get_instance(instance_id)
    assert done is not None and done.status is InstanceStatus.FAILED
