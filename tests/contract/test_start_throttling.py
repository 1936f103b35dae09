"""Throttling past the SDK's retries at any step of a shard's start, on DynamoDB (moto server):
the adapter answers the port's StoreContendedError, and the worker defers the shard (a delayed
copy of its message, the delivery acknowledged: never counted toward the DLQ) instead of failing
it; the copy starts the shard once the table answers.

The DynamoDB client here makes one try per call (as botocore's ten tries all throttled would,
without their minute of backoff); a `before-send` hook answers the step's request with
ProvisionedThroughputExceededException before it reaches the server.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any, cast

import boto3
import pytest
from botocore.awsrequest import AWSPreparedRequest, AWSResponse
from botocore.config import Config

from iotsched import bootstrap
from iotsched.adapters.aws import AwsClients
from iotsched.clock import ManualClock
from iotsched.core.quotas import TenantQuotas
from iotsched.core.shard_record import ShardStatus
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.execution.batch import ShardBatch
from iotsched.services.execution.outcomes import Delivery, PendingShard, ShardOutcome
from iotsched.services.scheduling.send import shard_messages
from iotsched.services.scheduling.tick import dispatch_tick
from tests.contract.test_throttling import PTEE
from tests.support import REGION, T0, AwsResources, Timers, receive_all, task

pytestmark = pytest.mark.moto

S = timedelta(seconds=1)
ID = "fleet@2026-11-29T12:00Z"


class OneTry(AwsClients):
    """Clients whose DynamoDB client makes one try per call."""

    def dynamodb(self) -> Any:
        if "dynamodb-one-try" not in self._cache:
            self._cache["dynamodb-one-try"] = boto3.session.Session(region_name=REGION).client(
                "dynamodb",
                endpoint_url=self.endpoint_url,
                config=Config(retries={"mode": "standard", "total_max_attempts": 1}),
            )
        return self._cache["dynamodb-one-try"]


@dataclass
class Throttle:
    """Throttles the first request of `operation` whose body holds `marker` (once armed)."""

    operation: str
    marker: str
    armed: bool = False
    fired: bool = False

    def before_send(
        self, request: AWSPreparedRequest, event_name: str, **kwargs: Any
    ) -> AWSResponse | None:
        body = request.body.decode() if isinstance(request.body, bytes) else str(request.body)
        if not self.armed or self.fired or not event_name.endswith(f".{self.operation}"):
            return None
        if self.marker not in body:
            return None
        self.fired = True
        return PTEE.response("dynamodb", request.url)


#: Each start step's request: the instance read, the tenant's slot (its query, its put), the
#: rollout's count, the lease, the fence read after it.
STEPS = {
    "instance_read": ("BatchGetItem", '"INST#'),
    "slot_query": ("Query", '"TENANT#acme"'),
    "slot_put": ("PutItem", '"SLOT#'),
    "count": ("UpdateItem", '"GATE"'),
    "lease": ("PutItem", '"SHARD#'),
    "fence_read": ("GetItem", '"GATE"'),
}


@pytest.mark.parametrize("step", list(STEPS))
def test_a_start_step_throttled_past_the_sdk_retries_defers_the_shard(
    aws_resources: AwsResources, step: str
) -> None:
    aws = aws_resources
    clock = ManualClock(T0 + 5 * S)
    clients = OneTry(region=REGION, endpoint_url=aws.endpoint_url)
    throttle = Throttle(*STEPS[step])
    clients.dynamodb().meta.events.register(
        "before-send.dynamodb", cast("Any", throttle.before_send)
    )
    services = bootstrap.build(aws.settings, clock=clock, clients=clients)
    apply_tasks(
        [
            task(
                "fleet",
                tenant="acme",
                retry={"max_attempts": 1},
                sharding={"strategy": "static", "shards": [{"n": i} for i in range(2)]},
                rollout={"max_shards_per_minute": 100},
                abort={"failure_percent": 50, "min_executed": 2},
            )
        ],
        services.tasks,
        now=T0 - timedelta(hours=1),
    )
    assert services.tasks.set_task_quotas("fleet", TenantQuotas(max_concurrent_shards=1))
    assert dispatch_tick(T0, services).claimed == [ID]
    instance = services.instances.get_instance(ID)
    assert instance is not None
    first = shard_messages(instance)[0]
    sqs = aws.client("sqs")
    receive_all(sqs, aws.shard_queue_url, expect=2)  # the dispatch's sends, out of the way

    throttle.armed = True
    batch = ShardBatch(services, worker="w", timer=Timers())
    outcome = batch.run(Delivery(first.model_dump_json(), "rh-0"))  # acknowledged, no raise
    batch.commit()

    assert throttle.fired
    assert outcome is ShardOutcome.DEFERRED
    delayed = sqs.get_queue_attributes(
        QueueUrl=aws.shard_queue_url, AttributeNames=["ApproximateNumberOfMessagesDelayed"]
    )["Attributes"]
    assert delayed["ApproximateNumberOfMessagesDelayed"] == "1"  # its copy, back in 5-10 s
    shard = services.instances.get_shard(ID, 0)
    assert shard is None or (shard.status, shard.attempt) == (ShardStatus.PENDING, 0)
    after = services.instances.get_instance(ID)
    assert after is not None and (after.remaining, after.failed_shards) == (2, 0)
    again = ShardBatch(services, worker="w2", timer=Timers())
    assert isinstance(again.run(Delivery(first.model_dump_json(), "rh-1")), PendingShard)
