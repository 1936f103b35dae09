"""Instance items: the record, its status moves and the readers of instances."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import date, datetime
from typing import Any

from botocore.exceptions import ClientError

from iotsched.adapters.dynamodb.codec import (
    DAY_S,
    StripedCounts,
    _epoch_s,
    _from_item,
    _to_item,
    instance_from,
    instance_item,
    striped_counts,
)
from iotsched.adapters.dynamodb.keys import (
    STATUS_PREFIX,
    SUBMISSION_PARTITION,
    _counter_key,
    _date_pk,
    _instance_id_of,
    _instance_key,
    _item_id,
    _key_of,
    _request_key,
    _status_pk,
    _stripe_key,
    owed_partition,
)
from iotsched.adapters.dynamodb.partition_reads import take
from iotsched.adapters.dynamodb.tasks import Tasks
from iotsched.adapters.dynamodb.transactions import _conditional_failure
from iotsched.core.buckets import DEFAULT_BUCKETS, partitions
from iotsched.core.instance_record import (
    FINAL_INSTANCE,
    FollowUp,
    InstanceRecord,
    InstanceStatus,
    incarnation_range,
    listing_key,
)
from iotsched.core.task_policies import DEFAULT_RETENTION_DAYS
from iotsched.core.timeutil import iso


def _status_change(
    instance_id: str,
    status: InstanceStatus,
    *,
    reason: str | None = None,
    finished_at: datetime | None = None,
    owed: Sequence[FollowUp] = (),
    buckets: int = DEFAULT_BUCKETS,
) -> tuple[dict[str, Any], str, dict[str, Any]]:
    """An instance's move to `status`, its index keys with it: (key, expression, values).

    A final status with follow-ups `owed` records them in the same write, and moves the item
    from the open partition to an owing one (see `OWED_PREFIX`) rather than out of the index.
    """
    key = _instance_key(instance_id)
    sets = ["#st = :status", "status_pk = :status_pk", "status_sk = :status_sk"]
    values: dict[str, Any] = {
        ":status": {"S": status.value},
        ":status_pk": {"S": _status_pk(status, instance_id, buckets)},
        ":status_sk": {"S": listing_key(instance_id)},
    }
    if reason is not None:
        sets.append("reason = :reason")
        values[":reason"] = {"S": reason}
    if finished_at is not None:
        sets.append("finished_at = :fin")
        values[":fin"] = {"S": iso(finished_at)}
        if status in FINAL_INSTANCE:
            # The TTL, in the write that ends it: its retention (stored at the claim) after its
            # end; an item claimed before retention existed takes the default.
            sets.append("expires_at = if_not_exists(retention_s, :default_retention) + :fin_s")
            values[":default_retention"] = {"N": str(DEFAULT_RETENTION_DAYS * DAY_S)}
            values[":fin_s"] = {"N": str(_epoch_s(finished_at))}
    owing = bool(owed) and status in FINAL_INSTANCE
    if owing:
        sets += ["owed = :owed", "open_pk = :owed_pk", "open_sk = :owed_sk"]
        values[":owed"] = {"SS": sorted(step.value for step in owed)}
        values[":owed_pk"] = {"S": owed_partition(instance_id, buckets)}
        values[":owed_sk"] = {"S": f"{iso(finished_at) if finished_at else ''}#{instance_id}"}
    expression = "SET " + ", ".join(sets)
    # A submission leaves the due index once it starts; a final instance leaves the open one.
    removes = [] if status is InstanceStatus.SCHEDULED else ["due_pk", "due_sk"]
    if status in FINAL_INSTANCE and not owing:
        removes += ["open_pk", "open_sk"]
    if removes:
        expression += " REMOVE " + ", ".join(removes)
    return key, expression, values


class Instances(Tasks):
    """Instance items: the record, its status moves and the readers of instances."""

    def _instance_item(self, inst: InstanceRecord) -> dict[str, Any]:
        """`codec.instance_item` with this store's buckets."""
        return instance_item(inst, self._buckets)

    def _instances_from(self, items: Sequence[dict[str, Any]]) -> list[InstanceRecord]:
        """Instance items as records, each with its counter or its stripes (read in
        BatchGetItem requests)."""
        for item in items:
            self._remember_layout(item)
        keys = [self._count_keys(item["instance_id"]["S"]) for item in items]
        counters = self._batch_get([key for group in keys for key in group])
        return [self._with_counts(item, counters) for item in items]

    def _fetch_instances(
        self, entries: Sequence[Mapping[str, Any]], *, consistent: bool = True
    ) -> list[InstanceRecord]:
        """The instances named by index entries (keys only: the by_status, by_deadline and
        by_due indexes project no instance body), read whole with their counters, in the
        entries' order; one no longer there is left out. An instance counted on stripes that
        this store did not know of has them read after its item, in one more batch read."""
        groups = []
        for entry in entries:
            instance_id = _instance_id_of(entry)
            key = {"pk": entry["pk"], "sk": entry["sk"]}
            groups.append((key, self._count_keys(instance_id, read=False)))
        wanted = [key for key, counts in groups for key in (key, *counts)]
        read = self._batch_get(wanted, consistent=consistent)
        found = [(read[_key_of(key)], counts) for key, counts in groups if _key_of(key) in read]
        for item, _ in found:
            self._remember_layout(item)
        late = [
            key
            for item, counts in found
            for key in self._count_keys(item["instance_id"]["S"])
            if key not in counts
        ]
        if late:
            read |= self._batch_get(late, consistent=consistent)
        return [self._with_counts(item, read) for item, _ in found]

    def _count_keys(self, instance_id: str, *, read: bool = True) -> list[dict[str, Any]]:
        """The keys an instance's counts are read from: its stripes, or its counter item.
        `read=False`: as this store knows its layout without reading it (not known: its
        counter item)."""
        if not read and instance_id not in self._layouts:
            return [_counter_key(instance_id)]
        stripes = self._stripes(instance_id)
        if stripes:
            return [_stripe_key(instance_id, j) for j in range(stripes)]
        return [_counter_key(instance_id)]

    def _with_counts(
        self, item: dict[str, Any], read: Mapping[tuple[str, str], Any]
    ) -> InstanceRecord:
        """An instance item as a record, its counts from `read` (its stripes, or its counter)."""
        instance_id = item["instance_id"]["S"]
        if self._stripes(instance_id):
            keys = self._count_keys(instance_id)
            return instance_from(item, stripes=[read.get(_key_of(key)) for key in keys])
        return instance_from(item, read.get(_key_of(_counter_key(instance_id))))

    def _striped(self, instance_id: str) -> StripedCounts:
        """An instance counted on stripes: its counts, read strongly consistent."""
        stripes = self._count_keys(instance_id)
        read = self._read(
            f"counts of {instance_id}", lambda: self._batch_get(stripes, consistent=True)
        )
        return striped_counts(
            self._layout(instance_id).planned, [read.get(_key_of(k)) for k in stripes]
        )

    def set_instance_status(
        self,
        instance_id: str,
        *,
        expected: InstanceStatus,
        status: InstanceStatus,
        reason: str | None = None,
        finished_at: datetime | None = None,
        owed: Sequence[FollowUp] = (),
    ) -> bool:
        return self._set_status(
            instance_id,
            status=status,
            condition="#st = :expected",
            values={":expected": {"S": expected.value}},
            reason=reason,
            finished_at=finished_at,
            owed=owed,
        )

    def due_submissions(
        self, now: datetime, *, bucket: int | None = None, limit: int | None = None
    ) -> list[InstanceRecord]:
        found: list[InstanceRecord] = []
        for due_pk in self._due_partitions(SUBMISSION_PARTITION, bucket):
            if limit is not None and len(found) >= limit:
                break
            entries = list(
                self._paginate(
                    "query",
                    TableName=self._table,
                    IndexName="by_due",
                    KeyConditionExpression="due_pk = :sub AND due_sk <= :upto",
                    ExpressionAttributeValues={
                        ":sub": {"S": due_pk},
                        ":upto": {"S": f"{iso(now)}#~"},
                    },
                )
            )
            found += [
                instance
                for instance in self._fetch_instances(entries)
                if instance.status is InstanceStatus.SCHEDULED  # the index lags
            ][:limit]
        found.sort(key=lambda i: (i.fire_at or now, i.instance_id))
        return found[:limit]

    def record_request(self, request_key: str, instance_id: str) -> str:
        try:
            self._single(
                f"request {request_key}",
                lambda: self._ddb.put_item(
                    TableName=self._table,
                    Item={
                        **_request_key(request_key),
                        **_to_item({"kind": "request", "instance_id": instance_id}),
                    },
                    ConditionExpression="attribute_not_exists(pk)",
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                ),
            )
        except ClientError as exc:
            if not _conditional_failure(exc):
                raise
            old: Any = exc.response.get("Item")
            if old:
                return str(_from_item(old)["instance_id"])
            item = self._ddb.get_item(
                TableName=self._table,
                Key=_request_key(request_key),
                ConsistentRead=True,
            )["Item"]
            return str(_from_item(item)["instance_id"])
        return instance_id

    def _set_status(
        self,
        instance_id: str,
        *,
        status: InstanceStatus,
        condition: str,
        values: dict[str, Any],
        reason: str | None = None,
        finished_at: datetime | None = None,
        owed: Sequence[FollowUp] = (),
    ) -> bool:
        key, expression, change = _status_change(
            instance_id,
            status,
            reason=reason,
            finished_at=finished_at,
            owed=owed,
            buckets=self._buckets,
        )
        return self._update_if(key, expression, condition, {"#st": "status"}, {**values, **change})

    def get_instance(self, instance_id: str) -> InstanceRecord | None:
        try:
            key = _instance_key(instance_id)
        except KeyError:
            return None
        # The instance item and its counter item, in one request.
        found = self._read(f"read of {instance_id}", lambda: self._fetch_instances([key]))
        return found[0] if found else None

    def instance_ended(self, instance_id: str) -> bool:
        try:
            key = _instance_key(instance_id)
        except KeyError:
            return True
        # The instance item alone (not its counter), eventually consistent: half the read
        # units of the worker's consistent read, for a poll repeated every renewal period.
        item = self._read(
            f"status of {instance_id}",
            lambda: self._ddb.get_item(
                TableName=self._table,
                Key=key,
                ProjectionExpression="#st",
                ExpressionAttributeNames={"#st": "status"},
            ),
        ).get("Item")
        return item is None or InstanceStatus(item["status"]["S"]).final

    def list_instances(
        self,
        *,
        task_id: str | None = None,
        status: InstanceStatus | None = None,
        limit: int = 100,
        before: str | None = None,
        incarnation: int | None = None,
    ) -> list[InstanceRecord]:
        if task_id is not None:
            # one incarnation's instances are one range of keys (`_instance_key`)
            first = "INST" + (incarnation_range(incarnation) if incarnation else "")
            kwargs: dict[str, Any] = {
                "TableName": self._table,
                "KeyConditionExpression": "pk = :pk AND begins_with(sk, :inst)",
                "ExpressionAttributeValues": {
                    ":pk": {"S": f"TASK#{task_id}"},
                    ":inst": {"S": first},
                },
                "ScanIndexForward": False,
                "ConsistentRead": True,
            }
            if before is not None:  # a page on: from the item before the cursor's
                kwargs["KeyConditionExpression"] = "pk = :pk AND sk BETWEEN :inst AND :before"
                kwargs["ExpressionAttributeValues"][":before"] = _instance_key(before)["sk"]
            if status is not None:
                kwargs["FilterExpression"] = "#st = :st"
                kwargs["ExpressionAttributeNames"] = {"#st": "status"}
                kwargs["ExpressionAttributeValues"][":st"] = {"S": status.value}
            items = take(
                # BETWEEN includes the cursor's own item (a key cannot be filtered on)
                (i for i in self._paginate("query", **kwargs) if _item_id(i) != before),
                limit,
            )
            return self._instances_from(items)
        # Every bucket of the status (of every status), merged newest slot first: the sort
        # key is `<slot>#<id>`, so no bucket is read past the `limit` newest of its own.
        statuses = [status] if status is not None else list(InstanceStatus)
        condition, after = "status_pk = :sp", {}
        if before is not None:  # a page on: every bucket from below the cursor's sort key
            condition += " AND status_sk < :before"
            after = {":before": {"S": listing_key(before)}}
        items = self._gather(
            [
                {
                    "IndexName": "by_status",
                    "KeyConditionExpression": condition,
                    "ExpressionAttributeValues": {":sp": {"S": pk}, **after},
                    "ScanIndexForward": False,
                }
                for st in statuses
                for pk in partitions(f"{STATUS_PREFIX}#{st.value}", self._buckets)
            ],
            order="status_sk",
            limit=limit,
            newest_first=True,
        )
        # the index holds keys only: the newest `limit` entries are read whole
        return self._fetch_instances(items)

    def instances_for_date(self, task_id: str, day: date) -> list[InstanceRecord]:
        # The by_date index holds the keys only (one index write per instance, at its claim:
        # no later update touches `date_pk`); each instance is then read strongly consistent.
        found = self._fetch_instances(
            list(
                self._paginate(
                    "query",
                    TableName=self._table,
                    IndexName="by_date",
                    KeyConditionExpression="date_pk = :d",
                    ExpressionAttributeValues={":d": {"S": _date_pk(task_id, day)}},
                )
            )
        )
        return sorted(found, key=lambda i: (i.created_at, i.instance_id))
