"""An instance's end fences its shard starts at the lease, on every store: an abort, a cancel or
a timeout that lands at any step of a shard's start (after the worker read the instance, after
it took the tenant's slot, after its gate counted the start, after it took the lease) leaves the
handler unrun, the shard not succeeded, and the tenant's slot free.

The fleet task has every start step: a rollout rate (the gate counts the start and holds the
fence), an abort criterion, and a tenant cap (a slot). A fault hook ends the instance at one
step of the first shard's start, as another process would in that instant.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from datetime import timedelta

import pytest

from iotsched import bootstrap
from iotsched.clock import ManualClock
from iotsched.core.abort import AbortFigures
from iotsched.core.instance_record import InstanceStatus
from iotsched.core.quotas import TenantQuotas
from iotsched.core.shard_record import ShardStatus
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.execution.abort import abort_instance
from iotsched.services.execution.batch import ShardBatch
from iotsched.services.execution.outcomes import Delivery, PendingShard
from iotsched.services.execution.sweep import sweep
from iotsched.services.operations.actions import cancel_instance
from iotsched.services.scheduling.send import shard_messages
from iotsched.services.scheduling.tick import dispatch_tick
from iotsched.services.wiring import Wiring
from tests.support import T0, AwsResources, Timers, task

FLEET = "fleet@2026-11-29T12:00Z"
S = timedelta(seconds=1)

#: The steps of a start, in the order a worker meets them.
STEPS = ["start_read", "start_slot", "start_counted", "start_leased"]
ENDS = ["aborted", "cancelled", "timed_out"]


class EndAt:
    """Faults: at `point` of the fleet instance's start, run `end` once (another process)."""

    def __init__(self) -> None:
        self.point: str | None = None
        self.end: Callable[[], None] = lambda: None
        self.met: list[str] = []
        self.target = FLEET

    def after_claim(self, instance_id: str) -> None:
        """Nothing after claims."""

    def at(self, point: str, instance_id: str) -> None:
        if instance_id != self.target:
            return
        self.met.append(point)
        if point == self.point:
            self.point = None
            self.end()


@dataclasses.dataclass
class Wired:
    services: Wiring
    clock: ManualClock
    faults: EndAt


@pytest.fixture(
    params=[
        "memory",
        pytest.param("moto", marks=pytest.mark.moto),
        pytest.param("adversarial", marks=[pytest.mark.moto, pytest.mark.adversarial]),
    ]
)
def wired(request: pytest.FixtureRequest) -> Iterator[Wired]:
    clock = ManualClock(T0 + 5 * S)
    faults = EndAt()
    if request.param == "memory":
        services = bootstrap.build_memory(clock=clock)
    else:
        fixture = "adversarial_resources" if request.param == "adversarial" else "aws_resources"
        aws: AwsResources = request.getfixturevalue(fixture)
        services = bootstrap.build(aws.settings, clock=clock, clients=aws.clients())
    services = dataclasses.replace(services, faults=faults)
    apply_tasks(
        [
            task(
                "fleet",
                tenant="acme",
                retry={"max_attempts": 1},
                sharding={"strategy": "static", "shards": [{"n": i} for i in range(4)]},
                rollout={"max_shards_per_minute": 100},
                abort={"failure_percent": 50, "min_executed": 2},
            )
        ],
        services.tasks,
        now=T0 - timedelta(hours=1),
    )
    assert services.tasks.set_task_quotas("fleet", TenantQuotas(max_concurrent_shards=2))
    yield Wired(services, clock, faults)


def ending(w: Wired, end: str, target: str = FLEET) -> Callable[[], None]:
    """The end `end` of the instance `target`, as the process that decides it does it."""

    def abort() -> None:
        fleet = w.services.instances.get_instance(target)
        assert fleet is not None
        assert fleet.abort is not None
        abort_instance(fleet, AbortFigures(executed=2, failed=2, abort=fleet.abort), w.services)

    def cancel() -> None:
        cancel_instance(target, w.services)

    def time_out() -> None:
        fleet = w.services.instances.get_instance(target)
        assert fleet is not None
        w.clock.set(fleet.deadline + S)
        sweep(w.services)

    return {"aborted": abort, "cancelled": cancel, "timed_out": time_out}[end]


@pytest.mark.parametrize("end", ENDS)
@pytest.mark.parametrize("step", STEPS)
def test_an_end_at_any_step_of_a_start_fences_the_shard_before_its_handler(
    wired: Wired, step: str, end: str
) -> None:
    assert dispatch_tick(T0, wired.services).claimed == [FLEET]
    fleet = wired.services.instances.get_instance(FLEET)
    assert fleet is not None
    first = shard_messages(fleet)[0]
    wired.faults.point, wired.faults.end = step, ending(wired, end)

    batch = ShardBatch(wired.services, worker="w", timer=Timers())
    outcome = batch.run(Delivery(first.model_dump_json(), "rh-0"))
    batch.commit()

    assert step in wired.faults.met and wired.faults.point is None  # the end landed there
    ended = wired.services.instances.get_instance(FLEET)
    assert ended is not None and ended.status is InstanceStatus(end)
    assert not isinstance(outcome, PendingShard), "the handler ran after the instance ended"
    shards = {s.index: s for s in wired.services.instances.list_shards(FLEET)}
    if 0 in shards:
        assert shards[0].status is not ShardStatus.SUCCEEDED
        assert all(a.outcome is None or a.outcome.value != "succeeded" for a in shards[0].attempts)
    # The slot the start took is free again: the tenant's cap is whole.
    now = wired.clock.now()
    held = [
        wired.services.instances.take_tenant_slot(
            "acme", f"probe{n}", cap=2, now=now, until=now + timedelta(minutes=5)
        )
        for n in range(2)
    ]
    assert None not in held, "the ended start kept its tenant slot"
    assert (ended.remaining, ended.failed_shards) == (4, 0)  # the fenced start counted nothing


@pytest.mark.parametrize("end", ENDS)
@pytest.mark.parametrize("step", ["start_read", "start_leased"])
def test_an_abort_only_instance_is_fenced_at_its_lease(wired: Wired, step: str, end: str) -> None:
    """An instance with `abort` alone (no rate, no cap): its start's only steps are the read
    and the lease, and the fence after the lease holds it."""
    guard = "guard@2026-11-29T12:00Z"
    apply_tasks(
        [
            task(
                "guard",
                sharding={"strategy": "static", "shards": [{"n": i} for i in range(3)]},
                abort={"failure_percent": 50, "min_executed": 2},
            )
        ],
        wired.services.tasks,
        now=T0 - timedelta(hours=1),
    )
    assert guard in dispatch_tick(T0, wired.services).claimed
    instance = wired.services.instances.get_instance(guard)
    assert instance is not None
    wired.faults.target = guard
    wired.faults.point, wired.faults.end = step, ending(wired, end, guard)
    batch = ShardBatch(wired.services, worker="w", timer=Timers())
    outcome = batch.run(Delivery(shard_messages(instance)[0].model_dump_json(), "rh-0"))
    batch.commit()
    assert step in wired.faults.met and wired.faults.point is None  # the end landed there
    ended = wired.services.instances.get_instance(guard)
    assert ended is not None and ended.status is InstanceStatus(end)
    assert not isinstance(outcome, PendingShard), "the handler ran after the instance ended"
    assert wired.services.instances.get_shard(guard, 0) is None  # given back: no record
    assert (ended.remaining, ended.failed_shards) == (3, 0)


def test_without_an_end_the_start_meets_every_step_in_order(wired: Wired) -> None:
    assert dispatch_tick(T0, wired.services).claimed == [FLEET]
    fleet = wired.services.instances.get_instance(FLEET)
    assert fleet is not None
    batch = ShardBatch(wired.services, worker="w", timer=Timers())
    outcome = batch.run(Delivery(shard_messages(fleet)[0].model_dump_json(), "rh-0"))
    assert isinstance(outcome, PendingShard)
    assert wired.faults.met == STEPS


class Died(BaseException):
    """The worker's process died here."""


def test_a_lease_left_by_a_start_that_died_before_its_fence_is_ended_once_starts_closed(
    wired: Wired,
) -> None:
    """A worker took the lease and died before reading the fence; the fence closed (a decider
    that died before its end). The message's next delivery finds the starts closed: the lease
    left on the shard is ended `cancelled` once expired (not left running forever, not counted
    as a failure)."""
    assert dispatch_tick(T0, wired.services).claimed == [FLEET]
    fleet = wired.services.instances.get_instance(FLEET)
    assert fleet is not None
    first = shard_messages(fleet)[0]

    def die() -> None:
        raise Died("after the lease")

    wired.faults.point, wired.faults.end = "start_leased", die
    with pytest.raises(Died):
        ShardBatch(wired.services, worker="dead", timer=Timers()).run(
            Delivery(first.model_dump_json(), "rh-0")
        )
    wired.services.instances.close_starts(FLEET, "aborted: the decider died before its end")
    wired.clock.advance(timedelta(minutes=10))  # past the dead worker's lease
    outcome = ShardBatch(wired.services, worker="w2", timer=Timers()).run(
        Delivery(first.model_dump_json(), "rh-1")
    )
    assert outcome is not None and not isinstance(outcome, PendingShard)
    shard = wired.services.instances.get_shard(FLEET, 0)
    assert shard is not None and shard.status is ShardStatus.CANCELLED
    counted = wired.services.instances.get_instance(FLEET)
    assert counted is not None and (counted.remaining, counted.failed_shards) == (3, 0)
