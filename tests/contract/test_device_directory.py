"""The DeviceDirectory contract, on the in-memory fake and on the devices table (moto)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest

from iotsched.adapters.dms_http import HttpDeviceDirectory
from iotsched.adapters.memory.devices import MemoryDeviceDirectory
from iotsched.ports.devices import DeviceDirectory
from tests.iot.dms_server import dms_server
from tests.iot.support import AS_OF, GROUPS, TENANTS, fleet, iot_resources
from tests.support import AwsResources


@pytest.fixture(params=["memory", "http", pytest.param("dynamodb", marks=pytest.mark.moto)])
def directory(request: pytest.FixtureRequest) -> Iterator[DeviceDirectory]:
    """A directory holding TENANTS, GROUPS and the 1,300-device fleet: in memory, behind the
    HTTP adapter (a local REST server over the memory one, pages of 128), or on DynamoDB."""
    if request.param == "memory":
        yield MemoryDeviceDirectory(TENANTS, GROUPS, fleet())
    elif request.param == "http":
        with dms_server(MemoryDeviceDirectory(TENANTS, GROUPS, fleet())) as server:
            yield HttpDeviceDirectory(server.url, timeout_s=5, page_size=128)
    else:
        aws: AwsResources = request.getfixturevalue("aws_resources")
        yield iot_resources(aws).directory


def test_tenants_and_groups_are_listed_in_order(directory: DeviceDirectory) -> None:
    assert [t.tenant_id for t in directory.tenants()] == ["acme", "globex"]
    assert directory.tenants()[0].timezone == "Asia/Shanghai"
    assert directory.groups("acme") == GROUPS[:2]
    assert directory.groups() == GROUPS
    assert directory.groups("nobody") == []
    assert GROUPS[0].bounds() == {
        "tenant": "acme",
        "group": "north",
        "first_id": "dev-000000",
        "end_id": "dev-000600",
    }


def test_groups_carry_their_timezone_and_attributes(directory: DeviceDirectory) -> None:
    north, south, everything = directory.groups()
    assert north.timezone == "Asia/Shanghai"
    assert north.attributes == {
        "maintenance_window": {"cron": "0 2 * * *", "duration": "2h"},
        "site": {"floor": 3, "tags": ["cold"]},
    }
    assert south.timezone == "Asia/Shanghai" and south.attributes == {}
    assert everything.timezone == "Europe/Berlin"
    assert everything.attributes["maintenance_window"]["timezone"] == "UTC"
    # The bounds a plan stores stay the id range: attributes are not copied into every shard.
    assert set(north.bounds()) == {"tenant", "group", "first_id", "end_id"}


def test_devices_by_half_open_id_range(directory: DeviceDirectory) -> None:
    ids = [d.device_id for d in directory.devices("acme", "dev-000498", "dev-000503")]
    assert ids == [f"dev-{n:06d}" for n in range(498, 503)]  # across a block boundary
    whole = list(directory.devices("acme", "dev-000000", "dev-001000"))
    assert len(whole) == 1000 and whole == sorted(whole, key=lambda d: d.device_id)
    assert list(directory.devices("globex", "dev-000000", "dev-001000")) == []
    assert list(directory.devices("acme", "dev-000010", "dev-000010")) == []


def test_device_fields_round_trip(directory: DeviceDirectory) -> None:
    by_id = {d.device_id: d for d in directory.devices("acme", "dev-000000", "dev-000051")}
    assert by_id["dev-000000"].last_heartbeat is None
    assert by_id["dev-000010"].last_heartbeat == AS_OF - timedelta(hours=3)
    assert by_id["dev-000001"].last_heartbeat == AS_OF + timedelta(hours=1)
    assert str(by_id["dev-000025"].plan_expires) == "2026-12-01"
    assert all(d.offline_since is None for d in by_id.values())


def test_mark_offline_once(directory: DeviceDirectory) -> None:
    assert directory.mark_offline("acme", "dev-000010", since=AS_OF) is True
    assert directory.mark_offline("acme", "dev-000010", since=AS_OF + timedelta(hours=1)) is False
    (device,) = directory.devices("acme", "dev-000010", "dev-000011")
    assert device.offline_since == AS_OF  # the first mark stays
    assert directory.mark_offline("acme", "dev-000999", since=AS_OF) is True
    assert directory.mark_offline("globex", "dev-000010", since=AS_OF) is False  # not globex's
    (other,) = directory.devices("acme", "dev-000011", "dev-000012")
    assert other.offline_since is None
