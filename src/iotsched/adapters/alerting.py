"""Alerts at least once, deduplicated by alert id: record the alert `pending`, publish it to
SNS, then strike the pending mark.

    record(pending) ──► SNS publish ──► mark published
         │ died here: the record stays pending; the next publish of the same id (a retry,
         │ the instance's owed follow-up) publishes it again, and so does the sweeper
         │ (`unpublished`) for one nobody retries
    a record already published: the publish is dropped (one alert per id)

A death between the topic and the mark sends the alert twice: subscribers deduplicate by
`alert_id` (README, "Alerts"). The record is also the alert history that `iotsched alerts`
reads (newest first, from the `by_status` index under the partition `ALERTS`); while pending it
also sits in an owing partition of `by_deadline` (as an instance that owes follow-ups does).
"""

from __future__ import annotations

import json
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from iotsched.adapters.dynamodb import OWED_PREFIX, OWED_SHARDS, batch_get, owed_partition
from iotsched.core.records import Alert
from iotsched.core.timeutil import iso
from iotsched.ports import AlertEntry, AlertSink, Clock

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

ALERT_PARTITION = "ALERTS"


class Recorded(StrEnum):
    """What recording an alert found."""

    NEW = "new"  # recorded now: publish it
    PENDING = "pending"  # recorded before, its publish never confirmed: publish it (again)
    PUBLISHED = "published"  # published before: drop this one


def _key(alert_id: str) -> dict[str, Any]:
    return {"pk": {"S": f"ALERT#{alert_id}"}, "sk": {"S": "ALERT"}}


class DynamoDBAlertLog:
    """Alert records on the scheduler's table (`ALERT#<id>`)."""

    def __init__(self, client: DynamoDBClient, table: str) -> None:
        self._ddb = client
        self._table = table

    def record(self, alert: Alert) -> Recorded:
        """Record the alert as pending unless its id was recorded before; see `Recorded`."""
        assert alert.raised_at is not None
        try:
            self._ddb.put_item(
                TableName=self._table,
                Item={
                    **_key(alert.alert_id),
                    "kind": {"S": "alert"},
                    "body": {"S": alert.model_dump_json()},
                    "status_pk": {"S": ALERT_PARTITION},
                    "status_sk": {"S": f"{iso(alert.raised_at)}#{alert.alert_id}"},
                    # pending until `published`: the sweeper finds it here
                    "open_pk": {"S": owed_partition(f"ALERT#{alert.alert_id}")},
                    "open_sk": {"S": f"{iso(alert.raised_at)}#ALERT#{alert.alert_id}"},
                },
                ConditionExpression="attribute_not_exists(pk)",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                raise
            old: Any = exc.response.get("Item")
            if old is None:  # pragma: no cover - DynamoDB returns the item that failed
                old = self._ddb.get_item(
                    TableName=self._table, Key=_key(alert.alert_id), ConsistentRead=True
                ).get("Item", {})
            return Recorded.PENDING if "open_pk" in old else Recorded.PUBLISHED
        return Recorded.NEW

    def published(self, alert_id: str) -> None:
        """Strike the pending mark: the topic took the alert."""
        self._ddb.update_item(
            TableName=self._table,
            Key=_key(alert_id),
            UpdateExpression="REMOVE open_pk, open_sk",
            ConditionExpression="attribute_exists(pk)",
        )

    def recent(self, *, limit: int = 50) -> list[Alert]:
        """Alerts newest first."""
        return [entry.alert for entry in self.entries(limit=limit)]

    def entries(self, *, limit: int = 50) -> list[AlertEntry]:
        """Alerts newest first, each pending while it keeps its mark in `by_deadline`."""
        out = self._ddb.query(
            TableName=self._table,
            IndexName="by_status",
            KeyConditionExpression="status_pk = :alerts",
            ExpressionAttributeValues={":alerts": {"S": ALERT_PARTITION}},
            ScanIndexForward=False,
            Limit=limit,
        )
        items = self._fetch(out.get("Items", []))
        return [
            AlertEntry(Alert.model_validate(json.loads(item["body"]["S"])), "open_pk" in item)
            for item in items
        ]

    def _fetch(self, entries: list[Any]) -> list[Any]:
        """The alert items named by index entries (the indexes project no body), in order."""
        keys = [{"pk": e["pk"], "sk": e["sk"]} for e in entries]
        read = batch_get(self._ddb, self._table, keys)
        return [
            read[(k["pk"]["S"], k["sk"]["S"])] for k in keys if (k["pk"]["S"], k["sk"]["S"]) in read
        ]

    def unpublished(self, *, before: datetime, limit: int = 100) -> list[Alert]:
        """Pending alerts recorded before `before`, oldest first.

        The owing partitions also hold instances that owe follow-ups: they are filtered out,
        page after page, so that a backlog of them never hides an alert.
        """
        found: list[Alert] = []
        for shard in range(OWED_SHARDS):
            kwargs: dict[str, Any] = {
                "TableName": self._table,
                "IndexName": "by_deadline",
                "KeyConditionExpression": "open_pk = :owed AND open_sk < :before",
                "FilterExpression": "#kind = :alert",
                "ExpressionAttributeNames": {"#kind": "kind"},
                "ExpressionAttributeValues": {
                    ":owed": {"S": f"{OWED_PREFIX}{shard}"},
                    ":before": {"S": iso(before)},
                    ":alert": {"S": "alert"},
                },
                "Limit": limit,
            }
            taken = 0
            while taken < limit:
                out = self._ddb.query(**kwargs)
                items: list[Any] = out.get("Items", [])
                taken += len(items)
                found += [
                    Alert.model_validate(json.loads(item["body"]["S"]))
                    for item in self._fetch(items)
                ]
                if "LastEvaluatedKey" not in out:
                    break
                kwargs["ExclusiveStartKey"] = out["LastEvaluatedKey"]
        found.sort(key=lambda a: (a.raised_at, a.alert_id))
        return found[:limit]


class DedupAlertSink:
    """One alert per alert id, at least once: record pending, publish, mark published."""

    def __init__(self, log: DynamoDBAlertLog, sink: AlertSink, clock: Clock) -> None:
        self._log = log
        self._sink = sink
        self._clock = clock

    def publish(self, alert: Alert) -> None:
        """Publish unless an alert with the same id was published before.

        An error from the topic leaves the record pending and propagates: a retry of the same
        id, or the sweeper, publishes it.
        """
        stamped = (
            alert if alert.raised_at else alert.model_copy(update={"raised_at": self._clock.now()})
        )
        if self._log.record(stamped) is Recorded.PUBLISHED:
            return
        self._sink.publish(stamped)
        self._log.published(stamped.alert_id)

    def recent(self, *, limit: int = 50) -> list[Alert]:
        """Alerts newest first."""
        return self._log.recent(limit=limit)

    def entries(self, *, limit: int = 50) -> list[AlertEntry]:
        """Alerts newest first, with their pending state."""
        return self._log.entries(limit=limit)

    def unpublished(self, *, before: datetime, limit: int = 100) -> list[Alert]:
        """Alerts whose publish was never confirmed (see `DynamoDBAlertLog.unpublished`)."""
        return self._log.unpublished(before=before, limit=limit)
