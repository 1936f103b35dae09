"""The IoT handlers' resources, apart from the handlers themselves.

A handler gets them by `ctx.resource(iot_resources)`: made once per container, from the
settings of the environment, unless the composition root (or a test) provided them already.
This module imports only what they need; the handlers (and `iotsched.tasklib.common`) are
imported when a task names one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from iotsched.adapters.aws import AwsClients
from iotsched.adapters.dynamodb.devices import (
    DynamoDBDeviceDirectory,
    IdFormat,
)
from iotsched.ports.devices import DeviceDirectory
from iotsched.settings import Settings


class MissingResourceError(RuntimeError):
    """A handler needs a resource this deployment does not configure."""


@dataclass
class TaskResources:
    """The outside world of the IoT handlers; any of it may be absent (then unused)."""

    directory: DeviceDirectory | None = None
    ddb: Any = None
    device_table: str | None = None
    s3: Any = None
    bucket: str | None = None
    sns: Any = None
    reminder_topic_arn: str | None = None
    id_format: IdFormat = field(default_factory=IdFormat)

    def need_directory(self) -> DeviceDirectory:
        """The Device Management System, or a clear error."""
        if self.directory is None:
            raise MissingResourceError(
                "no device directory: set IOTSCHED_DEVICE_TABLE (or IOTSCHED_DMS_URL)"
            )
        return self.directory

    def need_table(self) -> tuple[Any, str]:
        """(DynamoDB client, devices table), or a clear error."""
        if self.ddb is None or not self.device_table:
            raise MissingResourceError("no devices table: set IOTSCHED_DEVICE_TABLE")
        return self.ddb, self.device_table

    def need_bucket(self) -> tuple[Any, str]:
        """(S3 client, data bucket), or a clear error."""
        if self.s3 is None or not self.bucket:
            raise MissingResourceError("no data bucket: set IOTSCHED_DATA_BUCKET")
        return self.s3, self.bucket

    def need_topic(self) -> tuple[Any, str]:
        """(SNS client, reminder topic ARN), or a clear error."""
        if self.sns is None or not self.reminder_topic_arn:
            raise MissingResourceError("no reminder topic: set IOTSCHED_REMINDER_TOPIC_ARN")
        return self.sns, self.reminder_topic_arn


def iot_resources() -> TaskResources:
    """The IoT handlers' resources from the environment's settings (`Settings.from_env`):
    the resource factory they ask `ctx.resource` for. `iotsched.bootstrap` provides the ones
    of the settings it was built with in its place."""
    return task_resources(Settings.from_env())


def device_directory(settings: Settings, clients: AwsClients) -> DeviceDirectory | None:
    """The Device Management System the settings name: an external one over HTTP
    (IOTSCHED_DMS_URL), else the devices table (IOTSCHED_DEVICE_TABLE), else none."""
    if settings.dms_url:
        from iotsched.adapters.dms_http import HttpDeviceDirectory  # only with a DMS URL

        return HttpDeviceDirectory(settings.dms_url, timeout_s=settings.dms_timeout_s)
    if settings.device_table:
        return DynamoDBDeviceDirectory(clients.dynamodb(), settings.device_table)
    return None


def task_resources(settings: Settings, clients: AwsClients | None = None) -> TaskResources:
    """What the IoT handlers reach, from the settings (clients are built lazily, once)."""
    clients = clients or AwsClients(region=settings.region, endpoint_url=settings.endpoint_url)
    return TaskResources(
        directory=device_directory(settings, clients),
        ddb=clients.dynamodb() if settings.device_table else None,
        device_table=settings.device_table,
        s3=clients.s3() if settings.data_bucket else None,
        bucket=settings.data_bucket,
        sns=clients.sns() if settings.reminder_topic_arn else None,
        reminder_topic_arn=settings.reminder_topic_arn,
    )
