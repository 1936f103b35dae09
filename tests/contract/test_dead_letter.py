"""The DLQ path, on every backend: the dead letter's one write closes a running attempt `lost`,
and a death anywhere in the DLQ handler loses neither the shard's alert nor the instance's end.

The store's part (`dead_letter_shard`) runs on the contract suite's stores, and against a
writer racing it between its read of the shard and its transaction (another worker's lease,
the shard's own completion). The handler's part (`handle_dead_letter`) dies between the shard's
end and its alert, or between the alert and the instance's finalize, then its message is
delivered again, as SQS does when a record handler fails.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest

from iotsched import bootstrap
from iotsched.adapters.alerting import DedupAlertSink
from iotsched.adapters.dynamodb import DynamoDBStore
from iotsched.adapters.dynamodb.alerts import DynamoDBAlertLog
from iotsched.adapters.memory.store import MemoryStore
from iotsched.clock import ManualClock
from iotsched.core.alert_message import Alert
from iotsched.core.attempt_record import (
    LOST_ERROR,
    AttemptOutcome,
)
from iotsched.core.instance_record import InstanceStatus
from iotsched.core.shard_message import ShardMessage
from iotsched.core.shard_record import ShardStatus
from iotsched.ports.shards import StaleAttemptError
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.execution.dead_letters import handle_dead_letter
from iotsched.services.scheduling.send import shard_messages
from iotsched.services.scheduling.tick import dispatch_tick
from iotsched.services.wiring import Wiring
from tests.contract.conftest import Store
from tests.contract.test_store import MAX, claimed, current, ended, lease, shard_of
from tests.support import T0, TEST_INDEX_BUCKETS, AwsResources, task

S = timedelta(seconds=1)
DEAD = "dead_lettered"


def dead_letter(store: Store, inst_id: str, index: int = 0, *, at: Any = None) -> Any:
    return store.dead_letter_shard(
        inst_id, index, bounds={"n": index}, max_attempts=MAX, error=DEAD, now=at or T0 + 30 * S
    )


# -- the store: one write ends the shard and closes its running attempt --------------------------


def test_a_running_attempt_is_closed_lost_in_the_dead_letters_write(store: Store) -> None:
    inst = claimed(store, shards=2)
    taken = lease(store, inst, 0, for_s=600).shard  # a live lease: its worker may still run
    result = dead_letter(store, inst.instance_id, at=T0 + 30 * S)
    assert result is not None and (result.remaining, result.failed_shards) == (1, 1)
    shard = shard_of(store, inst)
    assert (shard.status, shard.error, shard.attempt, shard.lease_until) == (
        ShardStatus.FAILED,
        DEAD,
        1,
        None,
    )
    (attempt,) = shard.attempts
    assert (attempt.outcome, attempt.ended_at, attempt.duration_ms, attempt.error) == (
        AttemptOutcome.LOST,
        T0 + 30 * S,
        30_000,
        DEAD,
    )
    assert (attempt.worker, attempt.started_at) == ("w1", T0)
    assert store.get_shard(inst.instance_id, 0) == shard
    # The worker that held it cannot end it again, nor is it anyone's expired lease.
    with pytest.raises(StaleAttemptError):
        store.complete_shard(
            inst.instance_id,
            0,
            status=ShardStatus.SUCCEEDED,
            attempt=ended(taken, at=T0 + 40 * S, outcome="succeeded"),
        )
    assert store.expired_leases(T0 + 9999 * S) == []
    assert dead_letter(store, inst.instance_id) is None  # a duplicate: nothing changes
    assert shard_of(store, inst) == shard
    assert (current(store, inst).remaining, current(store, inst).failed_shards) == (1, 1)


def test_after_a_takeover_only_the_running_attempt_is_closed(store: Store) -> None:
    inst = claimed(store, shards=1)
    lease(store, inst, 0, for_s=10)
    lease(store, inst, 0, worker="w2", at=T0 + 20 * S, for_s=600)  # attempt 1 lost at T0+20s
    assert dead_letter(store, inst.instance_id, at=T0 + 50 * S) is not None
    first, second = shard_of(store, inst).attempts
    assert (first.outcome, first.ended_at, first.error) == (
        AttemptOutcome.LOST,
        T0 + 20 * S,
        LOST_ERROR,
    )
    assert (second.worker, second.outcome, second.ended_at, second.error) == (
        "w2",
        AttemptOutcome.LOST,
        T0 + 50 * S,
        DEAD,
    )


def test_a_pending_shard_keeps_its_ended_attempts_as_they_were(store: Store) -> None:
    inst = claimed(store, shards=1)
    taken = lease(store, inst, 0).shard
    failed = ended(taken, at=T0 + 2 * S, outcome="failed", error="boom")
    store.release_shard(inst.instance_id, 0, attempt=failed)
    assert dead_letter(store, inst.instance_id) is not None
    shard = shard_of(store, inst)
    assert (shard.status, shard.error) == (ShardStatus.FAILED, DEAD)
    assert shard.attempts == [failed]
    assert current(store, inst).remaining == 0


def test_a_shard_never_started_ends_with_no_attempt(store: Store) -> None:
    inst = claimed(store, shards=1)
    assert store.get_shard(inst.instance_id, 0) is None
    assert dead_letter(store, inst.instance_id) is not None
    shard = shard_of(store, inst)
    assert (shard.status, shard.attempt, shard.attempts, shard.bounds) == (
        ShardStatus.FAILED,
        0,
        [],
        {"n": 0},
    )


# -- the store, raced between its read and its write ---------------------------------------------


@dataclasses.dataclass
class Race:
    """A store whose next transaction runs `before` first, through another writer."""

    store: Store
    other: Store
    before: list[Callable[[], object]]


@pytest.fixture(params=["memory", pytest.param("dynamodb", marks=pytest.mark.moto)])
def race(request: pytest.FixtureRequest) -> Race:
    before: list[Callable[[], object]] = []

    def run_before() -> None:
        while before:
            before.pop(0)()

    if request.param == "memory":
        memory = MemoryStore()

        def hook(_operation: str, _actions: int) -> None:
            run_before()

        memory.fault_hook = hook
        return Race(memory, memory, before)
    aws: AwsResources = request.getfixturevalue("aws_resources")
    client = aws.new_clients().dynamodb()
    client.meta.events.register("before-call.dynamodb.TransactWriteItems", lambda **_: run_before())
    racing: Any = DynamoDBStore(client, aws.table, buckets=TEST_INDEX_BUCKETS)
    return Race(
        racing,
        DynamoDBStore(aws.clients().dynamodb(), aws.table, buckets=TEST_INDEX_BUCKETS),
        before,
    )


def test_a_lease_taken_after_the_read_is_the_attempt_closed(race: Race) -> None:
    """Read pending; another worker takes attempt 2 before the write: the write is refused,
    the shard read again, and attempt 2 is the one closed `lost`."""
    inst = claimed(race.other, shards=2)
    taken = lease(race.other, inst, 0).shard
    failed = ended(taken, at=T0 + 2 * S, outcome="failed", error="boom")
    race.other.release_shard(inst.instance_id, 0, attempt=failed)
    race.before.append(lambda: lease(race.other, inst, 0, worker="w2", at=T0 + 10 * S, for_s=600))
    result = dead_letter(race.store, inst.instance_id, at=T0 + 30 * S)
    assert not race.before
    assert result is not None and (result.remaining, result.failed_shards) == (1, 1)
    shard = shard_of(race.other, inst)
    assert (shard.status, shard.attempt) == (ShardStatus.FAILED, 2)
    first, second = shard.attempts
    assert first == failed
    assert (second.worker, second.outcome, second.ended_at) == (
        "w2",
        AttemptOutcome.LOST,
        T0 + 30 * S,
    )


def test_a_shard_that_ended_after_the_read_is_left_as_it_ended(race: Race) -> None:
    inst = claimed(race.other, shards=2)
    taken = lease(race.other, inst, 0).shard
    done = ended(taken, at=T0 + 5 * S, outcome="succeeded")
    race.before.append(
        lambda: race.other.complete_shard(
            inst.instance_id, 0, status=ShardStatus.SUCCEEDED, attempt=done
        )
    )
    assert dead_letter(race.store, inst.instance_id) is None
    assert not race.before
    shard = shard_of(race.other, inst)
    assert (shard.status, shard.attempts) == (ShardStatus.SUCCEEDED, [done])
    assert (current(race.other, inst).remaining, current(race.other, inst).failed_shards) == (1, 0)


# -- the handler: a death between the shard's end, its alert and the finalize -------------------

IID = "dlq@2026-11-29T12:00Z"
ALERT_ID = f"{IID}#0#{DEAD}"


class Died(BaseException):
    """The process died here."""


class DieAt:
    """Faults: die once at `point` of the instance's DLQ handling."""

    def __init__(self) -> None:
        self.point: str | None = None

    def after_claim(self, instance_id: str) -> None:
        """No death after claims."""

    def at(self, point: str, instance_id: str) -> None:
        if point == self.point and instance_id == IID:
            self.point = None
            raise Died(f"died at {point}")


class DyingSink:
    """The alert sink as the handler calls it; dies once, before or after delegating."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.die: str | None = None  # "before" the alert is recorded, "after" it went out

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def publish(self, alert: Alert) -> None:
        if self.die == "before" and alert.type == "shard_dead_lettered":
            self.die = None
            raise Died("died before the alert")
        self.inner.publish(alert)
        if self.die == "after" and alert.type == "shard_dead_lettered":
            self.die = None
            raise Died("died after the alert")


class CountingSink:
    """The alert topic: every publish that reached it."""

    def __init__(self) -> None:
        self.published: list[Alert] = []

    def publish(self, alert: Alert) -> None:
        self.published.append(alert)


@dataclasses.dataclass
class Wired:
    services: Wiring
    faults: DieAt
    sink: DyingSink
    published: list[Alert]


@pytest.fixture(params=["memory", pytest.param("moto", marks=pytest.mark.moto)])
def wired(request: pytest.FixtureRequest) -> Iterator[Wired]:
    clock = ManualClock(T0 + 5 * S)
    if request.param == "memory":
        services = bootstrap.build_memory(clock=clock)
        inner: Any = services.alerts
        published: list[Alert] = inner.published
    else:
        aws: AwsResources = request.getfixturevalue("aws_resources")
        services = bootstrap.build(aws.settings, clock=clock, clients=aws.clients())
        topic = CountingSink()
        inner = DedupAlertSink(
            DynamoDBAlertLog(aws.clients().dynamodb(), aws.table, buckets=TEST_INDEX_BUCKETS),
            topic,
            clock,
        )
        published = topic.published
    faults, sink = DieAt(), DyingSink(inner)
    services = dataclasses.replace(services, alerts=sink, alert_log=inner, faults=faults)
    apply_tasks(
        [
            task(
                "dlq",
                retry={"max_attempts": 2},
                sharding={"strategy": "static", "shards": [{"n": 0}]},
            )
        ],
        services.tasks,
        now=T0 - timedelta(hours=1),
    )
    yield Wired(services, faults, sink, published)


def fire_and_lease(w: Wired) -> ShardMessage:
    """Fire the one-shard instance and let a worker take its shard (and then hang)."""
    assert dispatch_tick(T0, w.services).claimed == [IID]
    inst = w.services.instances.get_instance(IID)
    assert inst is not None
    (message,) = shard_messages(inst)
    now = w.services.clock.now()
    assert w.services.instances.take_lease(
        IID,
        0,
        bounds=message.bounds,
        worker="hung",
        now=now,
        lease_until=now + 60 * S,
        max_attempts=2,
    ).taken
    return message


DEATHS = [
    ("faults", "dead_lettered"),
    ("faults", "dead_letter_alerted"),
    ("sink", "before"),
    ("sink", "after"),
]


@pytest.mark.parametrize(("how", "where"), DEATHS, ids=[f"{h}-{w}" for h, w in DEATHS])
def test_a_death_in_the_dlq_handler_loses_no_alert_and_no_end(
    wired: Wired, how: str, where: str
) -> None:
    body = fire_and_lease(wired).model_dump_json()
    if how == "faults":
        wired.faults.point = where
    else:
        wired.sink.die = where
    with pytest.raises(Died):
        handle_dead_letter(body, wired.services)
    shard = wired.services.instances.get_shard(IID, 0)
    assert shard is not None and (shard.status, shard.error) == (ShardStatus.FAILED, DEAD)
    inst = wired.services.instances.get_instance(IID)
    assert inst is not None and inst.remaining == 0 and not inst.status.final

    # SQS delivers the DLQ message again (the record handler raised), then once more.
    assert handle_dead_letter(body, wired.services) == "already_final"
    assert handle_dead_letter(body, wired.services) == "already_final"

    assert [a.alert_id for a in wired.published if a.type == "shard_dead_lettered"] == [ALERT_ID]
    inst = wired.services.instances.get_instance(IID)
    assert inst is not None
    assert (inst.status, inst.failed_shards, inst.owed) == (InstanceStatus.FAILED, 1, [])
    assert [a.type for a in wired.published if a.instance_id == IID] == [
        "shard_dead_lettered",
        "instance_failed",
    ]
    (attempt,) = shard.attempts
    assert attempt.outcome is AttemptOutcome.LOST


def test_without_a_death_the_handler_ends_alerts_and_finalizes_once(wired: Wired) -> None:
    body = fire_and_lease(wired).model_dump_json()
    assert handle_dead_letter(body, wired.services) == DEAD
    assert handle_dead_letter(body, wired.services) == "already_final"
    assert [a.type for a in wired.published if a.instance_id == IID] == [
        "shard_dead_lettered",
        "instance_failed",
    ]
    inst = wired.services.instances.get_instance(IID)
    assert inst is not None and inst.status is InstanceStatus.FAILED


def test_a_shard_that_failed_in_its_worker_is_not_alerted_as_dead_lettered(wired: Wired) -> None:
    """The redelivery path re-alerts only a shard the DLQ handler ended."""
    message = fire_and_lease(wired)
    shard = wired.services.instances.get_shard(IID, 0)
    assert shard is not None
    wired.services.instances.complete_shard(
        IID,
        0,
        status=ShardStatus.FAILED,
        attempt=ended(shard, at=T0 + 9 * S, outcome="failed", error="boom"),
        error="boom",
    )
    published = len(wired.published)
    assert handle_dead_letter(message.model_dump_json(), wired.services) == "already_final"
    assert [a.type for a in wired.published[published:]] == ["instance_failed"]
