"""The alert policy's state (`AlertStateStore` on the task store) on every store: a threshold
window counts each failure once and never past its threshold, whatever the concurrency, faults
and lost responses; a task's failing state is cleared for exactly one success."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta

import pytest

from iotsched.adapters.dynamodb import DynamoDBStore
from iotsched.adversary.schedule import (
    AdversaryConfig,
    Fault,
)
from iotsched.local.emulator import EmulatorServer
from iotsched.ports.alert_state import FailureCount
from tests.contract.conftest import Store
from tests.support import T0, TEST_INDEX_BUCKETS, AwsResources

LATER = T0 + timedelta(days=31)
KEPT = timedelta(days=30)  # a failing state's retention after its last write


def count(store: Store, failure: str, *, threshold: int = 3, start=T0) -> FailureCount:
    return store.count_failure("t", start, failure, threshold=threshold, expires_at=LATER)


def mark(store: Store, instance_id: str, *, at: datetime = T0, task_id: str = "t") -> None:
    store.mark_failing(task_id, instance_id, at=at, expires_at=at + KEPT)


def clear(store: Store, by: str, *, at: datetime = T0, task_id: str = "t") -> str | None:
    return store.clear_failing(task_id, by=by, at=at, expires_at=at + KEPT)


def test_a_window_counts_each_failure_once_up_to_its_threshold(store: Store) -> None:
    assert count(store, "t@1") == FailureCount(1, True, ["t@1"])
    assert count(store, "t@1") == FailureCount(1, True, ["t@1"])  # again: counted, not twice
    assert count(store, "t@2").count == 2
    reached = count(store, "t@3")
    assert (reached.count, reached.counted, sorted(reached.instances)) == (
        3,
        True,
        ["t@1", "t@2", "t@3"],
    )
    past = count(store, "t@4")
    assert (past.count, past.counted) == (3, False)  # the window is full: not counted
    # a failure counted earlier (a retry, a lost answer) gets the count it made, so that only
    # the failure that reached the threshold reaches it again
    assert count(store, "t@1").count == 1
    assert count(store, "t@3").count == 3
    # another window, another task: their own counts
    assert count(store, "t@4", start=T0 + timedelta(minutes=5)).count == 1
    assert store.count_failure("u", T0, "u@1", threshold=3, expires_at=LATER).count == 1


def test_concurrent_failures_are_counted_exactly_to_the_threshold(store: Store) -> None:
    answers: list[FailureCount] = []
    lock = threading.Lock()
    go = threading.Barrier(6)

    def failer(n: int) -> None:
        go.wait()
        for k in range(8):
            answer = count(store, f"t@{n}-{k}", threshold=20)
            with lock:
                answers.append(answer)

    workers = [threading.Thread(target=failer, args=(n,)) for n in range(6)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    counted = [a for a in answers if a.counted]
    # exactly one caller saw each count from 1 to 20: exactly one reaches the threshold
    assert sorted(a.count for a in counted) == list(range(1, 21))
    assert all(a.count == 20 for a in answers if not a.counted)
    assert len(answers) == 48


def test_failing_is_cleared_for_exactly_one_success(store: Store) -> None:
    assert clear(store, "t@ok0") is None  # never failed
    mark(store, "t@1")
    mark(store, "t@2")  # still failing since the first
    assert clear(store, "t@ok1") == "t@1"
    assert clear(store, "t@ok1") == "t@1"  # the same success asking again
    assert clear(store, "t@ok2") is None  # another success: no second notice
    mark(store, "t@3")
    assert clear(store, "t@ok3") == "t@3"  # a new episode, a new notice


def test_a_failing_state_is_kept_its_retention_after_its_last_write(store: Store) -> None:
    day = timedelta(days=1)
    mark(store, "t@1")  # kept until T0 + 30 days
    mark(store, "t@2", at=T0 + 20 * day)  # still failing since the first, kept 30 days more
    assert clear(store, "t@ok1", at=T0 + 40 * day) == "t@1"  # kept by the second failure
    # the cleared state is kept too (kept until day 70): a failure then is a new episode
    mark(store, "t@3", at=T0 + 60 * day)  # kept until day 90
    # a success after the state expired: TTL may not have deleted it yet, but it is gone
    assert clear(store, "t@ok2", at=T0 + 100 * day) is None
    # as for a failure after the expiry: the task fails since that one, not since t@3
    mark(store, "t@4", at=T0 + 100 * day)
    assert clear(store, "t@ok3", at=T0 + 101 * day) == "t@4"
    assert clear(store, "t@ok3", at=T0 + 101 * day) == "t@4"  # its retry


def test_concurrent_successes_clear_failing_once(store: Store) -> None:
    mark(store, "t@1")
    got: list[str | None] = []
    go = threading.Barrier(5)

    def success(n: int) -> None:
        go.wait()
        got.append(clear(store, f"t@ok{n}"))

    workers = [threading.Thread(target=success, args=(n,)) for n in range(5)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert sorted(got, key=lambda g: g is None) == ["t@1"] + [None] * 4


@pytest.mark.moto
def test_lost_responses_count_once_and_clear_for_their_caller(
    adversarial_resources: AwsResources, adversarial_emulator: EmulatorServer
) -> None:
    adversary = adversarial_emulator.adversary
    assert adversary is not None
    adversary.configure(AdversaryConfig())  # no random faults: only the scripted ones
    store = DynamoDBStore(
        adversarial_resources.clients().dynamodb(),
        adversarial_resources.table,
        buckets=TEST_INDEX_BUCKETS,
    )
    assert count(store, "t@1", threshold=2).count == 1
    adversary.script(Fault(op="UpdateItem", kind="lose_response", pk_prefix="ALERTWINDOW#"))
    reached = count(store, "t@2", threshold=2)  # landed; its retry refused, read as ours
    assert (reached.count, reached.counted) == (2, True)
    mark(store, "t@1")
    adversary.script(Fault(op="UpdateItem", kind="lose_response", pk_prefix="ALERTSTATE#"))
    assert clear(store, "t@ok") == "t@1"
    assert adversary.stats()["lost_response"] == 2
    assert clear(store, "t@other") is None


@pytest.mark.moto
def test_a_window_item_expires(aws_resources: AwsResources) -> None:
    store = DynamoDBStore(
        aws_resources.clients().dynamodb(), aws_resources.table, buckets=TEST_INDEX_BUCKETS
    )
    count(store, "t@1")
    client = aws_resources.clients().dynamodb()
    items = client.scan(TableName=aws_resources.table)["Items"]
    (window,) = [i for i in items if i["pk"]["S"].startswith("ALERTWINDOW#t#")]
    assert int(window["expires_at"]["N"]) == int(LATER.timestamp())


@pytest.mark.moto
def test_a_state_item_expires_its_retention_after_its_last_write(
    aws_resources: AwsResources,
) -> None:
    store = DynamoDBStore(
        aws_resources.clients().dynamodb(), aws_resources.table, buckets=TEST_INDEX_BUCKETS
    )
    client = aws_resources.clients().dynamodb()

    def expires_at() -> int:
        (state,) = [
            i
            for i in client.scan(TableName=aws_resources.table)["Items"]
            if i["pk"]["S"] == "ALERTSTATE#t"
        ]
        return int(state["expires_at"]["N"])

    mark(store, "t@1")
    assert expires_at() == int((T0 + KEPT).timestamp())
    assert clear(store, "t@ok", at=T0 + timedelta(hours=1)) == "t@1"
    assert expires_at() == int((T0 + timedelta(hours=1) + KEPT).timestamp())
