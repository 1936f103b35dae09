"""ShardQueue and AlertSink contracts, on the fakes and on SQS/SNS (moto server)."""

from __future__ import annotations

import json
from datetime import date

import pytest

from iotsched.adapters.sqs import SQSShardQueue
from iotsched.core.alert_message import Alert
from iotsched.core.shard_message import ShardMessage
from iotsched.ports.messaging import MessageTooLargeError
from iotsched.services.scheduling.send import shard_messages
from tests.contract.conftest import AlertHarness, QueueHarness
from tests.support import AwsResources, instance, receive_all, received_shard_messages


def messages(count: int, task_id: str = "q") -> list[ShardMessage]:
    inst = instance(task_id, shards=[{"tenant": f"t{i:03d}", "n": i} for i in range(count)])
    return shard_messages(inst)


@pytest.mark.parametrize(("count", "requests"), [(1, 1), (10, 1), (11, 2), (25, 3)])
def test_send_delivers_every_message_in_batches_of_ten(
    queue: QueueHarness, count: int, requests: int
) -> None:
    batch = messages(count)
    assert queue.queue.send(batch) == requests
    assert queue.delivered(count) == batch


def test_send_nothing_makes_no_request(queue: QueueHarness) -> None:
    assert queue.queue.send([]) == 0
    assert queue.delivered(0) == []


def test_messages_carry_everything_a_worker_needs(queue: QueueHarness) -> None:
    inst = instance(
        "full",
        shards=[{"key_space": "device_id", "start": 0, "end": 250}],
        tenant="acme",
        params={"threshold": 0.5, "tags": ["a", "b"]},
        retry={"max_attempts": 4, "backoff_s": 9},
        timeout_s=120,
    )
    queue.queue.send(shard_messages(inst))
    (got,) = queue.delivered(1)
    assert got.instance_id == inst.instance_id
    assert (got.task_id, got.tenant, got.shard, got.handler) == ("full", "acme", 0, "noop")
    assert got.bounds == {"key_space": "device_id", "start": 0, "end": 250}
    assert got.params == {"threshold": 0.5, "tags": ["a", "b"]}
    assert got.business_date == inst.business_date
    assert (got.data_interval_start, got.data_interval_end) == (
        inst.data_interval_start,
        inst.data_interval_end,
    )
    assert (got.timeout_s, got.max_attempts, got.backoff_s) == (120, 4, 9)


@pytest.mark.moto
def test_sqs_extend_visibility_acts_on_the_received_message(aws_resources: AwsResources) -> None:
    sqs = aws_resources.client("sqs")
    queue = SQSShardQueue(aws_resources.clients().sqs(), aws_resources.shard_queue_url)
    queue.send(messages(1))
    (first,) = sqs.receive_message(QueueUrl=aws_resources.shard_queue_url)["Messages"]
    hidden = sqs.receive_message(QueueUrl=aws_resources.shard_queue_url)
    assert hidden.get("Messages", []) == []

    queue.extend_visibility(first["ReceiptHandle"], 0)  # visible again from now
    (again,) = sqs.receive_message(QueueUrl=aws_resources.shard_queue_url)["Messages"]
    assert again["MessageId"] == first["MessageId"]

    queue.extend_visibility(again["ReceiptHandle"], 600)
    assert sqs.receive_message(QueueUrl=aws_resources.shard_queue_url).get("Messages", []) == []


def test_memory_queue_records_visibility_requests() -> None:
    from iotsched.adapters.memory.queues import MemoryShardQueue

    queue = MemoryShardQueue()
    queue.extend_visibility("rh-1", 90)
    queue.extend_visibility("rh-1", 120)
    assert queue.visibility == {"rh-1": 120}


@pytest.mark.moto
def test_sqs_an_oversized_message_raises(aws_resources: AwsResources) -> None:
    """A message SQS cannot take fails the send (the dispatch stays resumable), never silently."""
    queue = SQSShardQueue(aws_resources.clients().sqs(), aws_resources.shard_queue_url)
    (big,) = messages(1)
    big = big.model_copy(update={"params": {"blob": "x" * (1024 * 1024)}})
    with pytest.raises(MessageTooLargeError, match="exceeds the SQS limit"):
        queue.send([big])


@pytest.mark.moto
def test_sqs_batches_respect_the_one_mib_request_limit(aws_resources: AwsResources) -> None:
    """Ten messages of 200 KB each are fine one by one, but not as one 2 MB batch request.

    SendMessageBatch allows 10 entries *and* 1 MiB in total; batches must be cut by size too.
    """
    queue = SQSShardQueue(aws_resources.clients().sqs(), aws_resources.shard_queue_url)
    batch = [m.model_copy(update={"params": {"blob": "x" * 200_000}}) for m in messages(10)]
    queue.send(batch)
    got = received_shard_messages(
        receive_all(aws_resources.client("sqs"), aws_resources.shard_queue_url, expect=10)
    )
    assert [m.shard for m in got] == list(range(10))


# -- alerts -------------------------------------------------------------------------------------


def an_alert(**fields: object) -> Alert:
    data: dict[str, object] = {
        "type": "instance_failed",
        "severity": "critical",
        "task_id": "tenant-daily-report",
        "tenant": "acme",
        "instance_id": "tenant-daily-report@2026-11-28T23:05Z",
        "business_date": date(2026, 11, 28),
        "status": "failed",
        "reason": None,
        "failed_shards": [
            {"shard": 1, "status": "failed", "bounds": {"tenant": "globex"}, "attempts": 3}
        ],
        "alert_id": "tenant-daily-report@2026-11-28T23:05Z#failed",
    }
    data.update(fields)
    return Alert.model_validate(data)


def test_an_alert_arrives_with_its_body_and_filter_attributes(alerts: AlertHarness) -> None:
    alert = an_alert()
    alerts.sink.publish(alert)
    ((got, attributes),) = alerts.published(1)
    assert got == alert
    assert attributes == {
        "type": "instance_failed",
        "severity": "critical",
        "tenant": "acme",
        "task": "tenant-daily-report",
        "silenced": "no",
    }


def test_an_alert_without_a_tenant_has_a_placeholder_attribute(alerts: AlertHarness) -> None:
    alerts.sink.publish(an_alert(tenant=None, severity="low", type="shard_dead_lettered"))
    ((got, attributes),) = alerts.published(1)
    assert got.tenant is None
    assert attributes == {
        "type": "shard_dead_lettered",
        "severity": "low",
        "tenant": "-",
        "task": "tenant-daily-report",
        "silenced": "no",
    }


def test_each_publish_is_one_alert(alerts: AlertHarness) -> None:
    first, second = an_alert(alert_id="a#1"), an_alert(alert_id="a#2", status="timed_out")
    alerts.sink.publish(first)
    alerts.sink.publish(second)
    got = sorted((a for a, _ in alerts.published(2)), key=lambda a: a.alert_id)
    assert got == [first, second]


@pytest.mark.moto
def test_sns_body_is_the_alert_json(aws_resources: AwsResources) -> None:
    """Subscribers that do not use pydantic read plain JSON with stable field names."""
    from iotsched.adapters.sns import SNSAlertSink

    SNSAlertSink(aws_resources.clients().sns(), aws_resources.alert_topic_arn).publish(an_alert())
    (message,) = receive_all(aws_resources.client("sqs"), aws_resources.alert_tap_url, expect=1)
    envelope = json.loads(message["Body"])
    assert envelope["TopicArn"] == aws_resources.alert_topic_arn
    assert envelope["Subject"] == "iotsched instance_failed: tenant-daily-report"
    body = json.loads(envelope["Message"])
    assert body["business_date"] == "2026-11-28"
    assert body["failed_shards"][0]["bounds"] == {"tenant": "globex"}
    assert {name: attr["Type"] for name, attr in envelope["MessageAttributes"].items()} == {
        "type": "String",
        "severity": "String",
        "tenant": "String",
        "task": "String",
        "silenced": "String",
    }


@pytest.mark.moto
def test_sqs_priority_queues_route_by_priority_and_hold_on_the_receiving_queue(
    aws_resources: AwsResources,
) -> None:
    """Each message reaches its priority's queue; a receipt handle works only on the queue that
    delivered it, which is where the worker's visibility changes go (`receiving_from`)."""
    from iotsched.adapters.sqs import PriorityShardQueue
    from iotsched.core.task_definition import Priority
    from tests.support import create_shard_queue, queue_arn

    sqs = aws_resources.client("sqs")
    clients = aws_resources.clients()
    urls = {
        p: create_shard_queue(sqs, f"prio-{p.value}", visibility_timeout_s=600)[0] for p in Priority
    }
    router = PriorityShardQueue({p: SQSShardQueue(clients.sqs(), u) for p, u in urls.items()})
    batch = [
        m.model_copy(update={"priority": p})
        for m, p in zip(messages(6), [*Priority, *Priority], strict=True)
    ]
    assert router.send(batch) == 3
    for p, url in urls.items():
        got = received_shard_messages(receive_all(sqs, url, expect=2))
        assert [(m.shard, m.priority) for m in got] == [
            (m.shard, p) for m in batch if m.priority is p
        ]

    router.send([batch[2]])  # a low one
    (held,) = sqs.receive_message(QueueUrl=urls[Priority.LOW])["Messages"]
    low = router.receiving_from(queue_arn(sqs, urls[Priority.LOW]))
    assert low.hold_visibility([held["ReceiptHandle"]], 0) == set()  # visible again from now
    (again,) = sqs.receive_message(QueueUrl=urls[Priority.LOW])["Messages"]
    assert again["MessageId"] == held["MessageId"]
    low.extend_visibility(again["ReceiptHandle"], 600)
    assert sqs.receive_message(QueueUrl=urls[Priority.LOW]).get("Messages", []) == []
