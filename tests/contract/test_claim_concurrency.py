"""The right to fire under duplicate and skewed ticks (docs/guarantees.md, "One tick"), on moto server.

Every dispatcher here is built like a separate Lambda: its own boto3 session and clients (through
`bootstrap.build`) and its own clock; they meet only in DynamoDB and SQS.
"""

from __future__ import annotations

import itertools
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta

import pytest

from iotsched import bootstrap
from iotsched.clock import ManualClock
from iotsched.core.instance_record import InstanceStatus
from iotsched.core.shard_message import ShardMessage
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.scheduling.report import TickReport
from iotsched.services.scheduling.tick import dispatch_tick
from iotsched.services.wiring import Wiring
from tests.support import (
    T0,
    AwsResources,
    item_size,
    receive_all,
    received_shard_messages,
    task,
)

pytestmark = pytest.mark.moto

S = timedelta(seconds=1)
# Three tasks due at T0 (12:00Z): a cron task, a rate task and a static-sharded task.
DUE_AT_T0 = {
    "cron-task": 1,
    "rate-task": 1,
    "static-task": 3,
}


def apply_three_tasks(services: Wiring) -> None:
    apply_tasks(
        [
            task("cron-task", trigger={"cron": "0 * * * *"}),
            task("rate-task", trigger={"rate": "15m"}),
            task(
                "static-task",
                trigger={"cron": "*/30 * * * *"},
                sharding={
                    "strategy": "static",
                    "shards": [{"tenant": "acme"}, {"tenant": "globex"}, {"tenant": "initech"}],
                },
            ),
        ],
        services.tasks,
        now=T0 - 5 * 60 * S,
    )
    assert {t.task_id: t.next_fire for t in services.tasks.list_tasks()} == dict.fromkeys(
        DUE_AT_T0, T0
    )


def dispatcher(aws: AwsResources, clock_at: datetime) -> Wiring:
    """A dispatcher as a separate Lambda would be: own clients, own clock."""
    return bootstrap.build(aws.settings, clock=ManualClock(clock_at), clients=aws.new_clients())


def instance_ids(slot: datetime) -> set[str]:
    return {f"{task_id}@{slot.strftime('%Y-%m-%dT%H:%MZ')}" for task_id in DUE_AT_T0}


def queued(aws: AwsResources, expect: int) -> list[ShardMessage]:
    return received_shard_messages(
        receive_all(aws.client("sqs"), aws.shard_queue_url, expect=expect)
    )


@pytest.mark.load
def test_twenty_concurrent_deliveries_of_one_tick_claim_each_slot_once(
    aws_resources: AwsResources, moto_services: Wiring
) -> None:
    apply_three_tasks(moto_services)
    dispatchers = [dispatcher(aws_resources, T0 + 2 * S) for _ in range(20)]
    barrier = threading.Barrier(len(dispatchers))

    def deliver(services: Wiring) -> TickReport:
        barrier.wait(timeout=30)
        return dispatch_tick(T0 + 20 * S, services)

    with ThreadPoolExecutor(max_workers=len(dispatchers)) as pool:
        reports = list(pool.map(deliver, dispatchers))

    claims = [iid for r in reports for iid in r.claimed]
    assert sorted(claims) == sorted(instance_ids(T0))  # each slot claimed by exactly one
    # Every due firing a dispatcher saw was either its claim or a duplicate claim; nobody
    # resumed (the claimers' dispatch leases are live) and nothing was skipped or failed.
    assert sum(len(r.claimed) + r.duplicate_claims for r in reports) == sum(
        r.due_tasks for r in reports
    )
    assert [r.resumed + r.skipped + r.failed for r in reports] == [[]] * 20
    assert sum(r.messages_sent for r in reports) == sum(DUE_AT_T0.values())

    instances = moto_services.instances.list_instances()
    assert {i.instance_id for i in instances} == instance_ids(T0)
    assert {i.status for i in instances} == {InstanceStatus.RUNNING}
    assert {t.task_id: t.last_slot for t in moto_services.tasks.list_tasks()} == dict.fromkeys(
        DUE_AT_T0, T0
    )

    messages = queued(aws_resources, expect=5)
    assert sorted((m.instance_id, m.shard) for m in messages) == sorted(
        (f"{task_id}@2026-11-29T12:00Z", shard)
        for task_id, count in DUE_AT_T0.items()
        for shard in range(count)
    )


@pytest.mark.load
@pytest.mark.parametrize(
    "event_times",
    [
        pytest.param([T0 + 20 * S, T0 - 10 * S, T0 + 50 * S], id="on-time-then-skewed-early-late"),
        pytest.param([T0 - 10 * S, T0 + 50 * S, T0 + 20 * S], id="skewed-early-first"),
    ],
)
def test_dispatchers_with_skewed_clocks_claim_each_slot_once(
    aws_resources: AwsResources, moto_services: Wiring, event_times: list[datetime]
) -> None:
    """Tick event times 30 s apart either side of 12:00 (11:59:50, 12:00:20, 12:00:50)."""
    apply_three_tasks(moto_services)
    reports = [dispatch_tick(at, dispatcher(aws_resources, at + S)) for at in event_times]

    by_time = {r.now: r for r in reports}
    assert by_time[T0 - 60 * S].claimed == []  # 11:59: nothing is due yet
    assert sorted(iid for r in reports for iid in r.claimed) == sorted(instance_ids(T0))
    assert {i.instance_id for i in moto_services.instances.list_instances()} == instance_ids(T0)
    assert len(queued(aws_resources, expect=5)) == 5


@pytest.mark.load
def test_skewed_dispatchers_racing_claim_each_slot_once(
    aws_resources: AwsResources, moto_services: Wiring
) -> None:
    apply_three_tasks(moto_services)
    times = [T0 + 20 * S, T0 - 10 * S, T0 + 50 * S] * 3
    dispatchers = [dispatcher(aws_resources, at + S) for at in times]
    barrier = threading.Barrier(len(times))

    def deliver(n: int) -> TickReport:
        barrier.wait(timeout=30)
        return dispatch_tick(times[n], dispatchers[n])

    with ThreadPoolExecutor(max_workers=len(times)) as pool:
        reports = list(pool.map(deliver, range(len(times))))
    assert sorted(iid for r in reports for iid in r.claimed) == sorted(instance_ids(T0))
    assert len(moto_services.instances.list_instances()) == 3
    assert len(queued(aws_resources, expect=5)) == 5


def test_shard_messages_carry_the_bounds_stored_with_the_instance(
    aws_resources: AwsResources, moto_services: Wiring
) -> None:
    apply_tasks(
        [
            task(
                "scan",
                trigger={"rate": "1h"},
                sharding={"strategy": "id_range", "shards": 23, "id_min": 7, "id_max": 1_000_003},
            ),
            task(
                "regions",
                trigger={"rate": "1h"},
                sharding={"strategy": "static", "shards": [{"region": r} for r in "abcdefghijkl"]},
            ),
        ],
        moto_services.tasks,
        now=T0 - 60 * S,
    )
    report = dispatch_tick(T0, moto_services)
    assert report.messages_sent == 35
    assert report.send_requests == 3 + 2

    messages = queued(aws_resources, expect=35)
    assert len(messages) == 35
    for task_id, count in (("scan", 23), ("regions", 12)):
        stored = moto_services.instances.get_instance(f"{task_id}@2026-11-29T12:00Z")
        assert stored is not None
        mine = [m for m in messages if m.task_id == task_id]
        assert [m.shard for m in mine] == list(range(count))
        for message in mine:
            assert message.bounds == stored.plan.bounds(message.shard)
            assert message.business_date == stored.business_date
            assert message.max_attempts == stored.max_attempts
    scan = [m.bounds for m in messages if m.task_id == "scan"]
    assert scan[0]["first_id"] == "dev-000007"
    assert scan[-1]["end_id"] == "dev-1000003"
    assert all(a["end"] == b["start"] for a, b in itertools.pairwise(scan))


def test_a_long_outage_of_a_minutely_task_is_claimed_within_dynamodb_limits(
    aws_resources: AwsResources, moto_services: Wiring
) -> None:
    """fire_once after 14 days down: 20,159 covered slots must not blow the 400 KB item limit."""
    apply_tasks(
        [task("minutely", trigger={"rate": "1m"}, misfire={"policy": "fire_once"})],
        moto_services.tasks,
        now=T0 - 60 * S,
    )
    back = T0 + timedelta(days=14)
    report = dispatch_tick(back, moto_services)
    assert report.claimed == ["minutely@2026-12-13T12:00Z"]
    (stored,) = moto_services.instances.list_instances(task_id="minutely")
    assert stored.slot == back
    assert stored.status is InstanceStatus.RUNNING
    assert stored.covers[0] == T0
    # moto does not enforce DynamoDB's 400 KB item limit on PutItem: measure the stored item.
    raw = aws_resources.client("dynamodb").get_item(
        TableName=aws_resources.table,
        Key={"pk": {"S": "TASK#minutely"}, "sk": {"S": "INST#2026-12-13T12:00Z"}},
    )["Item"]
    assert item_size(raw) < 400 * 1024
    record = moto_services.tasks.get_task("minutely")
    assert record is not None
    assert (record.last_slot, record.next_fire) == (back, back + 60 * S)
    assert len(queued(aws_resources, expect=1)) == 1
