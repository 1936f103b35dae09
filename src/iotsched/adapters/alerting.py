"""Alerts once per alert id: a conditional write records the alert, then SNS publishes it.

The record is also the alert history that `iotsched alerts` reads (newest first, from the
`by_status` index under the partition `ALERTS`).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from iotsched.core.records import Alert
from iotsched.core.timeutil import iso
from iotsched.ports import AlertSink, Clock

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

ALERT_PARTITION = "ALERTS"


class DynamoDBAlertLog:
    """Alert records on the scheduler's table (`ALERT#<id>`)."""

    def __init__(self, client: DynamoDBClient, table: str) -> None:
        self._ddb = client
        self._table = table

    def record(self, alert: Alert) -> bool:
        """Record the alert; False if its id was recorded before (do not publish again)."""
        assert alert.raised_at is not None
        try:
            self._ddb.put_item(
                TableName=self._table,
                Item={
                    "pk": {"S": f"ALERT#{alert.alert_id}"},
                    "sk": {"S": "ALERT"},
                    "kind": {"S": "alert"},
                    "body": {"S": alert.model_dump_json()},
                    "status_pk": {"S": ALERT_PARTITION},
                    "status_sk": {"S": f"{iso(alert.raised_at)}#{alert.alert_id}"},
                },
                ConditionExpression="attribute_not_exists(pk)",
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def forget(self, alert_id: str) -> None:
        """Drop a record whose publish failed, so that a retry publishes it."""
        self._ddb.delete_item(
            TableName=self._table,
            Key={"pk": {"S": f"ALERT#{alert_id}"}, "sk": {"S": "ALERT"}},
        )

    def recent(self, *, limit: int = 50) -> list[Alert]:
        """Alerts newest first."""
        out = self._ddb.query(
            TableName=self._table,
            IndexName="by_status",
            KeyConditionExpression="status_pk = :alerts",
            ExpressionAttributeValues={":alerts": {"S": ALERT_PARTITION}},
            ScanIndexForward=False,
            Limit=limit,
        )
        items: list[Any] = out.get("Items", [])
        return [Alert.model_validate(json.loads(item["body"]["S"])) for item in items]


class DedupAlertSink:
    """Record (conditionally) then publish: one alert per alert id, however many callers."""

    def __init__(self, log: DynamoDBAlertLog, sink: AlertSink, clock: Clock) -> None:
        self._log = log
        self._sink = sink
        self._clock = clock

    def publish(self, alert: Alert) -> None:
        """Publish unless an alert with the same id was published before."""
        stamped = (
            alert if alert.raised_at else alert.model_copy(update={"raised_at": self._clock.now()})
        )
        if not self._log.record(stamped):
            return
        try:
            self._sink.publish(stamped)
        except Exception:
            self._log.forget(stamped.alert_id)  # the next caller (a retry) publishes it
            raise

    def recent(self, *, limit: int = 50) -> list[Alert]:
        """Alerts newest first."""
        return self._log.recent(limit=limit)
