"""The guide for alert subscribers (docs/task-files.md, "Alert subscribers") holds: the message attributes it lists are the ones
every alert carries on SNS (and docs/alert.schema.json lists), and its example filter policy,
applied on the emulator, delivers exactly the alerts it says."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

from iotsched import bootstrap
from iotsched.clock import ManualClock
from iotsched.core.alert_message import Alert
from tests.support import T0, AwsResources, queue_arn, read_alerts

ROOT = Path(__file__).resolve().parents[2]
GUIDE = (ROOT / "docs" / "task-files.md").read_text()
SCHEMA = json.loads((ROOT / "docs" / "alert.schema.json").read_text())


def guide_block(marker: str) -> str:
    found = re.search(rf"<!-- {marker} -->\n(.*?)<!-- /{marker} -->", GUIDE, re.S)
    assert found, f"docs/task-files.md lost its {marker} block"
    return found.group(1)


def guide_attributes() -> dict[str, str]:
    rows = [line for line in guide_block("alert-attributes").splitlines() if line.startswith("|")]
    return {
        cells[0].strip("` "): cells[1].strip()
        for line in rows[2:]
        if (cells := [c.strip() for c in line.strip("|").split("|")])
    }


def guide_filter_policy() -> dict[str, Any]:
    for line in guide_block("alert-filter-policy").splitlines():
        words = shlex.split(line)
        if words[:3] == ["aws", "sns", "set-subscription-attributes"]:
            assert words[words.index("--attribute-name") + 1] == "FilterPolicy"
            policy: dict[str, Any] = json.loads(words[words.index("--attribute-value") + 1])
            return policy
    raise AssertionError("the guide's filter policy example sets no FilterPolicy")


def alert(n: int, *, severity: str, tenant: str | None, type_: str = "instance_failed") -> Alert:
    return Alert(
        type=type_,
        severity=severity,
        task_id=f"task-{n}",
        tenant=tenant,
        instance_id=f"task-{n}@2026-11-29T12:00Z",
        status="failed",
        alert_id=f"alert-{n}",
    )


def test_the_guide_and_the_schema_list_the_attributes_every_alert_carries(
    aws_resources: AwsResources,
) -> None:
    services = bootstrap.build(
        aws_resources.settings, clock=ManualClock(T0), clients=aws_resources.clients()
    )
    services.alerts.publish(alert(1, severity="high", tenant=None))
    ((received, attributes),) = read_alerts(
        aws_resources.client("sqs"), aws_resources.alert_tap_url, expect=1
    )
    assert received.alert_id == "alert-1"
    assert attributes == {
        "type": "instance_failed",
        "severity": "high",
        "tenant": "-",
        "task": "task-1",
        "silenced": "no",
    }
    assert set(guide_attributes()) == set(attributes)
    assert set(SCHEMA["x-sns-message-attributes"]) == set(attributes)
    assert {a["DataType"] for a in SCHEMA["x-sns-message-attributes"].values()} == {"String"}
    assert SCHEMA["x-sns-filter-policy-example"] == guide_filter_policy()
    # every severity a task may set is listed
    severities = SCHEMA["x-sns-message-attributes"]["severity"]["description"]
    for severity in ("low", "medium", "high", "critical"):
        assert f"`{severity}`" in guide_attributes()["severity"] and severity in severities


def test_alert_types_published_by_the_code_are_listed() -> None:
    literal = set()
    for path in (ROOT / "src" / "iotsched" / "services").glob("*.py"):
        text = path.read_text()
        literal |= set(re.findall(r'\b(?:type|alert_type)="([a-z_]+)"', text))
        # a type named by a constant: `alert_type=PLAN_TOO_LARGE` with `PLAN_TOO_LARGE = "..."`
        for constant in re.findall(r"\balert_type=([A-Z_]+)\b", text):
            literal |= set(re.findall(rf'^{constant} = "([a-z_]+)"$', text, re.M))
    # alert_for names an ended instance's alert after its status: failed or timed out
    listed = guide_attributes()["type"]
    for name in sorted(literal | {"instance_failed", "instance_timed_out"}):
        assert f"`{name}`" in listed, name


def test_the_guide_filter_policy_delivers_exactly_the_alerts_it_says(
    aws_resources: AwsResources,
) -> None:
    policy = guide_filter_policy()
    assert policy == {"severity": ["critical", "high"], "tenant": ["acme"]}  # what the text says
    sqs, sns = aws_resources.client("sqs"), aws_resources.client("sns")
    url = sqs.create_queue(QueueName="acme-urgent")["QueueUrl"]
    subscription = sns.subscribe(
        TopicArn=aws_resources.alert_topic_arn,
        Protocol="sqs",
        Endpoint=queue_arn(sqs, url),
        ReturnSubscriptionArn=True,
    )["SubscriptionArn"]
    sns.set_subscription_attributes(
        SubscriptionArn=subscription,
        AttributeName="FilterPolicy",
        AttributeValue=json.dumps(policy),
    )
    services = bootstrap.build(
        aws_resources.settings, clock=ManualClock(T0), clients=aws_resources.clients()
    )
    for n, (severity, tenant) in enumerate(
        [
            ("critical", "acme"),
            ("high", "acme"),
            ("medium", "acme"),
            ("critical", "globex"),
            ("high", None),
            ("high", "acme"),
        ]
    ):
        services.alerts.publish(alert(n, severity=severity, tenant=tenant))
    got = read_alerts(sqs, url, expect=3)
    assert sorted(a.alert_id for a, _ in got) == ["alert-0", "alert-1", "alert-5"]
