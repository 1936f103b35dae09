"""Write-sharded index keys read back scatter-gather, on every store backend.

Open instances, owing instances, instances by status, tasks and alerts are written under
`<prefix>#<k>` (k the bucket of the item's id over the deployment's bucket count); readers
query every bucket and merge in the index's order. The bucket count may be raised on a live
deployment: what was written under fewer buckets is still read. Owing items written under the
four fixed partitions `OWED#0`..`OWED#3` are still read whatever the bucket count.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from iotsched.adapters.alerting import DedupAlertSink
from iotsched.adapters.dynamodb import DynamoDBStore
from iotsched.adapters.dynamodb.alerts import DynamoDBAlertLog
from iotsched.adapters.memory.queues import MemoryAlertSink
from iotsched.adapters.memory.store import MemoryStore
from iotsched.clock import ManualClock
from iotsched.core.alert_message import Alert
from iotsched.core.buckets import partition
from iotsched.core.instance_record import (
    FollowUp,
    InstanceStatus,
)
from iotsched.core.timeutil import iso
from iotsched.ports.messaging import (
    AlertLog,
    AlertSink,
)
from tests.contract.conftest import Store
from tests.support import T0, AwsResources, instance, task, task_record

#: Builds a store on one shared table with the given bucket count.
Stores = Callable[[int], Store]


def _backend(request: pytest.FixtureRequest) -> str:
    backend: str = request.param
    return backend


def _aws(request: pytest.FixtureRequest, backend: str) -> AwsResources:
    name = "adversarial_resources" if backend == "adversarial" else "aws_resources"
    aws: AwsResources = request.getfixturevalue(name)
    return aws


@pytest.fixture(
    params=[
        "memory",
        pytest.param("dynamodb", marks=pytest.mark.moto),
        pytest.param("adversarial", marks=[pytest.mark.moto, pytest.mark.adversarial]),
    ]
)
def stores(request: pytest.FixtureRequest) -> Stores:
    """Stores on one table, each with its bucket count (in memory: one store, no buckets)."""
    backend = _backend(request)
    if backend == "memory":
        memory = MemoryStore()
        return lambda buckets: memory
    aws = _aws(request, backend)
    client = aws.clients().dynamodb()
    return lambda buckets: DynamoDBStore(client, aws.table, buckets=buckets)


class _Topic:
    """An alert topic that takes every alert (what reached it is not what these tests read)."""

    def publish(self, alert: Alert) -> None:
        return None


#: Builds (the alert sink, its log) on one shared table with the given bucket count.
AlertLogs = Callable[[int], tuple[AlertSink, AlertLog]]


@pytest.fixture(
    params=[
        "memory",
        pytest.param("dynamodb", marks=pytest.mark.moto),
        pytest.param("adversarial", marks=[pytest.mark.moto, pytest.mark.adversarial]),
    ]
)
def alert_logs(request: pytest.FixtureRequest) -> AlertLogs:
    clock = ManualClock(T0 + timedelta(days=3))
    backend = _backend(request)
    if backend == "memory":
        memory = MemoryAlertSink(clock)
        return lambda buckets: (memory, memory)
    aws = _aws(request, backend)
    client = aws.clients().dynamodb()

    def build(buckets: int) -> tuple[AlertSink, AlertLog]:
        log = DynamoDBAlertLog(client, aws.table, buckets=buckets, clock=clock)
        sink = DedupAlertSink(log, _Topic(), clock)
        return sink, sink

    return build


def _raw_partitions(store: Store, attribute: str) -> set[str]:
    """The index partition values the DynamoDB items carry (empty in memory)."""
    if not isinstance(store, DynamoDBStore):
        return set()
    client: Any = store._ddb
    items = client.scan(TableName=store._table)["Items"]
    return {item[attribute]["S"] for item in items if attribute in item}


def test_open_instances_come_in_deadline_order_from_every_bucket(stores: Stores) -> None:
    store = stores(8)
    # Deadlines in the reverse order of their slots, so that neither the slot nor the id order
    # is the deadline order.
    claimed = []
    for n in range(12):
        inst = instance("t", T0 + timedelta(hours=n), instance_timeout_s=3600 * (24 - 2 * n))
        assert store.claim_instance(inst) is None
        claimed.append(inst)
    by_deadline = [i.instance_id for i in sorted(claimed, key=lambda i: i.deadline)]
    assert [i.instance_id for i in store.open_instances()] == by_deadline
    assert [i.instance_id for i in store.open_instances(limit=5)] == by_deadline[:5]
    if isinstance(store, DynamoDBStore):
        expected = {partition("OPEN", i.instance_id, 8) for i in claimed}
        assert _raw_partitions(store, "open_pk") == expected
        assert len(expected) > 1


def test_instances_by_status_come_newest_first_from_every_bucket_within_the_limit(
    stores: Stores,
) -> None:
    store = stores(8)
    ids = []
    for n in range(12):
        inst = instance(f"t{n % 3}", T0 + timedelta(minutes=7 * n))
        assert store.claim_instance(inst) is None
        ids.append(inst.instance_id)
    running = ids[::2]
    assert store.mark_running(running) == [True] * len(running)
    newest_running = list(reversed(running))
    assert [
        i.instance_id for i in store.list_instances(status=InstanceStatus.RUNNING)
    ] == newest_running
    assert [
        i.instance_id for i in store.list_instances(status=InstanceStatus.RUNNING, limit=4)
    ] == newest_running[:4]
    # every status at once: merged newest slot first too
    assert [i.instance_id for i in store.list_instances(limit=5)] == list(reversed(ids))[:5]
    if isinstance(store, DynamoDBStore):
        running_pks = {p for p in _raw_partitions(store, "status_pk") if "running" in p}
        assert running_pks == {partition("STATUS#running", i, 8) for i in running}
        assert len(running_pks) > 1


def test_owing_instances_come_oldest_end_first_from_every_bucket(stores: Stores) -> None:
    store = stores(8)
    ended = []
    for n in range(8):
        inst = instance(f"job-a{n}", T0 + timedelta(hours=n))
        assert store.claim_instance(inst) is None
        finished = T0 + timedelta(days=1, minutes=-n)  # the later slot ended earlier
        assert store.end_instance(
            inst.instance_id,
            status=InstanceStatus.FAILED,
            reason="test",
            finished_at=finished,
            owed=[FollowUp.ALERT],
        )
        ended.append((finished, inst.instance_id))
    expected = [iid for _, iid in sorted(ended)]
    assert [i.instance_id for i in store.owing_instances()] == expected
    assert [i.instance_id for i in store.owing_instances(limit=3)] == expected[:3]
    if isinstance(store, DynamoDBStore):
        expected_pks = {partition("OWED", iid, 8) for _, iid in ended}
        assert _raw_partitions(store, "open_pk") == expected_pks
        assert any(int(p.rpartition("#")[2]) >= 4 for p in expected_pks)  # past the old 4


def test_raising_the_bucket_count_keeps_finding_what_was_written_under_fewer(
    stores: Stores,
) -> None:
    before = stores(2)
    after = stores(16)
    open_ids, owing_ids = [], []
    for n in range(6):
        inst = instance("t", T0 + timedelta(hours=n))
        assert before.claim_instance(inst) is None
        open_ids.append(inst.instance_id)
    for n in range(4):
        inst = instance("u", T0 + timedelta(hours=n))
        assert before.claim_instance(inst) is None
        assert before.end_instance(
            inst.instance_id,
            status=InstanceStatus.FAILED,
            reason="test",
            finished_at=T0 + timedelta(days=1, hours=n),
            owed=[FollowUp.ALERT],
        )
        owing_ids.append(inst.instance_id)
    before.put_tasks([task_record(task(f"task-{n}"), next_fire=T0) for n in range(5)])
    # one more of each written under the larger count
    late = instance("t", T0 + timedelta(hours=10))
    assert after.claim_instance(late) is None
    after.put_tasks([task_record(task("task-9"), next_fire=T0)])

    assert {i.instance_id for i in after.open_instances()} == {*open_ids, late.instance_id}
    assert [i.instance_id for i in after.owing_instances()] == owing_ids
    assert [
        i.instance_id for i in after.list_instances(status=InstanceStatus.PLANNING, limit=3)
    ] == [late.instance_id, *reversed(open_ids)][:3]
    assert [t.task_id for t in after.list_tasks()] == [f"task-{n}" for n in (0, 1, 2, 3, 4, 9)]
    if isinstance(after, DynamoDBStore):  # written where each count put them
        assert _raw_partitions(after, "open_pk") == {
            *(partition("OPEN", i, 2) for i in open_ids),
            partition("OPEN", late.instance_id, 16),
            *(partition("OWED", i, 2) for i in owing_ids),
        }


@pytest.mark.parametrize("buckets", [1, 8, 32])
def test_tasks_are_listed_in_id_order_page_by_page(stores: Stores, buckets: int) -> None:
    store = stores(buckets)
    ids = sorted(f"task-{n:02d}" for n in range(11))
    store.put_tasks([task_record(task(i), next_fire=T0) for i in reversed(ids)])
    assert [t.task_id for t in store.list_tasks()] == ids
    pages: list[list[str]] = []
    after: str | None = None
    for _ in range(10):  # a cursor that does not move fails, never loops
        page = [t.task_id for t in store.list_tasks(after=after, limit=4)]
        if not page:
            break
        pages.append(page)
        after = page[-1]
    assert pages == [ids[0:4], ids[4:8], ids[8:11]]
    assert store.list_tasks(after=ids[-1]) == []
    if isinstance(store, DynamoDBStore):
        assert _raw_partitions(store, "date_pk") == {partition("TASKS", i, buckets) for i in ids}


def _alert(n: int, raised_at: Any) -> Alert:
    return Alert(
        type="instance_failed",
        severity="high",
        task_id="t",
        tenant=None,
        instance_id=f"t@{n}",
        status="failed",
        alert_id=f"alert-{n:02d}",
        raised_at=raised_at,
    )


def test_alerts_come_newest_first_across_days_and_buckets(alert_logs: AlertLogs) -> None:
    sink, log = alert_logs(8)
    # Published out of order, over four days (the clock is on the last one).
    raised = {n: T0 + timedelta(hours=(n * 7) % 80) for n in range(12)}
    for n, at in raised.items():
        sink.publish(_alert(n, at))
    newest = [f"alert-{n:02d}" for n in sorted(raised, key=lambda n: raised[n], reverse=True)]
    assert [a.alert_id for a in log.recent(limit=50)] == newest
    assert [a.alert_id for a in log.recent(limit=5)] == newest[:5]
    assert [e.alert.alert_id for e in log.entries(limit=3)] == newest[:3]


def test_alerts_recorded_under_fewer_buckets_are_still_listed(alert_logs: AlertLogs) -> None:
    before, _ = alert_logs(2)
    after, log = alert_logs(16)
    for n in range(4):
        before.publish(_alert(n, T0 + timedelta(hours=n)))
    after.publish(_alert(9, T0 + timedelta(hours=9)))
    assert [a.alert_id for a in log.recent()] == [f"alert-{n:02d}" for n in (9, 3, 2, 1, 0)]


# -- DynamoDB only: items written under the keys of earlier versions ----------------------------


@pytest.fixture(
    params=[
        pytest.param("dynamodb", marks=pytest.mark.moto),
        pytest.param("adversarial", marks=[pytest.mark.moto, pytest.mark.adversarial]),
    ]
)
def aws(request: pytest.FixtureRequest) -> AwsResources:
    return _aws(request, _backend(request))


@pytest.mark.parametrize("legacy", ["OWED#0", "OWED#1", "OWED#2", "OWED#3"])
def test_owing_items_under_the_four_fixed_partitions_are_still_read(
    aws: AwsResources, legacy: str
) -> None:
    client = aws.clients().dynamodb()
    store = DynamoDBStore(client, aws.table, buckets=32)
    inst = instance("t", T0)
    assert store.claim_instance(inst) is None
    assert store.end_instance(
        inst.instance_id,
        status=InstanceStatus.FAILED,
        reason="test",
        finished_at=T0,
        owed=[FollowUp.ALERT],
    )
    key = {"pk": {"S": "TASK#t"}, "sk": {"S": f"INST#{inst.slot:%Y-%m-%dT%H:%MZ}"}}
    client.update_item(
        TableName=aws.table,
        Key=key,
        UpdateExpression="SET open_pk = :legacy",
        ExpressionAttributeValues={":legacy": {"S": legacy}},
    )
    # and an unpublished alert from then, in the same partition
    client.put_item(
        TableName=aws.table,
        Item={
            "pk": {"S": "ALERT#old"},
            "sk": {"S": "ALERT"},
            "kind": {"S": "alert"},
            "body": {"S": _alert(0, T0).model_dump_json()},
            "open_pk": {"S": legacy},
            "open_sk": {"S": f"{iso(T0)}#ALERT#old"},
        },
    )
    for buckets in (1, 4, 32):
        reader = DynamoDBStore(client, aws.table, buckets=buckets)
        assert [i.instance_id for i in reader.owing_instances()] == [inst.instance_id]
        log = DynamoDBAlertLog(client, aws.table, buckets=buckets)
        assert [a.alert_id for a in log.unpublished(before=T0 + timedelta(seconds=1))] == [
            "alert-00"
        ]


def _pages(store: Store, size: int, **query: Any) -> list[list[str]]:
    pages: list[list[str]] = []
    before: str | None = None
    for _ in range(10):  # a cursor that does not move fails, never loops
        page = [i.instance_id for i in store.list_instances(limit=size, before=before, **query)]
        if not page:
            return pages
        pages.append(page)
        before = page[-1]
    raise AssertionError(f"still paging after 10 pages: {pages}")


def test_instances_are_listed_page_after_page_across_buckets(stores: Stores) -> None:
    store = stores(8)
    ids = []
    for n in range(10):
        inst = instance(f"job-a{n % 2}", T0 + timedelta(minutes=5 * n))
        assert store.claim_instance(inst) is None
        ids.append(inst.instance_id)
    newest = list(reversed(ids))
    chunks = [newest[0:4], newest[4:8], newest[8:10]]
    assert _pages(store, 4, status=InstanceStatus.PLANNING) == chunks
    assert _pages(store, 4) == chunks  # every status at once
    of_a1 = [i for i in newest if i.startswith("job-a1@")]
    assert _pages(store, 2, task_id="job-a1") == [of_a1[0:2], of_a1[2:4], of_a1[4:5]]
    assert _pages(store, 2, task_id="job-a1", status=InstanceStatus.PLANNING) == [
        of_a1[0:2],
        of_a1[2:4],
        of_a1[4:5],
    ]


def test_a_bucket_read_page_after_page_still_merges_in_order(stores: Stores) -> None:
    """More items in a bucket than one page of a scatter-gather read holds (`gather_page`)."""
    store = stores(8)
    claimed = []
    for n in range(30):
        inst = instance("t", T0 + timedelta(minutes=n), instance_timeout_s=3600 + 60 * (n % 7))
        assert store.claim_instance(inst) is None
        claimed.append(inst)
    by_deadline = [
        i.instance_id for i in sorted(claimed, key=lambda i: (i.deadline, i.instance_id))
    ]
    assert [i.instance_id for i in store.open_instances(limit=25)] == by_deadline[:25]
    newest = [i.instance_id for i in reversed(claimed)]
    assert [i.instance_id for i in store.list_instances(limit=21)] == newest[:21]


def test_an_instance_open_under_the_single_open_partition_is_still_swept(aws: AwsResources) -> None:
    client = aws.clients().dynamodb()
    store = DynamoDBStore(client, aws.table, buckets=32)
    inst = instance("t", T0)
    assert store.claim_instance(inst) is None
    key = {"pk": {"S": "TASK#t"}, "sk": {"S": f"INST#{inst.slot:%Y-%m-%dT%H:%MZ}"}}
    client.update_item(
        TableName=aws.table,
        Key=key,
        UpdateExpression="SET open_pk = :legacy",
        ExpressionAttributeValues={":legacy": {"S": "OPEN"}},
    )
    assert [i.instance_id for i in store.open_instances()] == [inst.instance_id]


def test_a_task_stored_before_the_task_list_is_listed_after_its_next_fire(
    aws: AwsResources,
) -> None:
    client = aws.clients().dynamodb()
    store = DynamoDBStore(client, aws.table, buckets=32)
    store.put_tasks(
        [task_record(task("old"), next_fire=T0), task_record(task("new"), next_fire=T0)]
    )
    # "old" as a version without the task list stored it: no date_pk
    client.update_item(
        TableName=aws.table,
        Key={"pk": {"S": "TASK#old"}, "sk": {"S": "DEF"}},
        UpdateExpression="REMOVE date_pk",
    )
    assert [t.task_id for t in store.list_tasks()] == ["new"]
    assert store.advance_task(
        "old", expected_next_fire=T0, next_fire=T0 + timedelta(hours=1), last_slot=T0
    )
    assert [t.task_id for t in store.list_tasks()] == ["new", "old"]
    assert store.advance_task(  # a later fire leaves the key as it is
        "old",
        expected_next_fire=T0 + timedelta(hours=1),
        next_fire=T0 + timedelta(hours=2),
        last_slot=T0 + timedelta(hours=1),
    )
    assert _raw_partitions(store, "date_pk") >= {partition("TASKS", "old", 32)}
