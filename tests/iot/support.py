"""Helpers for the IoT task library tests: the devices table, the data bucket, the reminder
topic on the moto server (as template.yaml declares them), and a small simulated fleet."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from iotsched.adapters.dynamodb.devices import DynamoDBDeviceDirectory
from iotsched.ports.devices import (
    Device,
    DeviceGroup,
    Tenant,
)
from iotsched.tasklib.resources import TaskResources
from tests.support import AwsResources, queue_arn

#: The end of the data interval most IoT tests inspect.
AS_OF = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)

TENANTS = [Tenant("acme", "Asia/Shanghai", "Acme"), Tenant("globex", "Europe/Berlin", "Globex")]
#: A group's maintenance window as the Device Management System keeps it (an attribute).
NIGHTLY = {"cron": "0 2 * * *", "duration": "2h"}
GROUPS = [
    DeviceGroup(
        "acme",
        "north",
        "dev-000000",
        "dev-000600",
        timezone="Asia/Shanghai",
        attributes={"maintenance_window": NIGHTLY, "site": {"floor": 3, "tags": ["cold"]}},
    ),
    DeviceGroup("acme", "south", "dev-000600", "dev-001000", timezone="Asia/Shanghai"),
    DeviceGroup(
        "globex",
        "all",
        "dev-001000",
        "dev-001300",
        timezone="Europe/Berlin",
        attributes={"maintenance_window": {**NIGHTLY, "timezone": "UTC"}},
    ),
]


def fleet() -> list[Device]:
    """1,300 devices: every 10th silent since 3 h before AS_OF, every 50th never reported,
    every 25th with a plan expiring 3 days after AS_OF's date."""
    devices = []
    for n in range(1300):
        tenant = "acme" if n < 1000 else "globex"
        if n % 50 == 0:
            heartbeat = None
        elif n % 10 == 0:
            heartbeat = AS_OF - timedelta(hours=3)
        else:
            heartbeat = AS_OF + timedelta(hours=1)  # kept reporting past the interval
        devices.append(
            Device(
                device_id=f"dev-{n:06d}",
                tenant=tenant,
                last_heartbeat=heartbeat,
                plan_expires=date(2026, 12, 1) if n % 25 == 0 else date(2027, 6, 1),
            )
        )
    return devices


def create_device_table(client: Any, name: str) -> str:
    """The devices table (template.yaml `DeviceTable`: pk/sk, on demand)."""
    client.create_table(
        TableName=name,
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        KeySchema=[
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"},
        ],
    )
    return name


@dataclass
class IotResources:
    """The IoT resources on moto and a tap on the reminder topic."""

    resources: TaskResources
    directory: DynamoDBDeviceDirectory
    reminder_tap_url: str


def iot_resources(aws: AwsResources, *, seed: bool = True) -> IotResources:
    """Create the devices table, bucket (versioned) and reminder topic; seed the fleet."""
    clients = aws.clients()
    ddb, s3, sns, sqs = clients.dynamodb(), clients.s3(), clients.sns(), clients.sqs()
    table = create_device_table(ddb, "iotsched-devices")
    s3.create_bucket(Bucket="iotsched-data")
    s3.put_bucket_versioning(Bucket="iotsched-data", VersioningConfiguration={"Status": "Enabled"})
    topic = sns.create_topic(Name="iotsched-reminders")["TopicArn"]
    tap = sqs.create_queue(QueueName="iotsched-reminders-tap")["QueueUrl"]
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=queue_arn(sqs, tap))
    directory = DynamoDBDeviceDirectory(ddb, table)
    if seed:
        directory.put_tenants(TENANTS)
        directory.put_groups(GROUPS)
        directory.put_devices(fleet())
    resources = TaskResources(
        directory=directory,
        ddb=ddb,
        device_table=table,
        s3=s3,
        bucket="iotsched-data",
        sns=sns,
        reminder_topic_arn=topic,
    )
    return IotResources(resources=resources, directory=directory, reminder_tap_url=tap)
