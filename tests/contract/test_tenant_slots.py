"""A tenant's in-flight slots (`InstanceStore.take_tenant_slot`, `release_tenant_slot`) on every
store: never more than the cap held at once, whatever the concurrency, faults and lost
responses; a released slot and a dead holder's (its lease ended) are free again."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from botocore.exceptions import ConnectionClosedError

from iotsched.adapters.dynamodb import DynamoDBStore
from iotsched.adapters.dynamodb import slots as dynamodb_slots
from iotsched.adversary.schedule import (
    AdversaryConfig,
    Fault,
)
from iotsched.local.emulator import EmulatorServer
from tests.contract.conftest import Store
from tests.support import T0, TEST_INDEX_BUCKETS, AwsResources

S = timedelta(seconds=1)
LEASE = T0 + 60 * S


def take(store: Store, holder: str, *, cap: int, now=T0, until=LEASE, tenant="acme") -> int | None:
    return store.take_tenant_slot(tenant, holder, cap=cap, now=now, until=until)


def test_a_tenant_holds_at_most_its_cap_and_a_release_frees_a_slot(store: Store) -> None:
    taken = [take(store, f"i@1#{n}", cap=3) for n in range(5)]
    assert sorted(s for s in taken[:3] if s is not None) == [0, 1, 2]
    assert taken[3:] == [None, None]
    store.release_tenant_slot("acme", taken[1] or 0, "i@1#1")
    assert take(store, "i@1#5", cap=3) == taken[1]
    assert take(store, "i@1#6", cap=3) is None


def test_tenants_have_their_own_slots(store: Store) -> None:
    assert take(store, "a#0", cap=1) is not None
    assert take(store, "b#0", cap=1, tenant="globex") is not None
    assert take(store, "a#1", cap=1) is None


def test_a_release_by_another_holder_or_twice_changes_nothing(store: Store) -> None:
    slot = take(store, "i#0", cap=1)
    assert slot == 0
    store.release_tenant_slot("acme", 0, "someone-else")
    assert take(store, "i#1", cap=1) is None
    store.release_tenant_slot("acme", 0, "i#0")
    store.release_tenant_slot("acme", 0, "i#0")  # a retried release: harmless
    assert take(store, "i#2", cap=1) == 0
    store.release_tenant_slot("acme", 0, "i#0")  # a late release of the old holder
    assert take(store, "i#3", cap=1) is None  # i#2 still holds it


def test_a_dead_holders_slot_comes_back_when_its_lease_ends(store: Store) -> None:
    assert take(store, "dead#0", cap=1, until=T0 + 30 * S) == 0
    assert take(store, "next#0", cap=1, now=T0 + 29 * S) is None
    assert take(store, "next#0", cap=1, now=T0 + 30 * S, until=T0 + 90 * S) == 0
    # The dead holder's release, should it come after all, leaves the new holder's slot.
    store.release_tenant_slot("acme", 0, "dead#0")
    assert take(store, "third#0", cap=1, now=T0 + 31 * S) is None


def test_takers_start_from_a_slot_of_their_own(store: Store) -> None:
    # Holders hashing to different slots take different slots first, not all slot 0.
    slots = {take(store, f"inst@2026-11-29T12:00Z#{n}", cap=50) for n in range(10)}
    assert len(slots) == 10 and slots != set(range(10))


def test_a_lowered_cap_counts_the_slots_still_held(store: Store) -> None:
    held = [take(store, f"i#{n}", cap=4) for n in range(4)]
    assert None not in held
    assert take(store, "i#5", cap=2) is None  # four held, the cap is now two
    for n, slot in enumerate(held[:3]):
        assert slot is not None
        store.release_tenant_slot("acme", slot, f"i#{n}")
    assert take(store, "i#6", cap=2) is not None  # one held: one more under the cap of two
    assert take(store, "i#7", cap=2) is None


def hammer(store: Store, cap: int, *, threads: int = 8, rounds: int = 5) -> None:
    """`threads` takers, side by side, each taking and releasing `rounds` times: never more
    than `cap` held at once, and every slot free again at the end."""
    lock = threading.Lock()
    holding: set[str] = set()
    most = 0
    errors: list[BaseException] = []
    go = threading.Barrier(threads)

    def worker(n: int) -> None:
        nonlocal most
        go.wait()
        try:
            for r in range(rounds):
                holder = f"w{n}#{r}"
                slot = take(store, holder, cap=cap)
                if slot is None:
                    continue
                with lock:
                    holding.add(holder)
                    most = max(most, len(holding))
                with lock:
                    holding.discard(holder)
                store.release_tenant_slot("acme", slot, holder)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    workers = [threading.Thread(target=worker, args=(n,)) for n in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not errors
    assert 1 <= most <= cap
    # Every slot was released: the whole cap is free again.
    assert [take(store, f"after#{n}", cap=cap) is not None for n in range(cap + 1)] == [
        True
    ] * cap + [False]


def test_concurrent_takers_never_hold_more_than_the_cap(store: Store) -> None:
    hammer(store, 4)


@pytest.fixture
def groups_of_two(monkeypatch: pytest.MonkeyPatch) -> None:
    """Slots in groups of two: a cap of 7 spans four partitions (the memory store has none)."""
    monkeypatch.setattr(dynamodb_slots, "SLOTS_PER_GROUP", 2)


@pytest.mark.usefixtures("groups_of_two")
def test_a_cap_over_many_groups_holds_exactly_the_cap(store: Store) -> None:
    taken = [take(store, f"i@1#{n}", cap=7) for n in range(7)]
    assert sorted(s for s in taken if s is not None) == list(range(7))
    assert take(store, "i@1#7", cap=7) is None
    # Free one in a group of its own: the next taker finds it, whichever group it starts at.
    freed = 3
    store.release_tenant_slot("acme", freed, f"i@1#{taken.index(freed)}")
    assert take(store, "i@1#8", cap=7) == freed
    assert take(store, "i@1#9", cap=7) is None
    # The holders' leases end (they died): every group's slots come back, the cap whole.
    later = [take(store, f"j#{n}", cap=7, now=LEASE, until=LEASE + 60 * S) for n in range(8)]
    assert sorted(s for s in later if s is not None) == list(range(7)) and later[7] is None


@pytest.mark.usefixtures("groups_of_two")
def test_concurrent_takers_over_many_groups_never_hold_more_than_the_cap(store: Store) -> None:
    hammer(store, 5, threads=10)


def dynamodb_store(aws: AwsResources) -> DynamoDBStore:
    return DynamoDBStore(aws.clients().dynamodb(), aws.table, buckets=TEST_INDEX_BUCKETS)


class CountingQueries:
    """A DynamoDB client that counts its Query calls, by partition key."""

    def __init__(self, client: object) -> None:
        self._client = client
        self.queries: list[str] = []

    def query(self, **kwargs: object) -> object:
        values: Any = kwargs["ExpressionAttributeValues"]
        self.queries.append(values[":pk"]["S"])
        return self._client.query(**kwargs)  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> object:
        return getattr(self._client, name)


@pytest.mark.moto
@pytest.mark.usefixtures("groups_of_two")
def test_each_group_is_a_partition_and_a_take_reads_one_while_it_has_room(
    aws_resources: AwsResources,
) -> None:
    store = dynamodb_store(aws_resources)
    counting = CountingQueries(store._ddb)  # type: ignore[attr-defined]
    store._ddb = counting  # type: ignore[attr-defined]
    first = take(store, "i#0", cap=5)
    assert first is not None and len(counting.queries) == 1  # its own group had room
    for n in range(1, 5):
        assert take(store, f"i#{n}", cap=5) is not None
    counting.queries.clear()
    assert take(store, "i#5", cap=5) is None  # at the cap: every group read, once
    assert sorted(counting.queries) == ["TENANT#acme", "TENANT#acme#S1", "TENANT#acme#S2"]
    items = aws_resources.clients().dynamodb().scan(TableName=aws_resources.table)["Items"]
    where = {
        int(i["sk"]["S"].removeprefix("SLOT#")): i["pk"]["S"]
        for i in items
        if i["sk"]["S"].startswith("SLOT#")
    }
    assert where == {
        0: "TENANT#acme",
        1: "TENANT#acme",
        2: "TENANT#acme#S1",
        3: "TENANT#acme#S1",
        4: "TENANT#acme#S2",
    }
    # An extension and a release find a slot in its group's partition.
    owner = next(i["holder"]["S"] for i in items if i["sk"]["S"] == "SLOT#0004")
    assert store.extend_tenant_slot("acme", 4, owner, until=LEASE + 60 * S)
    store.release_tenant_slot("acme", 4, owner)
    assert take(store, "i#6", cap=5) == 4


def test_concurrent_takers_of_a_full_tenant_take_exactly_the_free_slots(store: Store) -> None:
    cap = 6
    results: list[int | None] = []
    lock = threading.Lock()
    go = threading.Barrier(12)

    def taker(n: int) -> None:
        go.wait()
        slot = take(store, f"t{n}#0", cap=cap)
        with lock:
            results.append(slot)

    workers = [threading.Thread(target=taker, args=(n,)) for n in range(12)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    taken = [s for s in results if s is not None]
    # Never two holders on one slot, never past the cap. A taker may find every slot it tried
    # taken by the others (its query saw them free) and give up: the cap is a ceiling.
    assert len(taken) == len(set(taken)) <= cap
    assert len(taken) >= 1


@pytest.mark.moto
def test_a_take_whose_response_was_lost_is_taken_once(
    adversarial_resources: AwsResources, adversarial_emulator: EmulatorServer
) -> None:
    adversary = adversarial_emulator.adversary
    assert adversary is not None
    adversary.configure(AdversaryConfig())  # no random faults: only the scripted one
    store = DynamoDBStore(
        adversarial_resources.clients().dynamodb(),
        adversarial_resources.table,
        buckets=TEST_INDEX_BUCKETS,
    )
    adversary.script(Fault(op="PutItem", kind="lose_response", pk_prefix="TENANT#"))
    slot = store.take_tenant_slot("acme", "lost#0", cap=2, now=T0, until=LEASE)
    assert slot is not None  # landed; its retry refused, read as ours
    assert adversary.stats()["lost_response"] == 1
    other = store.take_tenant_slot("acme", "other#0", cap=2, now=T0, until=LEASE)
    assert other is not None and other != slot
    assert store.take_tenant_slot("acme", "third#0", cap=2, now=T0, until=LEASE) is None
    # A lost release: the retried one finds no holder, and the slot is free.
    adversary.script(Fault(op="UpdateItem", kind="lose_response", pk_prefix="TENANT#"))
    store.release_tenant_slot("acme", slot, "lost#0")
    assert adversary.stats()["lost_response"] == 2
    assert store.take_tenant_slot("acme", "fourth#0", cap=2, now=T0, until=LEASE) == slot


@pytest.mark.moto
def test_the_slot_items_expire_after_their_lease(aws_resources: AwsResources) -> None:
    store = DynamoDBStore(
        aws_resources.clients().dynamodb(), aws_resources.table, buckets=TEST_INDEX_BUCKETS
    )
    slot = store.take_tenant_slot("acme", "i#0", cap=3, now=T0, until=LEASE)
    assert slot is not None
    client = aws_resources.clients().dynamodb()
    key = {"pk": {"S": "TENANT#acme"}, "sk": {"S": f"SLOT#{slot:04d}"}}
    item = client.get_item(TableName=aws_resources.table, Key=key)["Item"]
    assert item["holder"]["S"] == "i#0"
    assert int(item["expires_at"]["N"]) > LEASE.timestamp()


def test_a_holder_extends_its_slot_and_no_one_else_can(store: Store) -> None:
    assert take(store, "long#0", cap=1, until=T0 + 30 * S) == 0
    assert store.extend_tenant_slot("acme", 0, "long#0", until=T0 + 90 * S)
    assert store.extend_tenant_slot("acme", 0, "long#0", until=T0 + 90 * S)  # again: the same
    assert take(store, "next#0", cap=1, now=T0 + 60 * S) is None  # still held past 30 s
    assert not store.extend_tenant_slot("acme", 0, "other", until=T0 + 500 * S)
    assert take(store, "next#0", cap=1, now=T0 + 90 * S, until=T0 + 200 * S) == 0
    # The old holder, its lease ended and the slot taken, extends nothing.
    assert not store.extend_tenant_slot("acme", 0, "long#0", until=T0 + 500 * S)
    assert take(store, "third#0", cap=1, now=T0 + 199 * S) is None


class LandsThenRaises:
    """A DynamoDB client whose next PutItem of a slot lands, then raises as a connection reset
    after DynamoDB applied it would (botocore's retries spent); then `fail_releases` more
    requests raise before reaching DynamoDB."""

    def __init__(self, client: object, *, fail_releases: int = 0) -> None:
        self._client = client
        self.armed = True
        self.fail_releases = fail_releases

    def put_item(self, **kwargs: object) -> object:
        answer = self._client.put_item(**kwargs)  # type: ignore[attr-defined]
        if self.armed and str(kwargs["Key" if "Key" in kwargs else "Item"]).find("SLOT#") >= 0:
            self.armed = False
            raise ConnectionClosedError(endpoint_url="https://dynamodb")
        return answer

    def update_item(self, **kwargs: object) -> object:
        if self.fail_releases:
            self.fail_releases -= 1
            raise ConnectionClosedError(endpoint_url="https://dynamodb")
        return self._client.update_item(**kwargs)  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> object:
        return getattr(self._client, name)


@pytest.mark.parametrize(
    "backend",
    [
        pytest.param("aws_resources", marks=pytest.mark.moto),
        pytest.param("adversarial_resources", marks=[pytest.mark.moto, pytest.mark.adversarial]),
    ],
)
def test_a_slot_take_that_landed_but_raised_leaves_no_slot_held(
    request: pytest.FixtureRequest, backend: str
) -> None:
    """The put of a slot reached DynamoDB, its answer did not: the take raises, and the slot it
    wrote is released on the way out (its holder named), so the tenant's cap is whole at once,
    not when the slot's lease ends."""
    aws: AwsResources = request.getfixturevalue(backend)
    store = DynamoDBStore(aws.clients().dynamodb(), aws.table, buckets=TEST_INDEX_BUCKETS)
    flaky = LandsThenRaises(store._ddb)  # type: ignore[attr-defined]
    store._ddb = flaky  # type: ignore[attr-defined]
    with pytest.raises(ConnectionClosedError):
        take(store, "lost#0", cap=1)
    assert not flaky.armed  # the put landed, then raised
    assert take(store, "next#0", cap=1) == 0


@pytest.mark.moto
def test_a_landed_take_whose_release_fails_too_is_freed_by_its_lease(
    aws_resources: AwsResources,
) -> None:
    """Neither the answer nor the release got through: the slot is held until its lease ends,
    never longer (the bound the release shortens)."""
    store = DynamoDBStore(
        aws_resources.clients().dynamodb(), aws_resources.table, buckets=TEST_INDEX_BUCKETS
    )
    flaky = LandsThenRaises(store._ddb, fail_releases=1)  # type: ignore[attr-defined]
    store._ddb = flaky  # type: ignore[attr-defined]
    with pytest.raises(ConnectionClosedError):
        take(store, "lost#0", cap=1)
    assert take(store, "next#0", cap=1, now=LEASE - S) is None
    assert take(store, "next#0", cap=1, now=LEASE, until=LEASE + 60 * S) == 0


def test_a_tenants_line_keeps_its_places_in_order_once_each(store: Store) -> None:
    expires = T0 + timedelta(days=30)
    assert store.tenant_line_head("acme") is None
    for place in ("1#2026-11-29T12:05:00.000Z#b", "1#2026-11-29T12:00:00.000Z#a", "2#x#c"):
        store.join_tenant_line("acme", place, expires=expires)
    store.join_tenant_line("acme", "1#2026-11-29T12:00:00.000Z#a", expires=expires)  # again
    assert store.tenant_line_head("globex") is None  # each tenant its own line
    assert store.tenant_line_head("acme") == "1#2026-11-29T12:00:00.000Z#a"
    store.join_tenant_line("acme", "0#2026-11-29T12:10:00.000Z#h", expires=expires)
    assert store.tenant_line_head("acme") == "0#2026-11-29T12:10:00.000Z#h"  # high goes first
    for place in ("0#2026-11-29T12:10:00.000Z#h", "1#2026-11-29T12:00:00.000Z#a"):
        store.leave_tenant_line("acme", place)
        store.leave_tenant_line("acme", place)  # a retried leave: harmless
    assert store.tenant_line_head("acme") == "1#2026-11-29T12:05:00.000Z#b"
    # The line shares the tenant's partition with its slots: neither reads the other.
    assert take(store, "i#0", cap=1) == 0
    assert store.tenant_line_head("acme") == "1#2026-11-29T12:05:00.000Z#b"


@pytest.mark.moto
@pytest.mark.usefixtures("groups_of_two")
def test_a_refused_take_of_a_large_cap_reads_a_few_groups_not_all(
    aws_resources: AwsResources,
) -> None:
    store = dynamodb_store(aws_resources)
    cap = 2 * (dynamodb_slots.GROUPS_READ + 2)  # more groups than one take reads
    # Takers whose groups are full wait, though others have room: enough takers fill them all.
    held = {take(store, f"i#{n}", cap=cap) for n in range(20 * cap)} - {None}
    assert held == set(range(cap))
    counting = CountingQueries(store._ddb)  # type: ignore[attr-defined]
    store._ddb = counting  # type: ignore[attr-defined]
    assert take(store, "late#0", cap=cap) is None
    assert len(counting.queries) == len(set(counting.queries)) == dynamodb_slots.GROUPS_READ


@pytest.mark.usefixtures("groups_of_two")
def test_a_lowered_cap_beside_an_earlier_instances_never_holds_past_the_larger(
    store: Store,
) -> None:
    """An instance keeps the cap of its claim: one claimed at 6 holds slots in three groups of
    two, one claimed after the cap went down to 2 reads only the first group. The tenant never
    holds more than the larger cap, and the lower cap's takes stay below it."""
    held = {n: take(store, f"old#{n}", cap=6) for n in range(40)}
    old = {n: slot for n, slot in held.items() if slot is not None}
    assert sorted(old.values()) == list(range(6))
    for n, slot in old.items():
        if slot in (0, 1):
            store.release_tenant_slot("acme", slot, f"old#{n}")
    new = [take(store, f"new#{n}", cap=2) for n in range(5)]
    taken = [s for s in new if s is not None]
    assert all(s < 2 for s in taken)
    assert 4 + len(taken) <= 6
