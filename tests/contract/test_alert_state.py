"""The alert policy's state (`AlertStateStore` on the task store) on every store: a threshold
window counts each failure once and never past its threshold, whatever the concurrency, faults
and lost responses; a task's failing state is cleared for exactly one success."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from iotsched.adapters.dynamodb import DynamoDBStore
from iotsched.local.adversary import AdversaryConfig, Fault
from iotsched.local.emulator import EmulatorServer
from iotsched.ports import FailureCount
from tests.contract.conftest import Store
from tests.support import T0, AwsResources

LATER = T0 + timedelta(days=31)


def count(store: Store, failure: str, *, threshold: int = 3, start=T0) -> FailureCount:
    return store.count_failure("t", start, failure, threshold=threshold, expires_at=LATER)


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
    assert store.clear_failing("t", by="t@ok0") is None  # never failed
    store.mark_failing("t", "t@1")
    store.mark_failing("t", "t@2")  # still failing since the first
    assert store.clear_failing("t", by="t@ok1") == "t@1"
    assert store.clear_failing("t", by="t@ok1") == "t@1"  # the same success asking again
    assert store.clear_failing("t", by="t@ok2") is None  # another success: no second notice
    store.mark_failing("t", "t@3")
    assert store.clear_failing("t", by="t@ok3") == "t@3"  # a new episode, a new notice


def test_concurrent_successes_clear_failing_once(store: Store) -> None:
    store.mark_failing("t", "t@1")
    got: list[str | None] = []
    go = threading.Barrier(5)

    def success(n: int) -> None:
        go.wait()
        got.append(store.clear_failing("t", by=f"t@ok{n}"))

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
    store = DynamoDBStore(adversarial_resources.clients().dynamodb(), adversarial_resources.table)
    assert count(store, "t@1", threshold=2).count == 1
    adversary.script(Fault(op="UpdateItem", kind="lose_response", pk_prefix="ALERTWINDOW#"))
    reached = count(store, "t@2", threshold=2)  # landed; its retry refused, read as ours
    assert (reached.count, reached.counted) == (2, True)
    store.mark_failing("t", "t@1")
    adversary.script(Fault(op="UpdateItem", kind="lose_response", pk_prefix="ALERTSTATE#"))
    assert store.clear_failing("t", by="t@ok") == "t@1"
    assert adversary.stats()["lost_response"] == 2
    assert store.clear_failing("t", by="t@other") is None


@pytest.mark.moto
def test_a_window_item_expires(aws_resources: AwsResources) -> None:
    store = DynamoDBStore(aws_resources.clients().dynamodb(), aws_resources.table)
    count(store, "t@1")
    client = aws_resources.clients().dynamodb()
    items = client.scan(TableName=aws_resources.table)["Items"]
    (window,) = [i for i in items if i["pk"]["S"].startswith("ALERTWINDOW#t#")]
    assert int(window["expires_at"]["N"]) == int(LATER.timestamp())
