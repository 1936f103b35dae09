"""`sharding: groups`: the dispatcher reads groups from the Device Management System at fire
time and stores their bounds with the instance; later directory changes do not move them."""

from __future__ import annotations

from datetime import timedelta

from iotsched import bootstrap
from iotsched.adapters.memory.devices import MemoryDeviceDirectory
from iotsched.adapters.memory.queues import MemoryShardQueue
from iotsched.clock import ManualClock
from iotsched.core.instance_record import InstanceStatus
from iotsched.ports.devices import (
    DeviceGroup,
    DirectoryError,
)
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.scheduling.tick import dispatch_tick
from tests.iot.support import GROUPS, TENANTS
from tests.support import T0, task

GROUPS_TASK = {
    "trigger": {"rate": "15m"},
    "sharding": {"strategy": "groups", "source": "device_directory"},
}


def test_groups_are_read_at_fire_time_and_stored_with_the_instance() -> None:
    clock = ManualClock(T0 - timedelta(minutes=7))
    directory = MemoryDeviceDirectory(TENANTS, GROUPS)
    services = bootstrap.build_memory(clock=clock, directory=directory)
    apply_tasks([task("scan", tenant="acme", **GROUPS_TASK)], services.tasks, now=clock.now())
    clock.set(T0)
    dispatch_tick(T0, services)
    (first,) = services.instances.list_instances(task_id="scan")
    assert first.plan.count == 2  # acme's groups only (the task's tenant)
    assert list(first.plan.all_bounds()) == [g.bounds() for g in GROUPS[:2]]
    sent = services.queue
    assert isinstance(sent, MemoryShardQueue)
    assert [m.bounds["group"] for m in sent.sent] == ["north", "south"]

    # A group added afterwards changes the next instance, never the stored one.
    directory.put_groups([DeviceGroup("acme", "east", "dev-002000", "dev-002100")])
    clock.set(T0 + timedelta(minutes=15))
    dispatch_tick(T0 + timedelta(minutes=15), services)
    latest, stored = services.instances.list_instances(task_id="scan")
    assert latest.plan.count == 3
    assert stored.instance_id == first.instance_id and stored.plan == first.plan


def test_every_tenants_groups_when_the_task_names_no_tenant() -> None:
    clock = ManualClock(T0 - timedelta(minutes=7))
    services = bootstrap.build_memory(clock=clock, directory=MemoryDeviceDirectory(TENANTS, GROUPS))
    apply_tasks([task("all", **GROUPS_TASK)], services.tasks, now=clock.now())
    dispatch_tick(T0, services)
    (instance,) = services.instances.list_instances(task_id="all")
    assert [b["tenant"] for b in instance.plan.all_bounds()] == ["acme", "acme", "globex"]


class _Down(MemoryDeviceDirectory):
    def groups(self, tenant: str | None = None) -> list[DeviceGroup]:
        raise DirectoryError("connection refused")


def test_no_directory_or_a_failing_one_fails_the_instance_with_the_reason() -> None:
    for directory, reason in ((None, "needs a device directory"), (_Down(), "did not answer")):
        clock = ManualClock(T0 - timedelta(minutes=7))
        services = bootstrap.build_memory(clock=clock, directory=directory)
        apply_tasks([task("g", **GROUPS_TASK)], services.tasks, now=clock.now())
        dispatch_tick(T0, services)
        (instance,) = services.instances.list_instances(task_id="g")
        assert instance.status is InstanceStatus.FAILED
        assert instance.reason is not None and reason in instance.reason


def test_a_directory_with_no_groups_fails_planning() -> None:
    clock = ManualClock(T0 - timedelta(minutes=7))
    services = bootstrap.build_memory(clock=clock, directory=MemoryDeviceDirectory(TENANTS))
    apply_tasks([task("g", **GROUPS_TASK)], services.tasks, now=clock.now())
    dispatch_tick(T0, services)
    (instance,) = services.instances.list_instances(task_id="g")
    assert instance.status is InstanceStatus.FAILED
    assert "found no groups" in (instance.reason or "")
