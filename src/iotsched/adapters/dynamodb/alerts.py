"""The alert log on the scheduler's table: `DynamoDBAlertLog` (the at-least-once publish
over it is `iotsched.adapters.alerting.DedupAlertSink`).

An alert's record is also the alert history that `iotsched alerts` reads (newest first, from
the `by_status` index under the partitions `ALERTS#<day>#<k>`: the UTC day it was raised, and k
the bucket of its id, see iotsched.core.buckets); while pending it also sits in an owing
partition of `by_deadline` (as an instance that owes follow-ups does).
"""

from __future__ import annotations

import heapq
import itertools
import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from iotsched.adapters.dynamodb.keys import (
    ALERT_PREFIX,
    _alert_key,
    _alerts_pk,
    _day_prefix,
    owed_partition,
    owed_partitions,
)
from iotsched.adapters.dynamodb.partition_reads import (
    batch_get,
    gather_page,
    merged,
)
from iotsched.clock import SystemClock
from iotsched.core.alert_message import Alert
from iotsched.core.buckets import DEFAULT_BUCKETS, partitions
from iotsched.core.task_policies import DEFAULT_RETENTION_DAYS
from iotsched.core.timeutil import iso
from iotsched.ports.clock import Clock
from iotsched.ports.messaging import AlertEntry

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

#: The alert log (`iotsched alerts`, GET /alerts) reads back this many days before today.
ALERT_LOOKBACK_DAYS = 14


def _expires_at(alert: Alert, raised_at: datetime) -> datetime:
    """When the alert's record may be deleted: its task's retention after it was raised."""
    return raised_at + timedelta(days=alert.retention_days or DEFAULT_RETENTION_DAYS)


class Recorded(StrEnum):
    """What recording an alert found."""

    NEW = "new"  # recorded now: publish it
    PENDING = "pending"  # recorded before, its publish never confirmed: publish it (again)
    PUBLISHED = "published"  # published before: drop this one


class DynamoDBAlertLog:
    """Alert records on the scheduler's table (`ALERT#<id>`)."""

    def __init__(
        self,
        client: DynamoDBClient,
        table: str,
        *,
        buckets: int = DEFAULT_BUCKETS,
        clock: Clock | None = None,
    ) -> None:
        self._ddb = client
        self._table = table
        self._buckets = buckets  # the deployment's IndexBuckets
        self._clock = clock or SystemClock()  # where the log's days are read back from

    def record(self, alert: Alert) -> Recorded:
        """Record the alert as pending unless its id was recorded before; see `Recorded`."""
        assert alert.raised_at is not None
        try:
            self._ddb.put_item(
                TableName=self._table,
                Item={
                    **_alert_key(alert.alert_id),
                    "kind": {"S": "alert"},
                    "body": {"S": alert.model_dump_json()},
                    "status_pk": {"S": _alerts_pk(alert.alert_id, alert.raised_at, self._buckets)},
                    "status_sk": {"S": f"{iso(alert.raised_at)}#{alert.alert_id}"},
                    # pending until `published`: the sweeper finds it here, from the end of
                    # the silence that holds it
                    "open_pk": {"S": owed_partition(f"ALERT#{alert.alert_id}", self._buckets)},
                    "open_sk": {
                        "S": f"{iso(alert.silenced_until or alert.raised_at)}#ALERT#"
                        f"{alert.alert_id}"
                    },
                    # the TTL: the task's retention after it was raised
                    "expires_at": {"N": str(int(_expires_at(alert, alert.raised_at).timestamp()))},
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
                    TableName=self._table, Key=_alert_key(alert.alert_id), ConsistentRead=True
                ).get("Item", {})
            return Recorded.PENDING if "open_pk" in old else Recorded.PUBLISHED
        return Recorded.NEW

    def published(self, alert_id: str) -> None:
        """Strike the pending mark: the topic took the alert."""
        self._ddb.update_item(
            TableName=self._table,
            Key=_alert_key(alert_id),
            UpdateExpression="REMOVE open_pk, open_sk",
            ConditionExpression="attribute_exists(pk)",
        )

    def recent(self, *, limit: int = 50) -> list[Alert]:
        """Alerts newest first."""
        return [entry.alert for entry in self.entries(limit=limit)]

    def entries(self, *, limit: int = 50) -> list[AlertEntry]:
        """Alerts newest first, each pending while it keeps its mark in `by_deadline`.

        Day by day from tomorrow (a clock a little ahead) back ALERT_LOOKBACK_DAYS, every
        bucket of a day merged; the next day is read only while the limit is not reached.
        Alerts recorded under the single partition `ALERTS` (before the log had days and
        buckets) are merged in as well.
        """
        today = self._clock.now().date()
        days = (today + timedelta(days=1 - n) for n in range(ALERT_LOOKBACK_DAYS + 2))
        recent = itertools.chain.from_iterable(
            self._newest_first(partitions(_day_prefix(day), self._buckets), limit) for day in days
        )
        merged = heapq.merge(
            recent,
            self._newest_first([ALERT_PREFIX], limit),
            key=lambda item: str(item["status_sk"]["S"]),
            reverse=True,
        )
        # the index holds keys only: the newest `limit` entries name the items to read
        items = self._fetch(list(itertools.islice(merged, limit)))
        return [
            AlertEntry(Alert.model_validate(json.loads(item["body"]["S"])), "open_pk" in item)
            for item in items
        ]

    def _newest_first(self, pks: list[str], limit: int) -> Iterator[dict[str, Any]]:
        """The alerts of the partitions `pks`, merged newest first (queried when first read)."""
        requests = [
            {
                "TableName": self._table,
                "IndexName": "by_status",
                "KeyConditionExpression": "status_pk = :alerts",
                "ExpressionAttributeValues": {":alerts": {"S": pk}},
                "ScanIndexForward": False,
                "Limit": gather_page(limit, len(pks)),
            }
            for pk in pks
        ]
        return merged(self._ddb, requests, order="status_sk", newest_first=True)

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
        for pk in owed_partitions(self._buckets):
            kwargs: dict[str, Any] = {
                "TableName": self._table,
                "IndexName": "by_deadline",
                "KeyConditionExpression": "open_pk = :owed AND open_sk < :before",
                "FilterExpression": "#kind = :alert",
                "ExpressionAttributeNames": {"#kind": "kind"},
                "ExpressionAttributeValues": {
                    ":owed": {"S": pk},
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
