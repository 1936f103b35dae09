"""Windows per device group on the local runtime: the dispatcher reads the groups and their
`maintenance_window` attributes from the devices table (moto) at the claim, real worker
processes decide each shard's start on its own group's window with their own (wall) clocks:
the group whose window is open runs, the one whose window opens hours from now does not."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from iotsched.adapters.aws import AwsClients
from iotsched.adapters.dynamodb.devices import DynamoDBDeviceDirectory
from iotsched.core.instance_record import InstanceStatus
from iotsched.core.shard_record import ShardStatus
from iotsched.local.runtime import LocalRuntime
from iotsched.ports.devices import (
    DeviceGroup,
    Tenant,
)
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.definitions.task_file import parse_task_file
from iotsched.services.wiring import Wiring
from iotsched.tasklib import registry
from tests.support import PATIENCE_S

pytestmark = [pytest.mark.slow, pytest.mark.moto]


def test_each_groups_shard_waits_for_its_own_window_on_real_workers(
    runtime: LocalRuntime, services: Wiring
) -> None:
    directory = services.directory
    assert isinstance(directory, DynamoDBDeviceDirectory)
    later = (datetime.now(UTC).hour + 12) % 24  # the workers' wall clock: closed for hours
    directory.put_tenants([Tenant("gw", "UTC")])
    directory.put_groups(
        [
            DeviceGroup(
                "gw",
                "open",
                "dev-000000",
                "dev-000100",
                attributes={"maintenance_window": {"cron": "* * * * *", "duration": "1h"}},
            ),
            DeviceGroup(
                "gw",
                "closed",
                "dev-000100",
                "dev-000200",
                attributes={"maintenance_window": {"cron": f"0 {later} * * *", "duration": "1h"}},
            ),
        ]
    )
    start = datetime(2026, 2, 2, 9, 58, tzinfo=UTC)
    definitions = parse_task_file(
        {
            "tasks": [
                {
                    "id": "gw-push",
                    "tenant": "gw",
                    "handler": "noop",
                    "trigger": {"rate": "1h"},
                    "sharding": {"strategy": "groups", "source": "device_directory"},
                    "window": {"group_attribute": "maintenance_window"},
                    "instance_timeout_s": 86_400,
                    "timeout_s": 2,
                }
            ]
        },
        handlers=registry(),
    )
    apply_tasks(definitions, services.tasks, now=start)
    instance_id = "gw-push@2026-02-02T10:00Z"
    runtime.tick(datetime(2026, 2, 2, 10, 0, tzinfo=UTC))

    def shard_of(group: str) -> ShardStatus | None:
        for shard in services.instances.list_shards(instance_id):
            if shard.bounds["group"] == group:
                return shard.status
        return None

    assert runtime.wait_for(lambda: shard_of("open") is ShardStatus.SUCCEEDED, PATIENCE_S)
    instance = services.instances.get_instance(instance_id)
    assert instance is not None and instance.status is InstanceStatus.RUNNING
    bounds = {b["group"]: b["window"] for b in instance.plan.all_bounds()}
    assert bounds["closed"] == {"cron": f"0 {later} * * *", "duration": "1h", "timezone": "UTC"}
    # The closed group's message reached a worker and went back delayed (a hop of at most
    # 15 minutes towards its opening): the queue holds it, delayed, and nothing else; no lease,
    # no attempt, no shard record.
    sqs = AwsClients(region="us-east-1", endpoint_url=runtime.endpoint_url).sqs()
    names = [
        "ApproximateNumberOfMessages",
        "ApproximateNumberOfMessagesNotVisible",
        "ApproximateNumberOfMessagesDelayed",
    ]

    def only_the_hop_waits() -> bool:
        found = sqs.get_queue_attributes(
            QueueUrl=runtime.settings().shard_queue_url, AttributeNames=names
        )["Attributes"]
        return [int(found[n]) for n in names] == [0, 0, 1]

    assert runtime.wait_for(only_the_hop_waits, PATIENCE_S)
    assert shard_of("closed") is None
