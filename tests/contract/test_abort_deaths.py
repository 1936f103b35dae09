"""An abort survives a death anywhere between its fence and its last follow-up, on the fake and
on moto server; and concurrent deciders end the instance once, on every store.

The fleet task (4 shards, one attempt each, `abort: {failure_percent: 50, min_executed: 2,
action: pause}`) has a dependent. A worker batch runs its first two shards, both failing: the
commit decides. A fault hook raises `Died` (a BaseException, as a process death) at one point
of the abort. After the next sweep: the instance is `aborted` once, its starts closed, exactly
one `instance_aborted` alert reached the topic, the task is paused with the note, the
dependent is skipped, and nothing is owed.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from iotsched import bootstrap
from iotsched.adapters.alerting import DedupAlertSink
from iotsched.adapters.dynamodb.alerts import DynamoDBAlertLog
from iotsched.clock import ManualClock
from iotsched.core.abort import decide_abort
from iotsched.core.alert_message import Alert
from iotsched.core.instance_record import InstanceStatus
from iotsched.core.shard_message import ShardMessage
from iotsched.core.task_fleet_safety import Abort
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.execution.abort import abort_instance
from iotsched.services.execution.batch import ShardBatch
from iotsched.services.execution.outcomes import Delivery
from iotsched.services.execution.sweep import sweep
from iotsched.services.scheduling.send import shard_messages
from iotsched.services.scheduling.tick import dispatch_tick
from iotsched.services.wiring import Wiring
from tests.contract.conftest import Store
from tests.support import T0, TEST_INDEX_BUCKETS, AwsResources, instance, task

FLEET = "fleet@2026-11-29T12:00Z"
CHILD = "child@2026-11-28T00:00Z~after"
ALERT_ID = f"{FLEET}#aborted"
REASON = "2 of 2 ended shards failed (100%): at or above 50% after at least 2"
S = timedelta(seconds=1)

#: Every point between the fence and the last follow-up, in the order they are met.
POINTS = [
    "starts_closed",
    "ended",
    "alert_done",
    "alert_settled",
    "pause_done",
    "pause_settled",
    "dependents_done",
    "dependents_settled",
]


class Died(BaseException):
    """The process died here."""


class DieAt:
    """Faults: die once at `point` of the fleet instance (the next process has no such fault)."""

    def __init__(self) -> None:
        self.point: str | None = None
        self.met: list[str] = []

    def after_claim(self, instance_id: str) -> None:
        """No death after claims."""

    def at(self, point: str, instance_id: str) -> None:
        if instance_id != FLEET:
            return
        self.met.append(point)
        if point == self.point:
            self.point = None
            raise Died(f"died at {point}")


class CountingSink:
    """The alert topic: every publish that reached it."""

    def __init__(self) -> None:
        self.published: list[Alert] = []

    def publish(self, alert: Alert) -> None:
        self.published.append(alert)


class Timers:
    """A batch timer nobody fires: the test commits."""

    def __call__(self, delay_s: float, call: Any) -> Any:
        return self

    def cancel(self) -> None:
        """Nothing scheduled."""


@dataclasses.dataclass
class Wired:
    services: Wiring
    clock: ManualClock
    faults: DieAt
    published: list[Alert]


@pytest.fixture(params=["memory", pytest.param("moto", marks=pytest.mark.moto)])
def wired(request: pytest.FixtureRequest) -> Iterator[Wired]:
    clock = ManualClock(T0 + 5 * S)
    faults = DieAt()
    if request.param == "memory":
        services = bootstrap.build_memory(clock=clock)
        published: list[Alert] = services.alerts.published  # type: ignore[attr-defined]
    else:
        aws: AwsResources = request.getfixturevalue("aws_resources")
        services = bootstrap.build(aws.settings, clock=clock, clients=aws.clients())
        topic = CountingSink()
        sink = DedupAlertSink(
            DynamoDBAlertLog(aws.clients().dynamodb(), aws.table, buckets=TEST_INDEX_BUCKETS),
            topic,
            clock,
        )
        services = dataclasses.replace(services, alerts=sink, alert_log=sink)
        published = topic.published
    services = dataclasses.replace(services, faults=faults)
    apply_tasks(
        [
            task(
                "fleet",
                retry={"max_attempts": 1},
                params={"fail": [0, 1]},
                sharding={"strategy": "static", "shards": [{"n": i} for i in range(4)]},
                abort={"failure_percent": 50, "min_executed": 2, "action": "pause"},
            ),
            task("child", trigger={"after": ["fleet"]}),
        ],
        services.tasks,
        now=T0 - timedelta(hours=1),
    )
    yield Wired(services, clock, faults, published)


def fleet_messages(w: Wired) -> list[ShardMessage]:
    assert dispatch_tick(T0, w.services).claimed == [FLEET]
    fleet = w.services.instances.get_instance(FLEET)
    assert fleet is not None
    return shard_messages(fleet)


def run_two_failing_shards(w: Wired, messages: list[ShardMessage]) -> None:
    batch = ShardBatch(w.services, worker="w", timer=Timers())
    for m in messages[:2]:
        batch.run(Delivery(m.model_dump_json(), f"rh-{m.shard}"))
    batch.commit()


def assert_aborted_once(w: Wired) -> None:
    fleet = w.services.instances.get_instance(FLEET)
    assert fleet is not None
    assert (fleet.status, fleet.reason, fleet.owed) == (InstanceStatus.ABORTED, REASON, [])
    assert w.services.instances.owing_instances() == []
    assert w.services.instances.open_instances() == []
    assert w.services.instances.starts_closed(FLEET)
    assert [a.alert_id for a in w.published if a.type == "instance_aborted"] == [ALERT_ID]
    stored = w.services.tasks.get_task("fleet")
    assert stored is not None and stored.paused
    assert stored.pause_note == f"aborted {FLEET}: {REASON}"
    child = w.services.instances.get_instance(CHILD)
    assert child is not None
    assert (child.status, child.reason) == (
        InstanceStatus.SKIPPED,
        "upstream_failed: fleet aborted",
    )


def test_without_a_death_every_point_is_met_in_order(wired: Wired) -> None:
    run_two_failing_shards(wired, fleet_messages(wired))
    # the starts' own points (tests/contract/test_start_fence.py) come first, then the abort's
    assert [p for p in wired.faults.met if not p.startswith("start_")] == POINTS
    assert_aborted_once(wired)


@pytest.mark.load
@pytest.mark.parametrize("point", POINTS)
def test_a_death_at_any_point_of_an_abort_is_repaired_by_the_next_sweep(
    wired: Wired, point: str
) -> None:
    messages = fleet_messages(wired)
    wired.faults.point = point
    with pytest.raises(Died):
        run_two_failing_shards(wired, messages)
    fleet = wired.services.instances.get_instance(FLEET)
    assert fleet is not None
    if point == "starts_closed":
        assert fleet.status is InstanceStatus.RUNNING  # fenced, not ended yet
    else:
        assert fleet.status is InstanceStatus.ABORTED
        if point != "dependents_settled":
            assert fleet.owed, "a follow-up was left undone with nothing recording it"
    wired.clock.advance(timedelta(minutes=1))
    sweep(wired.services, requeue_after_s=1800)
    assert_aborted_once(wired)
    # a second sweep changes nothing
    wired.clock.advance(timedelta(minutes=1))
    sweep(wired.services, requeue_after_s=1800)
    assert_aborted_once(wired)


def test_concurrent_deciders_end_the_instance_once_on_every_store(store: Store) -> None:
    """Eight deciders that read the same counts: every one closes the gate (idempotent), one
    end lands; the others are told it had ended."""
    clock = ManualClock(T0 + 5 * S)
    services = dataclasses.replace(bootstrap.build_memory(clock=clock), instances=store)
    record = instance("fleet", shards=10, status=InstanceStatus.RUNNING).model_copy(
        update={"abort": Abort(failure_percent=20, min_executed=5)}
    )
    assert store.claim_instance(record) is None
    read = record.model_copy(update={"remaining": 5, "failed_shards": 2})
    figures = decide_abort(read)
    assert figures is not None
    barrier = threading.Barrier(8)
    won: list[bool] = []

    def decide() -> None:
        barrier.wait()
        won.append(abort_instance(read, figures, services))

    threads = [threading.Thread(target=decide) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(won) == [False] * 7 + [True]
    ended = store.get_instance(record.instance_id)
    assert ended is not None and ended.status is InstanceStatus.ABORTED
    assert ended.reason == "2 of 5 ended shards failed (40%): at or above 20% after at least 5"
    assert store.starts_closed(record.instance_id)
    alerts = [a for a in services.alerts.published if a.type == "instance_aborted"]  # type: ignore[attr-defined]
    assert len(alerts) == 1
