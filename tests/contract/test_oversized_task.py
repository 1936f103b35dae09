"""One oversized task never stops a tick: a `groups` task with 4,100 groups (a plan too large
for an instance item) is refused at claim with one `instance_plan_too_large` alert naming the
limit, and a task whose claim DynamoDB refuses is isolated: its page-mates fire, in the
one-by-one path and in the batched one (fake and moto server)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError

from iotsched import bootstrap
from iotsched.adapters.memory.devices import MemoryDeviceDirectory
from iotsched.clock import ManualClock
from iotsched.core.instance_record import (
    InstanceRecord,
    InstanceStatus,
)
from iotsched.core.sharding import MAX_PLAN_BYTES
from iotsched.ports.devices import (
    DeviceGroup,
    Tenant,
)
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.scheduling.tick import dispatch_tick
from iotsched.services.wiring import Wiring
from tests.support import T0, AwsResources, task

EVERY_15 = {"rate": "15m"}
BIG = "big@2026-11-29T12:00Z"
MATES = [f"mate-{n:02d}" for n in range(12)]


def many_groups(count: int) -> list[DeviceGroup]:
    return [
        DeviceGroup("acme", f"building-{n:05d}", f"dev-{n * 100:07d}", f"dev-{(n + 1) * 100:07d}")
        for n in range(count)
    ]


@pytest.fixture(params=["memory", pytest.param("moto", marks=pytest.mark.moto)])
def services(request: pytest.FixtureRequest) -> Wiring:
    clock = ManualClock(T0 + timedelta(seconds=3))
    directory = MemoryDeviceDirectory([Tenant("acme")], many_groups(4100))
    if request.param == "memory":
        return bootstrap.build_memory(clock=clock, directory=directory)
    aws: AwsResources = request.getfixturevalue("aws_resources")
    built = bootstrap.build(aws.settings, clock=clock, clients=aws.clients())
    return dataclasses.replace(built, directory=directory)


def apply(services: Wiring, mates: list[str]) -> None:
    definitions = [
        task("big", tenant="acme", trigger=EVERY_15, sharding={"strategy": "groups"}),
        *(task(m, trigger=EVERY_15) for m in mates),
    ]
    apply_tasks(definitions, services.tasks, now=T0 - timedelta(minutes=7))


@pytest.mark.load
@pytest.mark.parametrize("mates", [MATES[:2], MATES], ids=["one-by-one", "batched"])
def test_a_plan_too_large_is_refused_at_claim_with_one_alert_and_mates_fire(
    services: Wiring, mates: list[str]
) -> None:
    apply(services, mates)
    report = dispatch_tick(T0, services)
    assert sorted(report.claimed) == [f"{m}@2026-11-29T12:00Z" for m in mates]
    assert report.failed == [BIG]
    big = services.instances.get_instance(BIG)
    assert big is not None and big.status is InstanceStatus.FAILED
    assert big.reason is not None and big.reason.startswith("instance_plan_too_large: 4100 shards")
    assert f"{MAX_PLAN_BYTES:,} bytes" in big.reason
    (alert,) = [a for a in services.alert_log.recent() if a.task_id == "big"]
    assert (alert.type, alert.instance_id) == ("instance_plan_too_large", BIG)
    assert "400 KB" in (alert.reason or "")
    # The refusal is the task's record for that slot: its clock moved on with the others.
    for task_id in ["big", *mates]:
        stored = services.tasks.get_task(task_id)
        assert stored is not None and stored.next_fire == T0 + timedelta(minutes=15)


class RefusesBig:
    """The store, except that DynamoDB refuses the claim of task `big` (as an item over 400 KB
    or any ValidationException): alone it raises; in a batched transaction it drops the whole
    transaction, page-mates included."""

    def __init__(self, store: Any) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    @staticmethod
    def _refused() -> ClientError:
        return ClientError(
            {
                "Error": {
                    "Code": "ValidationException",
                    "Message": "Item size has exceeded the maximum allowed size",
                }
            },
            "PutItem",
        )

    def claim_instance(self, instance: InstanceRecord) -> InstanceRecord | None:
        if instance.task_id == "big":
            raise self._refused()
        result: InstanceRecord | None = self._store.claim_instance(instance)
        return result

    def claim_instances(self, groups: Sequence[Sequence[InstanceRecord]]) -> list[bool]:
        if any(i.task_id == "big" for group in groups for i in group):
            return [False] * len(groups)
        result: list[bool] = self._store.claim_instances(groups)
        return result


@pytest.mark.load
@pytest.mark.parametrize("mates", [MATES[:2], MATES], ids=["one-by-one", "batched"])
def test_a_refused_claim_never_holds_back_its_mates_and_alerts_once(
    services: Wiring, mates: list[str]
) -> None:
    apply(services, mates)
    services = dataclasses.replace(
        services,
        instances=RefusesBig(services.instances),  # type: ignore[arg-type]
        directory=MemoryDeviceDirectory([Tenant("acme")], many_groups(3)),
    )
    for minute in (0, 1):  # the refused task stays due; the next tick tries it again
        services.clock.set(T0 + timedelta(minutes=minute, seconds=3))  # type: ignore[attr-defined]
        # The tick ends in the error once every other task went (the invocation is retried).
        with pytest.raises(ClientError, match="ValidationException"):
            dispatch_tick(T0 + timedelta(minutes=minute), services)
        for m in mates:
            mate = services.instances.get_instance(f"{m}@2026-11-29T12:00Z")
            assert mate is not None and mate.status is InstanceStatus.RUNNING
            stored_mate = services.tasks.get_task(m)
            assert stored_mate is not None and stored_mate.next_fire == T0 + timedelta(minutes=15)
    assert services.instances.get_instance(BIG) is None
    alerts = [a for a in services.alert_log.recent() if a.task_id == "big"]
    assert [(a.type, a.alert_id) for a in alerts] == [
        ("task_dispatch_failed", f"{BIG}#dispatch_failed")
    ]
    assert "ValidationException" in (alerts[0].reason or "")
    stored = services.tasks.get_task("big")
    assert stored is not None and stored.next_fire == T0
