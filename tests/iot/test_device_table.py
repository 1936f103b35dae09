"""The devices table adapter: what another process writes between a read and a mark."""

from __future__ import annotations

import pytest

from iotsched.adapters.devices import DynamoDBDeviceDirectory
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
