"""A task's hold never stays with an instance that has ended: a releaser that died after passing
the hold to a queued instance that had ended meanwhile (cancelled while it waited) is repaired
by whoever does the ended holder's owed release next (memory and moto)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from datetime import timedelta

import pytest

from iotsched import bootstrap
from iotsched.clock import ManualClock
from iotsched.core.instance_record import (
    FollowUp,
    InstanceStatus,
)
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.execution.sweep import sweep
from iotsched.services.operations.actions import cancel_instance
from iotsched.services.scheduling.tick import dispatch_tick
from iotsched.services.wiring import Wiring
from tests.support import T0, AwsResources, task

HOUR = timedelta(hours=1)
S = timedelta(seconds=1)
FIRST, SECOND, THIRD = (f"s@2026-11-29T{h}:00Z" for h in (12, 13, 14))


@dataclasses.dataclass
class Wired:
    services: Wiring
    clock: ManualClock


@pytest.fixture(params=["memory", pytest.param("moto", marks=pytest.mark.moto)])
def wired(request: pytest.FixtureRequest) -> Iterator[Wired]:
    clock = ManualClock(T0 + 5 * S)
    if request.param == "memory":
        services = bootstrap.build_memory(clock=clock)
    else:
        aws: AwsResources = request.getfixturevalue("aws_resources")
        services = bootstrap.build(aws.settings, clock=clock, clients=aws.clients())
    apply_tasks(
        [task("s", blocking={"policy": "serial", "max_queued": 2}, instance_timeout_s=86_400)],
        services.tasks,
        now=T0 - HOUR,
    )
    yield Wired(services, clock)


def test_a_hold_passed_to_an_ended_queued_instance_moves_on_to_the_next(wired: Wired) -> None:
    services, clock = wired.services, wired.clock
    for n in range(3):  # the first runs and holds the task; the next two queue behind it
        clock.set(T0 + n * HOUR + 5 * S)
        dispatch_tick(T0 + n * HOUR, services)
    held = services.tasks.get_task("s")
    assert held is not None and (held.active, held.queue) == (FIRST, [SECOND, THIRD])
    cancel_instance(SECOND, services)  # it ends while it waits (its own release: a no-op)
    # The holder ends; its ender passes the hold to the head of the queue and dies there,
    # before finding that instance ended and passing the hold on again.
    assert services.instances.end_instance(
        FIRST,
        status=InstanceStatus.CANCELLED,
        reason="test",
        finished_at=clock.now(),
        owed=[FollowUp.RELEASE, FollowUp.DEPENDENTS],
    )
    assert services.blocking.release_task("s", FIRST) == SECOND
    clock.advance(timedelta(minutes=1))
    sweep(services, requeue_after_s=1800)  # the holder's release is still owed
    now_held = services.tasks.get_task("s")
    assert now_held is not None and now_held.active == THIRD
    third = services.instances.get_instance(THIRD)
    assert third is not None and third.status is not InstanceStatus.QUEUED
    assert services.instances.owing_instances() == []
