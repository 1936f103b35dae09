"""The devices table adapter: what another process writes between a read and a mark, group
items as older or other writers left them, and the demo fleet's groups."""

from __future__ import annotations

import pytest

from iotsched.adapters.dynamodb.devices import DynamoDBDeviceDirectory
from iotsched.demo.fleet import (
    MAINTENANCE_WINDOW,
    TENANTS,
    seed_fleet,
)
from tests.iot.support import AS_OF, fleet, iot_resources
from tests.support import AwsResources

pytestmark = pytest.mark.moto


def test_a_device_added_by_another_process_after_a_read_can_be_marked(
    aws_resources: AwsResources,
) -> None:
    iot = iot_resources(aws_resources)
    reader = iot.directory
    writer = DynamoDBDeviceDirectory(iot.resources.ddb, str(iot.resources.device_table))
    block = [d for d in fleet() if d.device_id < "dev-000500"]
    writer.put_devices([d for d in block if d.device_id != "dev-000499"])
    assert len(list(reader.devices("acme", "dev-000000", "dev-000500"))) == 499  # cached ids
    assert reader.mark_offline("acme", "dev-000499", since=AS_OF) is False  # not there yet
    writer.put_devices(block)  # another process adds it
    assert reader.mark_offline("acme", "dev-000499", since=AS_OF) is True
    assert reader.mark_offline("acme", "dev-000499", since=AS_OF) is False


def test_a_group_item_without_timezone_or_with_bad_attributes_reads_plainly(
    aws_resources: AwsResources,
) -> None:
    # Items written before groups had a timezone, or attributes another writer mangled: the
    # read answers UTC and no attributes (a task naming one then fails its plan, saying so),
    # never an error for every task that reads the groups.
    iot = iot_resources(aws_resources, seed=False)
    table = str(iot.resources.device_table)
    for group, attributes in (("old", None), ("list", "[1, 2]"), ("junk", "{not json")):
        item = {
            "pk": {"S": "GROUP#acme"},
            "sk": {"S": group},
            "first_id": {"S": f"dev-{len(group):06d}"},
            "end_id": {"S": f"dev-{len(group) + 1:06d}"},
        }
        if attributes is not None:
            item["attributes"] = {"S": attributes}
        iot.resources.ddb.put_item(TableName=table, Item=item)
    groups = iot.directory.groups("acme")
    assert {g.group: (g.timezone, dict(g.attributes)) for g in groups} == {
        "old": ("UTC", {}),
        "list": ("UTC", {}),
        "junk": ("UTC", {}),
    }


def test_the_demo_fleet_gives_each_group_a_window_in_its_tenants_zone(
    aws_resources: AwsResources,
) -> None:
    iot = iot_resources(aws_resources, seed=False)
    seed_fleet(iot.resources, devices=30, start=AS_OF, days=1, history_days=0)
    zones = {t.tenant_id: t.timezone for t in TENANTS}
    groups = iot.directory.groups()
    assert len(groups) == len(TENANTS)
    for group in groups:
        assert group.timezone == zones[group.tenant]
        assert group.attributes == {"maintenance_window": MAINTENANCE_WINDOW}
    assert MAINTENANCE_WINDOW == {"cron": "0 2 * * *", "duration": "2h"}
