"""Durable follow-ups: a death anywhere between an instance's end and its last follow-up
loses nothing and wedges nothing, on the fake and on moto server.

The parent task holds its task while it runs (blocking `discard`), fails one of its two shards
(so its end owes an alert) and has a dependent. A fault hook raises `Died` (a BaseException,
as a process death: no `except Exception` sees it) at one point between the final write and
the last follow-up. After the next sweep the hold is released, the dependent decided, the
alert published exactly once, and the next firing of the parent runs rather than being
skipped "blocked by" a finished instance.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from datetime import date, timedelta

import pytest

from iotsched import bootstrap
from iotsched.adapters.alerting import DedupAlertSink
from iotsched.adapters.dynamodb.alerts import DynamoDBAlertLog
from iotsched.clock import ManualClock
from iotsched.core.alert_message import Alert
from iotsched.core.instance_record import InstanceStatus
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.execution.batch import run_shard
from iotsched.services.execution.completion import finalize
from iotsched.services.execution.outcomes import Delivery
from iotsched.services.execution.sweep import sweep
from iotsched.services.scheduling.send import shard_messages
from iotsched.services.scheduling.tick import dispatch_tick
from iotsched.services.wiring import Wiring
from tests.support import T0, TEST_INDEX_BUCKETS, AwsResources, task

PARENT = "parent@2026-11-29T12:00Z"
NEXT_PARENT = "parent@2026-11-29T13:00Z"
CHILD = "child@2026-11-28T00:00Z~after"
ALERT_ID = f"{PARENT}#failed"
S = timedelta(seconds=1)

#: Every point between the final write and the last follow-up, in the order they are met.
POINTS = [
    "ended",
    "alert_done",
    "alert_settled",
    "release_done",
    "release_settled",
    "dependents_done",
    "dependents_settled",
]


class Died(BaseException):
    """The process died here."""


class DieAt:
    """Faults: die once at `point` of the parent's end (the next process has no such fault)."""

    def __init__(self, point: str | None) -> None:
        self.point = point
        self.met: list[str] = []

    def after_claim(self, instance_id: str) -> None:
        """No death after claims."""

    def at(self, point: str, instance_id: str) -> None:
        if instance_id != PARENT:
            return
        self.met.append(point)
        if point == self.point:
            self.point = None
            raise Died(f"died at {point} of {instance_id}")


class CountingSink:
    """The alert topic: every publish that reached it."""

    def __init__(self) -> None:
        self.published: list[Alert] = []

    def publish(self, alert: Alert) -> None:
        self.published.append(alert)


@dataclasses.dataclass
class Wired:
    services: Wiring
    clock: ManualClock
    faults: DieAt
    published: list[Alert]


@pytest.fixture(params=["memory", pytest.param("moto", marks=pytest.mark.moto)])
def wired(request: pytest.FixtureRequest) -> Iterator[Wired]:
    clock = ManualClock(T0 + 5 * S)
    faults = DieAt(None)
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
                "parent",
                blocking={"policy": "discard"},
                retry={"max_attempts": 1},
                params={"fail": [1]},
                sharding={"strategy": "static", "shards": [{"n": 0}, {"n": 1}]},
            ),
            task("child", trigger={"after": ["parent"]}),
        ],
        services.tasks,
        now=T0 - timedelta(hours=1),
    )
    yield Wired(services, clock, faults, published)


def run_parent_to_its_end(w: Wired) -> None:
    """Fire the parent and run both shards; the second's completion finalizes it."""
    report = dispatch_tick(T0, w.services)
    assert report.claimed == [PARENT]
    parent = w.services.instances.get_instance(PARENT)
    assert parent is not None
    for message in shard_messages(parent):
        w.clock.advance(S)
        try:
            run_shard(
                Delivery(body=message.model_dump_json(), receipt_handle="rh"),
                w.services,
                worker="w",
            )
        except Died:
            raise
        except Exception:  # shard 1 fails by design; its record says so
            pass


def assert_nothing_lost(w: Wired, *, then_fire: bool = True) -> None:
    parent = w.services.instances.get_instance(PARENT)
    assert parent is not None
    assert parent.status is InstanceStatus.FAILED
    assert parent.owed == []
    assert w.services.instances.owing_instances() == []
    task = w.services.tasks.get_task("parent")
    # the hold was released (and taken by the next firing, if it ran)
    assert task is not None and task.active == (None if then_fire else NEXT_PARENT)
    child = w.services.instances.get_instance(CHILD)
    assert child is not None, "the dependent was never decided"
    assert (child.status, child.reason) == (
        InstanceStatus.SKIPPED,
        "upstream_failed: parent failed",
    )
    assert child.business_date == date(2026, 11, 28)
    assert [a.alert_id for a in w.published if a.alert_id == ALERT_ID] == [ALERT_ID]
    if not then_fire:
        return
    # The next firing runs: it is not skipped "blocked by" the finished instance.
    w.clock.set(T0 + timedelta(hours=1) + 5 * S)
    report = dispatch_tick(T0 + timedelta(hours=1), w.services)
    assert report.claimed == [NEXT_PARENT], report.as_dict()


def test_without_a_death_every_point_is_met_in_order(wired: Wired) -> None:
    run_parent_to_its_end(wired)
    # the starts' own points (tests/contract/test_start_fence.py) come first, then the end's
    assert [p for p in wired.faults.met if not p.startswith("start_")] == POINTS
    assert_nothing_lost(wired)


@pytest.mark.load
@pytest.mark.parametrize("point", POINTS)
def test_a_death_at_any_point_after_the_end_is_repaired_by_the_next_sweep(
    wired: Wired, point: str
) -> None:
    wired.faults.point = point
    with pytest.raises(Died):
        run_parent_to_its_end(wired)
    parent = wired.services.instances.get_instance(PARENT)
    assert parent is not None and parent.status is InstanceStatus.FAILED
    if point != "dependents_settled":
        assert parent.owed, "a follow-up was left undone with nothing recording it"
    wired.clock.advance(timedelta(minutes=1))
    sweep(wired.services, requeue_after_s=1800)
    assert_nothing_lost(wired)


def test_the_next_firing_repairs_a_dead_enders_hold_at_once(wired: Wired) -> None:
    """No sweep in between: the next claim finds the holder ended and owing, and repairs it."""
    wired.faults.point = "ended"
    with pytest.raises(Died):
        run_parent_to_its_end(wired)
    wired.clock.set(T0 + timedelta(hours=1) + 5 * S)
    report = dispatch_tick(T0 + timedelta(hours=1), wired.services)
    assert report.claimed == [NEXT_PARENT], report.as_dict()
    assert_nothing_lost(wired, then_fire=False)


def test_a_finalizer_that_finds_the_instance_owing_does_the_follow_ups(wired: Wired) -> None:
    wired.faults.point = "alert_done"
    with pytest.raises(Died):
        run_parent_to_its_end(wired)
    assert finalize(PARENT, wired.services) is None  # a late duplicate completion's finalize
    assert_nothing_lost(wired)


def test_a_release_that_gives_up_keeps_its_mark_and_the_others_go_on(wired: Wired) -> None:
    blocking = wired.services.blocking

    class Contended:
        calls = 0

        def __getattr__(self, name: str) -> object:
            return getattr(blocking, name)

        def release_task(self, task_id: str, instance_id: str) -> str | None:
            Contended.calls += 1
            if Contended.calls == 1:
                raise RuntimeError("could not release: too much contention")
            return blocking.release_task(task_id, instance_id)

    wired.services = dataclasses.replace(wired.services, blocking=Contended())  # type: ignore[arg-type]
    run_parent_to_its_end(wired)
    parent = wired.services.instances.get_instance(PARENT)
    assert parent is not None and [step.value for step in parent.owed] == ["release"]
    assert wired.services.instances.get_instance(CHILD) is not None  # dependents went on
    wired.clock.advance(timedelta(minutes=1))
    assert sweep(wired.services, requeue_after_s=1800).followed_up == [PARENT]
    assert_nothing_lost(wired)
