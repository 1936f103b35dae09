"""One contract suite, every backend: the in-memory fakes and the AWS adapters on moto server.

Each fixture here is parametrized over ["memory", <aws>]; the AWS parameter carries the `moto`
marker, so `-m "not moto"` runs the suite on the fakes alone. The store has a third backend,
"adversarial": moto behind the adversarial DynamoDB (`iotsched.adversary`) at a moderate
seeded fault rate; it carries the `adversarial` marker too (`-m "not adversarial"` leaves it
out). Only the store: the adversary touches DynamoDB alone, SQS and SNS pass through it as they
are.

The files are by topic; `test_store_parts.PARTS` maps each part of the store (a module of
`iotsched.adapters.dynamodb`) to the files that exercise it, and checks the map.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import pytest

from iotsched.adapters.dynamodb import DynamoDBStore
from iotsched.adapters.memory.queues import (
    MemoryAlertSink,
    MemoryShardQueue,
)
from iotsched.adapters.memory.store import MemoryStore
from iotsched.adapters.sns import SNSAlertSink
from iotsched.adapters.sqs import SQSShardQueue
from iotsched.core.alert_message import Alert
from iotsched.core.shard_message import ShardMessage
from iotsched.ports.blocking import BlockingStore
from iotsched.ports.instances import InstanceStore
from iotsched.ports.messaging import (
    AlertSink,
    ShardQueue,
)
from iotsched.ports.tasks import TaskStore
from tests.support import (
    TEST_INDEX_BUCKETS,
    AwsResources,
    read_alerts,
    receive_all,
    received_shard_messages,
)


class Store(TaskStore, InstanceStore, BlockingStore, Protocol):
    """The store ports, as `DynamoDBStore` implements them on one table."""


def _backend(request: pytest.FixtureRequest) -> str:
    backend: str = request.param
    return backend


@pytest.fixture(
    params=[
        "memory",
        pytest.param("dynamodb", marks=pytest.mark.moto),
        pytest.param("adversarial", marks=[pytest.mark.moto, pytest.mark.adversarial]),
    ]
)
def store(request: pytest.FixtureRequest) -> Store:
    """The task and instance stores: in memory, DynamoDB on the moto server, or DynamoDB on
    moto behind the adversarial DynamoDB; with the test deployment's index buckets, or the
    module's `STORE_BUCKETS` where its tests are about bucket counts."""
    backend = _backend(request)
    buckets: int = getattr(request.module, "STORE_BUCKETS", TEST_INDEX_BUCKETS)
    if backend == "memory":
        return MemoryStore(buckets=buckets)
    aws: AwsResources = request.getfixturevalue(
        "adversarial_resources" if backend == "adversarial" else "aws_resources"
    )
    return DynamoDBStore(aws.clients().dynamodb(), aws.table, buckets=buckets)


@dataclass
class QueueHarness:
    """A shard queue and a way to see what actually reached it."""

    queue: ShardQueue
    delivered: Callable[[int], list[ShardMessage]]
    receive_raw: Callable[[], list[dict[str, Any]]] | None = None


@pytest.fixture(params=["memory", pytest.param("sqs", marks=pytest.mark.moto)])
def queue(request: pytest.FixtureRequest) -> QueueHarness:
    """The shard queue; `delivered(n)` returns the messages that arrived, by (instance, shard)."""
    if _backend(request) == "memory":
        memory = MemoryShardQueue()

        def sent(expect: int) -> list[ShardMessage]:
            return sorted(memory.sent, key=lambda m: (m.instance_id, m.shard))

        return QueueHarness(queue=memory, delivered=sent)
    aws: AwsResources = request.getfixturevalue("aws_resources")
    sqs = aws.client("sqs")

    def received(expect: int) -> list[ShardMessage]:
        return received_shard_messages(receive_all(sqs, aws.shard_queue_url, expect=expect))

    def raw() -> list[dict[str, Any]]:
        return receive_all(sqs, aws.shard_queue_url, expect=1)

    return QueueHarness(
        queue=SQSShardQueue(aws.clients().sqs(), aws.shard_queue_url),
        delivered=received,
        receive_raw=raw,
    )


@dataclass
class AlertHarness:
    """An alert sink and a way to read back (alert, filter attributes) as subscribers see them."""

    sink: AlertSink
    published: Callable[[int], list[tuple[Alert, dict[str, str]]]]


@pytest.fixture(params=["memory", pytest.param("sns", marks=pytest.mark.moto)])
def alerts(request: pytest.FixtureRequest) -> AlertHarness:
    """The alert sink: in memory, or SNS read back through an SQS subscription."""
    if _backend(request) == "memory":
        memory = MemoryAlertSink()
        return AlertHarness(
            sink=memory, published=lambda expect: [(a, a.attributes()) for a in memory.published]
        )
    aws: AwsResources = request.getfixturevalue("aws_resources")
    sqs = aws.client("sqs")
    return AlertHarness(
        sink=SNSAlertSink(aws.clients().sns(), aws.alert_topic_arn),
        published=lambda expect: read_alerts(sqs, aws.alert_tap_url, expect=expect),
    )
