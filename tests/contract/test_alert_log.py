"""Alerts: once per alert id, recorded for `iotsched alerts`, filterable by attributes."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

from iotsched import bootstrap
from iotsched.clock import ManualClock
from iotsched.core.alert_message import Alert
from iotsched.services.wiring import Wiring
from tests.support import T0, AwsResources, queue_arn, read_alerts

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "docs" / "alert.schema.json"
GOLDEN = ROOT / "tests" / "fixtures" / "alert.v1.json"


def alert(alert_id: str, severity: str = "high", tenant: str = "acme") -> Alert:
    return Alert(
        type="instance_failed",
        severity=severity,
        task_id="t",
        tenant=tenant,
        instance_id=f"t@{alert_id}",
        status="failed",
        failed_shards=[{"shard": 1, "error": "boom"}],
        alert_id=alert_id,
    )


def services_on(aws: AwsResources, clock: ManualClock) -> Wiring:
    return bootstrap.build(aws.settings, clock=clock, clients=aws.clients())


def test_an_alert_id_is_published_once_and_listed_newest_first(aws_resources: AwsResources) -> None:
    clock = ManualClock(T0)
    services = services_on(aws_resources, clock)
    services.alerts.publish(alert("a"))
    services.alerts.publish(alert("a"))  # a racing finalizer, a retried sweep
    clock.advance(timedelta(minutes=1))
    services.alerts.publish(alert("b"))
    received = read_alerts(aws_resources.client("sqs"), aws_resources.alert_tap_url, expect=2)
    assert sorted(a.alert_id for a, _ in received) == ["a", "b"]
    recent = services.alert_log.recent(limit=10)
    assert [(a.alert_id, a.raised_at) for a in recent] == [
        ("b", T0 + timedelta(minutes=1)),
        ("a", T0),
    ]


def test_a_filtered_subscription_receives_exactly_the_matching_alerts(
    aws_resources: AwsResources,
) -> None:
    # given the Alert Microservice's queue subscribed with a filter policy
    sqs, sns = aws_resources.client("sqs"), aws_resources.client("sns")
    url = sqs.create_queue(QueueName="critical-acme")["QueueUrl"]
    sns.subscribe(
        TopicArn=aws_resources.alert_topic_arn,
        Protocol="sqs",
        Endpoint=queue_arn(sqs, url),
        Attributes={"FilterPolicy": json.dumps({"severity": ["critical"], "tenant": ["acme"]})},
    )
    services = services_on(aws_resources, ManualClock(T0))
    services.alerts.publish(alert("1", severity="critical", tenant="acme"))
    services.alerts.publish(alert("2", severity="high", tenant="acme"))
    services.alerts.publish(alert("3", severity="critical", tenant="globex"))
    services.alerts.publish(alert("4", severity="critical", tenant="acme"))
    got = read_alerts(sqs, url, expect=2)
    assert sorted(a.alert_id for a, _ in got) == ["1", "4"]
    assert all(attrs["severity"] == "critical" and attrs["tenant"] == "acme" for _, attrs in got)


def test_the_alert_schema_is_committed_and_the_golden_example_conforms() -> None:
    current = json.dumps(Alert.model_json_schema(), indent=2, sort_keys=True) + "\n"
    assert SCHEMA.read_text() == current, "regenerate docs/alert.schema.json (see its test)"
    example = json.loads(GOLDEN.read_text())
    parsed = Alert.model_validate(example)
    assert parsed.schema_version == 1
    assert parsed.model_dump(mode="json") == example
    assert parsed.attributes() == {
        "type": "instance_failed",
        "severity": "critical",
        "tenant": "acme",
        "task": "tenant-daily-report",
        "silenced": "no",
    }
