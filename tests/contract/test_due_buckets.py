"""The fanned-out tick's store side, on every backend: due reads by bucket (`DUE#<k>`,
`SUBMITTED#<k>`) and a bucket's dispatch lease (`take_tick` / `release_tick`)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from iotsched.adapters.dynamodb import DynamoDBStore
from iotsched.core.buckets import DEFAULT_BUCKETS, bucket_of
from iotsched.core.decisions import Firing
from iotsched.core.instance_record import (
    InstanceStatus,
    TriggerKind,
)
from iotsched.services.scheduling.build import build_instance
from tests.contract.conftest import Store
from tests.support import T0, AwsResources, task, task_record

#: The deployment's default bucket count, for the contract fixture's store (tests/contract/conftest.py):
#: these tests are about how due reads split over the buckets.
STORE_BUCKETS = DEFAULT_BUCKETS
M = timedelta(minutes=1)
IDS = [f"t{n:02d}" for n in range(40)]


def test_each_bucket_reads_its_own_due_tasks_and_together_every_one(store: Store) -> None:
    store.put_tasks(
        [task_record(task(i), next_fire=T0 - (n % 3) * M) for n, i in enumerate(IDS)]
        + [task_record(task("later"), next_fire=T0 + M)]
    )
    seen: list[str] = []
    for k in range(DEFAULT_BUCKETS):
        due = store.due_tasks(T0, bucket=k)
        assert {t.task_id for t in due} == {i for i in IDS if bucket_of(i, DEFAULT_BUCKETS) == k}
        assert [(t.next_fire, t.task_id) for t in due] == sorted(
            (t.next_fire, t.task_id) for t in due
        )
        seen += [t.task_id for t in due]
    assert sorted(seen) == IDS  # each once: no bucket reads another's
    assert len({bucket_of(i, DEFAULT_BUCKETS) for i in IDS}) > 10  # the test spans buckets
    every = store.due_tasks(T0)  # every bucket, merged in next-fire order
    assert [(t.next_fire, t.task_id) for t in every] == sorted(
        (T0 - (n % 3) * M, i) for n, i in enumerate(IDS)
    )
    # An advanced task leaves its bucket's due read; it is back there when due again.
    k = bucket_of("t00", DEFAULT_BUCKETS)
    assert store.advance_task("t00", expected_next_fire=T0, next_fire=T0 + M, last_slot=T0)
    assert "t00" not in {t.task_id for t in store.due_tasks(T0, bucket=k)}
    assert "t00" in {t.task_id for t in store.due_tasks(T0 + M, bucket=k)}


def test_each_bucket_reads_its_own_due_submissions(store: Store) -> None:
    record = task_record(task("t"), next_fire=None)
    store.put_tasks([record])
    ids = []
    for n in range(6):
        submitted = build_instance(
            record,
            Firing(
                slot=T0,
                kind=TriggerKind.MANUAL,
                status=InstanceStatus.SCHEDULED,
                suffix=f"submit-{n}",
                fire_at=T0,
            ),
            claimed_at=T0 - M,
            dispatch_lease_s=60,
        )
        assert store.claim_instance(submitted) is None
        ids.append(submitted.instance_id)
    seen: list[str] = []
    for k in range(DEFAULT_BUCKETS):
        due = [i.instance_id for i in store.due_submissions(T0, bucket=k)]
        assert set(due) == {i for i in ids if bucket_of(i, DEFAULT_BUCKETS) == k}
        seen += due
    assert sorted(seen) == sorted(ids)
    assert sorted(i.instance_id for i in store.due_submissions(T0)) == sorted(ids)


def test_a_bucket_lease_is_held_by_one_dispatch_at_a_time(store: Store) -> None:
    until = T0 + 70 * timedelta(seconds=1)
    first = store.take_tick(3, T0, owner="a", now=T0, until=until)
    assert first.taken
    # A retried request of the holder's own (its first response lost) is still the holder's.
    assert store.take_tick(3, T0, owner="a", now=T0, until=until).taken
    # The next minute's dispatch finds it held, by whom, for which minute, until when.
    later = store.take_tick(3, T0 + M, owner="b", now=T0 + M, until=T0 + 2 * M)
    assert not later.taken
    assert (later.owner, later.minute, later.until, later.done) == ("a", T0, until, None)
    # Another bucket is another lease.
    assert store.take_tick(4, T0 + M, owner="b", now=T0 + M, until=T0 + 2 * M).taken
    # Released as done: a copy of that minute is absorbed; any other minute takes it (a
    # replayed clock may go back in time).
    assert not store.release_tick(3, owner="b", minute=T0, done=True)  # not the holder
    assert store.release_tick(3, owner="a", minute=T0, done=True)
    assert store.release_tick(3, owner="a", minute=T0, done=True)  # a retried release
    again = store.take_tick(3, T0, owner="c", now=T0 + M, until=T0 + 2 * M)
    assert not again.taken and again.done == T0 and again.owner is None
    assert store.take_tick(3, T0 - M, owner="b", now=T0 + M, until=T0 + 2 * M).taken


def test_a_bucket_lease_ends_with_its_invocation(store: Store) -> None:
    """A dispatch that died never releases: its lease ends at `until`, and then the next
    minute's dispatch takes it (the dead one's minute not done: it is not covered)."""
    assert store.take_tick(0, T0, owner="dead", now=T0, until=T0 + M)
    early = T0 + M - timedelta(seconds=1)
    assert not store.take_tick(0, T0 + M, owner="b", now=early, until=T0 + 2 * M).taken
    taken = store.take_tick(0, T0 + M, owner="b", now=T0 + M, until=T0 + 2 * M)
    assert taken.taken
    assert not store.release_tick(0, owner="dead", minute=T0, done=True)
    assert store.release_tick(0, owner="b", minute=T0 + M, done=False)  # failed: not done
    assert store.take_tick(0, T0 + M, owner="retry", now=T0 + M, until=T0 + 2 * M).taken


@pytest.mark.moto
def test_tasks_and_submissions_under_the_former_constant_keys_are_still_read(
    aws_resources: AwsResources,
) -> None:
    """A deployment before the buckets wrote `due_pk=DUE` / `SUBMITTED`: after the upgrade
    bucket 0's dispatcher (and every all-bucket read) still reads them, so no task stops
    firing; the task's next clock advance moves it to its own bucket's key."""
    ddb = aws_resources.clients().dynamodb()
    store = DynamoDBStore(ddb, aws_resources.table)
    record = task_record(task("legacy"), next_fire=T0)
    store.put_tasks([record])
    k = bucket_of("legacy", DEFAULT_BUCKETS)
    assert k != 0  # the case that matters: its own bucket is not bucket 0
    ddb.update_item(
        TableName=aws_resources.table,
        Key={"pk": {"S": "TASK#legacy"}, "sk": {"S": "DEF"}},
        UpdateExpression="SET due_pk = :old",
        ExpressionAttributeValues={":old": {"S": "DUE"}},
    )
    assert [t.task_id for t in store.due_tasks(T0, bucket=0)] == ["legacy"]
    assert store.due_tasks(T0, bucket=k) == []  # read once, by one bucket
    assert [t.task_id for t in store.due_tasks(T0)] == ["legacy"]
    assert store.advance_task("legacy", expected_next_fire=T0, next_fire=T0 + M, last_slot=T0)
    assert store.due_tasks(T0 + M, bucket=0) == []
    assert [t.task_id for t in store.due_tasks(T0 + M, bucket=k)] == ["legacy"]
    item = ddb.get_item(
        TableName=aws_resources.table, Key={"pk": {"S": "TASK#legacy"}, "sk": {"S": "DEF"}}
    )["Item"]
    assert item["due_pk"] == {"S": f"DUE#{k}"}


def test_a_limited_due_read_says_whether_anything_is_due(store: Store) -> None:
    """What a bucket dispatcher reads first: at most one task (or submission)."""
    store.put_tasks([task_record(task(i), next_fire=T0) for i in IDS])
    busiest = max(
        range(DEFAULT_BUCKETS), key=lambda k: sum(bucket_of(i, DEFAULT_BUCKETS) == k for i in IDS)
    )
    assert len(store.due_tasks(T0, bucket=busiest)) > 1
    assert len(store.due_tasks(T0, bucket=busiest, limit=1)) == 1
    assert len(store.due_tasks(T0, limit=3)) == 3
    assert store.due_tasks(T0 - M, bucket=busiest, limit=1) == []
    assert store.due_submissions(T0, bucket=busiest, limit=1) == []
