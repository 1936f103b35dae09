"""SNS adapter for alerts: JSON body, filter attributes (type, severity, tenant, task)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from iotsched.core.alert_message import Alert

if TYPE_CHECKING:
    from mypy_boto3_sns import SNSClient


class SNSAlertSink:
    """AlertSink on an SNS topic."""

    def __init__(self, client: SNSClient, topic_arn: str) -> None:
        self._sns = client
        self._topic = topic_arn

    def publish(self, alert: Alert) -> None:
        self._sns.publish(
            TopicArn=self._topic,
            Subject=f"iotsched {alert.type}: {alert.task_id}"[:100],
            Message=alert.model_dump_json(),
            MessageAttributes={
                name: {"DataType": "String", "StringValue": value}
                for name, value in alert.attributes().items()
            },
        )
