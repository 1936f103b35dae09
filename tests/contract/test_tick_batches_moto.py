"""The batched tick (many due tasks) under duplicate deliveries, on moto server.

As tests/contract/test_claim_concurrency.py does for the one-by-one path: dispatchers built like
separate Lambdas (own boto3 clients, own clock) meet only in DynamoDB and SQS, and each slot is
claimed once, each shard message sent once, each task advanced once.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta

import pytest

from iotsched import bootstrap
from iotsched.clock import ManualClock
from iotsched.core.instance_record import InstanceStatus
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.scheduling.report import TickReport
from iotsched.services.scheduling.tick import (
    BATCH_FROM,
    dispatch_tick,
)
from iotsched.services.wiring import Wiring
from tests.support import T0, AwsResources, receive_all, received_shard_messages, task

pytestmark = pytest.mark.moto

S = timedelta(seconds=1)
TASKS = 3 * BATCH_FROM


def dispatcher(aws: AwsResources, clock_at: datetime) -> Wiring:
    return bootstrap.build(aws.settings, clock=ManualClock(clock_at), clients=aws.new_clients())


def apply_due(services: Wiring) -> list[str]:
    """TASKS tasks due at T0; every third one has two shards."""
    definitions = [
        task(
            f"t{n:03d}",
            trigger={"rate": "15m"},
            sharding={"strategy": "static", "shards": [{}, {}] if n % 3 == 0 else [{}]},
        )
        for n in range(TASKS)
    ]
    apply_tasks(definitions, services.tasks, now=T0 - 5 * 60 * S)
    return [f"{d.id}@2026-11-29T12:00Z" for d in definitions]


@pytest.mark.load
def test_concurrent_deliveries_of_a_batched_tick_claim_send_and_advance_each_task_once(
    aws_resources: AwsResources, moto_services: Wiring
) -> None:
    ids = apply_due(moto_services)
    shards = sum(2 if n % 3 == 0 else 1 for n in range(TASKS))
    dispatchers = [dispatcher(aws_resources, T0 + 2 * S) for _ in range(6)]
    barrier = threading.Barrier(len(dispatchers))

    def deliver(services: Wiring) -> TickReport:
        barrier.wait(timeout=30)
        return dispatch_tick(T0 + 20 * S, services)

    with ThreadPoolExecutor(max_workers=len(dispatchers)) as pool:
        reports = list(pool.map(deliver, dispatchers))

    assert sorted(i for r in reports for i in r.claimed) == ids  # each slot claimed once
    assert sum(len(r.claimed) + r.duplicate_claims for r in reports) == sum(
        r.due_tasks for r in reports
    )
    assert [r.resumed + r.skipped + r.failed for r in reports] == [[]] * len(reports)
    assert sum(r.messages_sent for r in reports) == shards

    instances = moto_services.instances.list_instances(limit=1000)
    assert sorted(i.instance_id for i in instances) == ids
    assert {i.status for i in instances} == {InstanceStatus.RUNNING}
    assert moto_services.instances.list_instances(status=InstanceStatus.PLANNING) == []
    assert {t.last_slot for t in moto_services.tasks.list_tasks()} == {T0}
    assert moto_services.tasks.due_tasks(T0 + 60 * S) == []

    messages = received_shard_messages(
        receive_all(aws_resources.client("sqs"), aws_resources.shard_queue_url, expect=shards)
    )
    assert sorted((m.instance_id, m.shard) for m in messages) == sorted(
        (iid, shard) for n, iid in enumerate(ids) for shard in range(2 if n % 3 == 0 else 1)
    )


def test_a_batched_tick_uses_few_requests(
    aws_resources: AwsResources, moto_services: Wiring
) -> None:
    """One-shard and two-shard instances share SendMessageBatch calls; the claims, the running
    marks and the advances go as one transaction each (TASKS < 100)."""
    apply_due(moto_services)
    calls: list[str] = []
    services = dispatcher(aws_resources, T0 + 2 * S)
    for client in (services.instances._ddb, services.queue._sqs):  # type: ignore[attr-defined]
        client.meta.events.register("before-call.*.*", lambda model, **_: calls.append(model.name))

    report = dispatch_tick(T0, services)

    assert len(report.claimed) == TASKS
    shards = sum(2 if n % 3 == 0 else 1 for n in range(TASKS))
    assert report.send_requests == -(-shards // 10)
    assert sorted(calls) == sorted(
        # the due tasks, then the due submissions, of every bucket and of the former
        # constant keys (a tick over all buckets; a bucket dispatcher reads its own)
        ["Query"] * 2 * (aws_resources.settings.index_buckets + 1)
        + ["TransactWriteItems"] * 3
        + ["SendMessageBatch"] * report.send_requests
    )
