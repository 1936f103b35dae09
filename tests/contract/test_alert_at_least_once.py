"""Alerts at least once: a death between the alert's record and its publish loses nothing
(moto server: the record is a conditional write on the table)."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from iotsched import bootstrap
from iotsched.adapters.alerting import DedupAlertSink
from iotsched.adapters.dynamodb.alerts import DynamoDBAlertLog
from iotsched.adapters.dynamodb.keys import owed_partition
from iotsched.clock import ManualClock
from iotsched.core.alert_message import Alert
from iotsched.core.timeutil import iso
from iotsched.services.execution.sweep import sweep
from tests.support import T0, TEST_INDEX_BUCKETS, AwsResources

pytestmark = pytest.mark.moto


class Died(BaseException):
    """The process died here."""


class Topic:
    """The alert topic; dies on the first `deaths` publishes, before the topic takes them."""

    def __init__(self, deaths: int = 1) -> None:
        self.deaths = deaths
        self.published: list[Alert] = []

    def publish(self, alert: Alert) -> None:
        if self.deaths:
            self.deaths -= 1
            raise Died("died between the alert's record and its publish")
        self.published.append(alert)


def alert(alert_id: str = "t@2026-11-29T12:00Z#failed") -> Alert:
    return Alert(
        type="instance_failed",
        severity="high",
        task_id="t",
        tenant=None,
        instance_id="t@2026-11-29T12:00Z",
        status="failed",
        alert_id=alert_id,
    )


def sink_on(aws: AwsResources, topic: Topic, clock: ManualClock) -> DedupAlertSink:
    return DedupAlertSink(
        DynamoDBAlertLog(aws.clients().dynamodb(), aws.table, buckets=TEST_INDEX_BUCKETS),
        topic,
        clock,
    )


def test_a_retry_after_a_death_before_the_publish_publishes_it(
    aws_resources: AwsResources,
) -> None:
    topic = Topic()
    sink = sink_on(aws_resources, topic, ManualClock(T0))
    with pytest.raises(Died):
        sink.publish(alert())
    assert topic.published == []
    sink.publish(alert())  # the owed follow-up, done again by whoever finds it
    sink.publish(alert())  # published now: a third caller is dropped
    assert [a.alert_id for a in topic.published] == [alert().alert_id]
    assert [a.alert_id for a in sink.recent()] == [alert().alert_id]
    assert sink.unpublished(before=T0 + timedelta(days=1)) == []


def test_the_sweeper_publishes_an_alert_nobody_retries(aws_resources: AwsResources) -> None:
    clock = ManualClock(T0)
    topic = Topic()
    sink = sink_on(aws_resources, topic, clock)
    services = bootstrap.build(aws_resources.settings, clock=clock, clients=aws_resources.clients())
    services = dataclasses.replace(services, alerts=sink, alert_log=sink)
    with pytest.raises(Died):
        sink.publish(alert("catch-up#1"))  # an alert no instance owes (e.g. catch_up_dropped)
    assert sweep(services, requeue_after_s=1800).republished_alerts == []  # still its caller's
    clock.advance(timedelta(minutes=1))
    assert sweep(services, requeue_after_s=1800).republished_alerts == ["catch-up#1"]
    clock.advance(timedelta(minutes=1))
    assert sweep(services, requeue_after_s=1800).republished_alerts == []
    assert [a.alert_id for a in topic.published] == ["catch-up#1"]


def test_an_error_from_the_topic_leaves_the_alert_to_a_retry(aws_resources: AwsResources) -> None:
    class Failing(Topic):
        def publish(self, alert: Alert) -> None:
            if not self.published and self.deaths:
                self.deaths -= 1
                raise ConnectionError("topic unreachable")
            self.published.append(alert)

    topic = Failing()
    sink = sink_on(aws_resources, topic, ManualClock(T0))
    with pytest.raises(ConnectionError):
        sink.publish(alert())
    sink.publish(alert())
    assert [a.alert_id for a in topic.published] == [alert().alert_id]


def test_instances_owing_follow_ups_never_hide_an_unpublished_alert(
    aws_resources: AwsResources,
) -> None:
    # The owing partitions hold instances that owe follow-ups as well as pending alerts; a
    # backlog of instances ended before the alert was raised sorts first in its partition.
    topic = Topic()
    sink = sink_on(aws_resources, topic, ManualClock(T0))
    with pytest.raises(Died):
        sink.publish(alert("catch-up#1"))
    ddb = aws_resources.clients().dynamodb()
    partition = owed_partition("ALERT#catch-up#1")
    for n in range(7):
        ddb.put_item(
            TableName=aws_resources.table,
            Item={
                "pk": {"S": f"TASK#owing{n}"},
                "sk": {"S": "INST#2026-11-29T11:00Z"},
                "kind": {"S": "instance"},
                "open_pk": {"S": partition},
                "open_sk": {"S": f"{iso(T0 - timedelta(hours=1))}#owing{n}@2026-11-29T11:00Z"},
            },
        )
    found = sink.unpublished(before=T0 + timedelta(minutes=1), limit=3)
    assert [a.alert_id for a in found] == ["catch-up#1"]
