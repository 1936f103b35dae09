"""Shard-start gates (`InstanceStore.take_start`, `close_starts`) on every store: the starts of
a minute never pass the limit, whatever the concurrency, faults and lost responses; the fence
holds once `close_starts` returned."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import timedelta

import pytest

from iotsched.adapters.dynamodb import DynamoDBStore
from iotsched.adversary.schedule import (
    AdversaryConfig,
    Fault,
)
from iotsched.local.emulator import EmulatorServer
from iotsched.ports.start_limits import StartVerdict
from iotsched.ports.store_errors import StoreContendedError
from tests.contract.conftest import Store
from tests.contract.test_throttling import LostResponse
from tests.support import T0, AwsResources

M = timedelta(minutes=1)
STARTED, WAIT, CLOSED = StartVerdict.STARTED, StartVerdict.WAIT, StartVerdict.CLOSED
ID = "fw@2026-11-29T12:00Z"


def takes(
    store: Store,
    n: int,
    *,
    limit: int | None,
    minute=T0,
    weight: int = 1,
    instance_id: str = ID,
    gate: str | None = None,
) -> list[StartVerdict]:
    return [
        store.take_start(instance_id, gate=gate, minute=minute, limit=limit, weight=weight)
        for _ in range(n)
    ]


def test_a_minute_counts_up_to_its_limit_and_the_next_minute_starts_again(store: Store) -> None:
    assert takes(store, 7, limit=5) == [STARTED] * 5 + [WAIT] * 2
    assert takes(store, 6, limit=5, minute=T0 + M) == [STARTED] * 5 + [WAIT]
    # A lower limit later (a ramp's base, another task's): the minute is already full.
    assert takes(store, 1, limit=3, minute=T0 + M) == [WAIT]


def test_weights_count_and_a_shard_heavier_than_the_limit_starts_alone(store: Store) -> None:
    assert takes(store, 1, limit=100, weight=60) == [STARTED]
    assert takes(store, 1, limit=100, weight=50) == [WAIT]  # 110 > 100: not counted
    assert takes(store, 1, limit=100, weight=40) == [STARTED]  # exactly 100
    assert takes(store, 1, limit=100, weight=1) == [WAIT]
    assert takes(store, 2, limit=100, weight=250, minute=T0 + M) == [STARTED, WAIT]


def test_a_clock_behind_counts_in_the_gates_minute(store: Store) -> None:
    assert takes(store, 2, limit=2, minute=T0 + M) == [STARTED] * 2
    # A worker whose clock reads the minute before: the gate's minute is full.
    assert takes(store, 1, limit=2, minute=T0) == [WAIT]


def test_instances_have_their_own_gates_unless_they_share_one(store: Store) -> None:
    other = "fw@2026-11-29T12:15Z"
    assert takes(store, 2, limit=2) == [STARTED] * 2
    assert takes(store, 2, limit=2, instance_id=other) == [STARTED] * 2
    shared = "acme#fw"
    assert takes(store, 2, limit=3, gate=shared) == [STARTED] * 2
    assert takes(store, 2, limit=3, gate=shared, instance_id=other) == [STARTED, WAIT]


def test_no_rate_is_only_the_fence(store: Store) -> None:
    assert takes(store, 50, limit=None) == [STARTED] * 50
    store.close_starts(ID, "aborted: 30% failed")
    assert takes(store, 1, limit=None) == [CLOSED]


def test_the_fence_holds_after_close_whatever_the_gate(store: Store) -> None:
    other = "fw@2026-11-29T12:15Z"
    assert takes(store, 1, limit=5) == [STARTED]
    store.close_starts(ID, "aborted")
    store.close_starts(ID, "aborted again")  # idempotent
    assert takes(store, 1, limit=5) == [CLOSED]
    assert takes(store, 1, limit=5, minute=T0 + M) == [CLOSED]
    assert takes(store, 1, limit=5, gate="acme#fw") == [CLOSED]
    assert takes(store, 1, limit=None) == [CLOSED]
    # Closing one instance leaves the others (and a never-started one can be closed).
    assert takes(store, 1, limit=5, instance_id=other) == [STARTED]
    store.close_starts("fw@2026-11-29T12:30Z", "aborted")
    assert takes(store, 1, limit=None, instance_id="fw@2026-11-29T12:30Z") == [CLOSED]


def _race(
    store: Store,
    *,
    threads: int,
    each: int,
    limit: int,
    gate: str | None = None,
    close_after: int | None = None,
) -> Counter[StartVerdict]:
    verdicts: Counter[StartVerdict] = Counter()
    lock = threading.Lock()
    go = threading.Barrier(threads)

    def taker() -> None:
        go.wait()
        for _ in range(each):
            verdict = store.take_start(ID, gate=gate, minute=T0, limit=limit)
            with lock:
                verdicts[verdict] += 1

    workers = [threading.Thread(target=taker) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return verdicts


def _lost_responses(request: pytest.FixtureRequest) -> int:
    """Responses the adversarial DynamoDB has lost so far (0 on the other stores)."""
    if request.node.callspec.params.get("store") != "adversarial":
        return 0
    emulator: EmulatorServer = request.getfixturevalue("adversarial_emulator")
    assert emulator.adversary is not None
    return emulator.adversary.stats().get("lost_response", 0)


@pytest.mark.parametrize("gate", [None, "acme#fw"])
def test_concurrent_takers_count_exactly_the_limit(
    store: Store, gate: str | None, request: pytest.FixtureRequest
) -> None:
    lost_before = _lost_responses(request)
    verdicts = _race(store, threads=12, each=6, limit=20, gate=gate)
    lost = _lost_responses(request) - lost_before
    # Every take answered (a taker given up on for contention, StoreContendedError, would end
    # its thread) and never past the limit. Exactly the limit where no response was lost; a
    # lost response whose retry meets another taker's token in its slot leaves the minute one
    # start under its limit, never over.
    assert set(verdicts) <= {STARTED, WAIT} and sum(verdicts.values()) == 72
    assert 20 - lost <= verdicts[STARTED] <= 20
    if lost == 0:
        assert verdicts == Counter({STARTED: 20, WAIT: 52})
    # The gate counts at most its limit and at least the starts it answered: with 20 answered,
    # it holds exactly 20, and a limit one higher lets exactly one more start.
    if verdicts[STARTED] == 20:
        assert takes(store, 1, limit=21, gate=gate) == [STARTED]
        assert takes(store, 1, limit=21, gate=gate) == [WAIT]


def test_no_start_after_a_concurrent_close_returned(store: Store) -> None:
    closed = threading.Event()
    after_close: list[StartVerdict] = []
    done = threading.Event()

    def taker() -> None:
        minute = T0
        while not done.is_set():
            seen = closed.is_set()  # read before the take: the close had returned by then
            verdict = store.take_start(ID, gate=None, minute=minute, limit=1000)
            if seen:
                after_close.append(verdict)
                if len(after_close) >= 5:
                    return

    workers = [threading.Thread(target=taker) for _ in range(3)]
    for w in workers:
        w.start()
    store.close_starts(ID, "aborted")
    closed.set()
    for w in workers:
        w.join(timeout=60)
    done.set()
    assert after_close and set(after_close) == {CLOSED}


@pytest.mark.moto
def test_a_start_whose_response_was_lost_is_counted_once(
    adversarial_resources: AwsResources, adversarial_emulator: EmulatorServer
) -> None:
    adversary = adversarial_emulator.adversary
    assert adversary is not None
    adversary.configure(AdversaryConfig())  # no random faults: only the scripted one
    store = DynamoDBStore(adversarial_resources.clients().dynamodb(), adversarial_resources.table)
    assert takes(store, 1, limit=2) == [STARTED]
    adversary.script(Fault(op="UpdateItem", kind="lose_response", pk_prefix="INST#"))
    assert takes(store, 1, limit=2) == [STARTED]  # landed; its retry refused, read as ours
    assert adversary.stats()["lost_response"] == 1
    assert takes(store, 1, limit=2) == [WAIT]  # counted once: 2, not 3
    assert takes(store, 1, limit=3) == [STARTED]


@pytest.mark.moto
def test_the_gate_item_expires_and_sits_beside_the_instances_counter(
    aws_resources: AwsResources,
) -> None:
    store = DynamoDBStore(aws_resources.clients().dynamodb(), aws_resources.table)
    takes(store, 1, limit=2)
    store.close_starts("fw@2026-11-29T12:30Z", "aborted")
    client = aws_resources.clients().dynamodb()
    for instance_id in (ID, "fw@2026-11-29T12:30Z"):
        key = {"pk": {"S": f"INST#{instance_id}"}, "sk": {"S": "GATE"}}
        item = client.get_item(TableName=aws_resources.table, Key=key)["Item"]
        assert int(item["expires_at"]["N"]) > T0.timestamp()
    shared = {"pk": {"S": "GATE#acme#fw"}, "sk": {"S": "GATE"}}
    takes(store, 1, limit=2, gate="acme#fw")
    assert "Item" in client.get_item(TableName=aws_resources.table, Key=shared)


# -- seats sold in order (`take_seat`: a tenant's instances per minute) -----------------------


def seats(store: Store, n: int, *, limit: int, minute=T0, gate: str = "quota#acme#instances"):
    return [store.take_seat(gate, minute=minute, limit=limit) for _ in range(n)]


def test_seats_are_sold_in_order_and_a_later_caller_queues_behind_the_earlier(
    store: Store,
) -> None:
    assert seats(store, 5, limit=2) == [T0, T0, T0 + M, T0 + M, T0 + 2 * M]
    # a caller in the next minute comes after those waiting, not before them
    assert seats(store, 2, limit=2, minute=T0 + M) == [T0 + 2 * M, T0 + 3 * M]
    # once the sold minutes are past, the current minute again
    assert seats(store, 1, limit=2, minute=T0 + 10 * M) == [T0 + 10 * M]
    # another tenant's gate is its own
    assert seats(store, 1, limit=2, gate="quota#globex#instances") == [T0]


def test_concurrent_callers_never_put_more_than_the_limit_in_a_minute(store: Store) -> None:
    got: list[object] = []
    lock = threading.Lock()

    def take() -> None:
        for _ in range(3):  # contention past the store's rounds: the caller tries again later
            try:
                seat = store.take_seat("quota#acme#instances", minute=T0, limit=3)
            except StoreContendedError:
                continue
            with lock:
                got.append(seat)
            return

    threads = [threading.Thread(target=take) for _ in range(14)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    per_minute = Counter(got)
    assert len(got) == 14 and max(per_minute.values()) <= 3, per_minute  # never over
    # contiguous minutes from the first: 5, or 6 if a lost response's retry sold a seat twice
    # (the adversarial backend loses some; its token slot matched another's, 1 in 16)
    assert sorted(per_minute) == [T0 + n * M for n in range(len(per_minute))], per_minute
    assert len(per_minute) in (5, 6), per_minute


@pytest.mark.moto
def test_a_seat_whose_response_was_lost_is_sold_once(aws_resources: AwsResources) -> None:
    """The seat's write reached DynamoDB and its answer was lost: botocore sends it again, the
    retry is refused and reads its own token: the seat it sold is answered, not sold twice."""
    plain = DynamoDBStore(aws_resources.clients().dynamodb(), aws_resources.table)
    assert seats(plain, 1, limit=2) == [T0]
    clients = aws_resources.new_clients()
    lost = LostResponse(operation="UpdateItem", marker="quota#acme#instances")
    lost.install(clients)
    store = DynamoDBStore(clients.dynamodb(), aws_resources.table)
    assert seats(store, 1, limit=2) == [T0]  # the minute's second seat, answered after a retry
    assert lost.landed == 1
    assert seats(store, 1, limit=2) == [T0 + M]  # sold once: the minute holds two
