"""Fixtures of the IoT task library tests: the scheduler and the IoT resources on moto.

Shards run in this process through `run_shard` (the worker's code path), with the shard
messages kept in memory so each test decides when a shard runs, and runs it twice.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

import pytest

from iotsched import bootstrap
from iotsched.adapters.memory.queues import MemoryShardQueue
from iotsched.clock import ManualClock
from iotsched.context import ResourceCache
from iotsched.core.instance_record import (
    InstanceRecord,
    InstanceStatus,
)
from iotsched.services.execution.batch import run_shard
from iotsched.services.execution.outcomes import (
    Delivery,
    RetryShardError,
)
from iotsched.services.operations.actions import rerun_instance
from iotsched.services.wiring import Wiring
from iotsched.tasklib.resources import iot_resources as iot_resources_factory
from tests.iot.support import AS_OF, IotResources, iot_resources
from tests.support import AwsResources


@dataclass
class IotHarness:
    """The scheduler on moto, the IoT handlers' resources `iot.resources`."""

    services: Wiring
    queue: MemoryShardQueue
    iot: IotResources
    clock: ManualClock
    aws: AwsResources
    delivered: int = 0

    def drain(self) -> None:
        """Run every message sent so far (shards, then the reduce they start), in order."""
        while self.delivered < len(self.queue.sent):
            message = self.queue.sent[self.delivered]
            self.delivered += 1
            try:
                run_shard(
                    Delivery(body=message.model_dump_json(), receipt_handle=f"rh-{self.delivered}"),
                    self.services,
                    worker="test-worker",
                )
            except RetryShardError as exc:  # pragma: no cover - a failing handler fails the test
                raise AssertionError(f"shard {message.shard} failed: {exc}") from exc

    def ended(self, instance_id: str) -> InstanceRecord:
        """The instance, asserted succeeded."""
        instance = self.services.instances.get_instance(instance_id)
        assert instance is not None
        assert instance.status is InstanceStatus.SUCCEEDED, (instance.status, instance.reason)
        return instance

    def results(self, instance_id: str) -> list[dict[str, Any]]:
        """Every shard's partial result, by index."""
        return [dict(s.result or {}) for s in self.services.instances.list_shards(instance_id)]

    def rerun(self, instance_id: str) -> str:
        """Run every shard of the instance again (same plan, bounds, business date)."""
        again = rerun_instance(instance_id, self.services)
        self.drain()
        self.ended(again.instance_id)
        return again.instance_id

    def notices(self) -> list[dict[str, Any]]:
        """Reminder notices published so far (read once: each call returns the new ones)."""
        return read_notices(self.aws.client("sqs"), self.iot.reminder_tap_url)


def read_notices(sqs: Any, url: str) -> list[dict[str, Any]]:
    """Receive (and delete) every message on the queue until a poll comes back empty (SNS
    delivers to SQS synchronously on moto); the notices, as published."""
    out: list[dict[str, Any]] = []
    while True:
        batch = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
        if not batch:
            return out
        for message in batch:
            out.append(json.loads(json.loads(message["Body"])["Message"]))
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])


@pytest.fixture
def harness(aws_resources: AwsResources) -> IotHarness:
    """A fresh moto deployment with the fleet seeded, the clock at AS_OF."""
    clock = ManualClock(AS_OF)
    iot = iot_resources(aws_resources)
    services = bootstrap.build(
        aws_resources.settings,
        clock=clock,
        clients=aws_resources.clients(),
        resources=ResourceCache({iot_resources_factory: iot.resources}),
    )
    queue = MemoryShardQueue()
    services = dataclasses.replace(services, queue=queue, directory=iot.directory)
    return IotHarness(services=services, queue=queue, iot=iot, clock=clock, aws=aws_resources)
