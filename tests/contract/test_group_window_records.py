"""An instance whose windows come from its device groups, claimed and read back on every store:
the per-group window (no cron of its own) and each shard's resolved window in its bounds
survive the store's encoding, so a worker reading the instance decides on the same window."""

from __future__ import annotations

from iotsched.adapters.memory.devices import MemoryDeviceDirectory
from iotsched.core.decisions import Firing
from iotsched.core.group_windows import shard_window
from iotsched.core.instance_record import (
    InstanceStatus,
    TriggerKind,
)
from iotsched.services.scheduling.build import build_instance
from tests.contract.conftest import Store
from tests.iot.support import GROUPS, TENANTS
from tests.support import T0, task, task_record


def test_per_group_windows_round_trip(store: Store) -> None:
    definition = task(
        "fw",
        sharding={"strategy": "groups", "source": "device_directory"},
        window={"group_attribute": "maintenance_window", "on_close": "cancel"},
    )
    built = build_instance(
        task_record(definition, next_fire=T0),
        Firing(slot=T0, kind=TriggerKind.SCHEDULED, status=InstanceStatus.PLANNING),
        claimed_at=T0,
        dispatch_lease_s=60,
        directory=MemoryDeviceDirectory(TENANTS, GROUPS[:1] + GROUPS[2:]),
    )
    assert built.status is InstanceStatus.PLANNING, built.reason
    assert store.claim_instance(built) is None
    stored = store.get_instance(built.instance_id)
    assert stored is not None
    assert stored.window == built.window
    assert stored.window is not None and stored.window.cron is None
    assert list(stored.plan.all_bounds()) == list(built.plan.all_bounds())
    windows = [shard_window(stored.window, b) for b in stored.plan.all_bounds()]
    assert [(w.cron, w.duration, w.timezone, w.on_close) for w in windows if w] == [
        ("0 2 * * *", "2h", "Asia/Shanghai", "cancel"),
        ("0 2 * * *", "2h", "UTC", "cancel"),
    ]
