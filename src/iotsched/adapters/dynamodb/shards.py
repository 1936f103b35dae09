"""Shard records: leases, their renewal and release, and their readers."""

from __future__ import annotations

import heapq
import json
import logging
from datetime import datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from iotsched.adapters.dynamodb.base import Table
from iotsched.adapters.dynamodb.codec import (
    attempt_end,
    attempt_value,
    shard_from,
)
from iotsched.adapters.dynamodb.keys import (
    LEASE_PREFIX,
    _lease_pk,
    _lease_sk,
    _shard_pk,
    lease_buckets,
)
from iotsched.adapters.dynamodb.partition_reads import take
from iotsched.adapters.dynamodb.transactions import _conditional_failure, _landed, _token
from iotsched.core.attempt_record import Attempt
from iotsched.core.buckets import partitions
from iotsched.core.shard_record import (
    ShardRecord,
    ShardStatus,
)
from iotsched.core.timeutil import iso, to_ms
from iotsched.ports.shards import LeaseResult, StaleAttemptError
from iotsched.ports.store_errors import StoreContendedError

log = logging.getLogger(__name__)


def _leasable(shard: ShardRecord, *, now: datetime, max_attempts: int) -> bool:
    """Whether the lease update's condition holds for this shard record (read just before)."""
    if shard.attempt >= max_attempts:
        return False
    if shard.status is ShardStatus.PENDING:
        return True
    return (
        shard.status is ShardStatus.RUNNING
        and shard.lease_until is not None
        and to_ms(shard.lease_until) <= to_ms(now)
    )


class Shards(Table):
    """Shard records: leases, their renewal and release, and their readers."""

    def expired_leases(self, now: datetime, *, limit: int = 1000) -> list[ShardRecord]:
        # Every LEASE#k bucket, and the one LEASE partition of earlier versions (a lease left
        # there by a worker that died at an upgrade), merged in the order of the lease ends'
        # minutes (the sort key starts with it: `keys._lease_sk`); the leases read, in the
        # order of their ends.
        upto = {"S": f"{iso(now)}#~"}
        streams = [
            self._paginate(
                "query",
                TableName=self._table,
                IndexName="by_deadline",
                KeyConditionExpression="open_pk = :lease AND open_sk <= :upto",
                ExpressionAttributeValues={":lease": {"S": pk}, ":upto": upto},
                # pages of at most `limit` keys: the sweep's minute may hold many live leases
                PaginationConfig={"PageSize": limit},
            )
            for pk in [*partitions(LEASE_PREFIX, lease_buckets(self._buckets)), LEASE_PREFIX]
        ]
        merged = heapq.merge(*streams, key=lambda item: str(item["open_sk"]["S"]))
        # the index holds keys only; eventually consistent, as every sweeper write is conditional
        found = [shard_from(i) for i in self._fetch(take(merged, limit), consistent=False)]
        ended = [
            s
            for s in found
            if s.status is ShardStatus.RUNNING
            and s.lease_until is not None
            and s.lease_until <= now
        ]
        return sorted(ended, key=lambda s: s.lease_until or now)

    def take_lease(
        self,
        instance_id: str,
        index: int,
        *,
        bounds: dict[str, object],
        worker: str,
        now: datetime,
        lease_until: datetime,
        max_attempts: int,
        indexed: bool = False,
    ) -> LeaseResult:
        # One conditional write per first delivery (see core.decisions.decide_lease):
        #   worker A ── PutItem(attribute_not_exists) ──► a new shard record, attempt 1
        #   (A dies; SQS shows the message again after the visibility timeout)
        #   worker B ── PutItem refused, ALL_OLD: lease expired ──► UpdateItem (the same rule,
        #               conditional again) ──► attempt n+1, A is fenced out
        #   duplicate C while B's lease is live ── PutItem refused, ALL_OLD says so ──► ack, no run
        # The first attempt, by far the most common, is a plain put of the whole record; only a
        # retry or a takeover pays a second request for the update expression (the same write
        # units on DynamoDB; far slower on the local emulator).
        token = _token()
        attempt = Attempt(number=1, worker=worker, started_at=now)
        item = {
            **self._shard_key(instance_id, index),
            "write_token": {"S": token},
            "status": {"S": ShardStatus.RUNNING.value},
            "attempt": {"N": "1"},
            "owner": {"S": worker},
            "lease_until_ms": {"N": str(to_ms(lease_until))},
            "instance_id": {"S": instance_id},
            "idx": {"N": str(index)},
            "bounds": {"S": json.dumps(bounds, sort_keys=True)},
            "attempts": {"L": [attempt_value(attempt)]},
            "max_attempts": {"N": str(max_attempts)},
        }
        if indexed:
            item["open_pk"] = {"S": _lease_pk(instance_id, index, self._buckets)}
            item["open_sk"] = {"S": _lease_sk(instance_id, index, lease_until)}
        try:
            self._single(
                f"lease of {instance_id} shard {index}",
                lambda: self._ddb.put_item(
                    TableName=self._table,
                    Item=item,
                    ConditionExpression="attribute_not_exists(pk)",
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                ),
            )
        except (StoreContendedError, BotoCoreError):
            # An earlier try may have landed, its answer lost, before the later ones failed: a
            # lease nobody holds would stand until the sweeper's takeover spent an attempt.
            self._withdraw_put(instance_id, index, token)
            raise
        except ClientError as exc:
            if not _conditional_failure(exc):
                raise
            old: Any = exc.response.get("Item")
            if not old:  # pragma: no cover - a failed condition implies an existing item
                raise
            if _landed(exc, token):  # our own put, whose response was lost
                return LeaseResult(taken=True, shard=shard_from(old))
            shard = shard_from(old)
            if not _leasable(shard, now=now, max_attempts=max_attempts):
                return LeaseResult(taken=False, shard=shard)  # what the update would refuse
            return self._retake_lease(
                instance_id,
                index,
                previous=shard,
                bounds=bounds,
                worker=worker,
                now=now,
                lease_until=lease_until,
                max_attempts=max_attempts,
                indexed=indexed,
            )
        return LeaseResult(taken=True, shard=shard_from(item))

    def _retake_lease(
        self,
        instance_id: str,
        index: int,
        *,
        previous: ShardRecord,
        bounds: dict[str, object],
        worker: str,
        now: datetime,
        lease_until: datetime,
        max_attempts: int,
        indexed: bool = False,
        retries: int = 2,
    ) -> LeaseResult:
        """The next attempt of a shard record that exists: pending, or its lease expired.

        A takeover (the record read `running`, its lease expired) closes the previous attempt's
        entry as `lost` in the same conditional write, fenced on that attempt's number: the
        entry closed is the one whose lease expired, or nothing is written.
        """
        new_attempt = attempt_value(Attempt(number=1, worker=worker, started_at=now))
        token = _token()
        n = previous.attempt
        if previous.status is ShardStatus.RUNNING and len(previous.attempts) == n >= 1:
            # attempts[n-1] is closed and attempts[n] set past the list's end (appended): two
            # paths that do not overlap, so one UpdateItem does both.
            lost = attempt_value(previous.attempts[-1].lost(now))["M"]
            fields = {"outcome": "outcome", "ended_at": "ended_at", "duration_ms": "duration_ms"}
            fields["error"] = "#err"
            attempts = "".join(f"attempts[{n - 1}].{p} = :lost_{f}, " for f, p in fields.items())
            attempts += f"attempts[{n}] = :new, "
            values = {f":lost_{f}": lost[f] for f in fields} | {":prev": {"N": str(n)}}
            condition = (
                "attempt = :prev AND attempt < :max AND #st = :running AND lease_until_ms <= :now"
            )
        else:
            attempts = "attempts = list_append(if_not_exists(attempts, :empty), :new), "
            values = {":empty": {"L": []}, ":pending": {"S": ShardStatus.PENDING.value}}
            new_attempt = {"L": [new_attempt]}
            condition = (
                "attribute_not_exists(pk) OR (attempt < :max AND (#st = :pending OR "
                "(#st = :running AND lease_until_ms <= :now)))"
            )
        if indexed:
            index_keys = ", open_pk = :lease_pk, open_sk = :lease_sk REMOVE #err"
            values[":lease_pk"] = {"S": _lease_pk(instance_id, index, self._buckets)}
            values[":lease_sk"] = {"S": _lease_sk(instance_id, index, lease_until)}
        else:  # a new attempt starts out of the lease index, as a first one (above)
            index_keys = " REMOVE #err, open_pk, open_sk"
        try:
            out = self._single(
                f"lease of {instance_id} shard {index}",
                lambda: self._ddb.update_item(
                    TableName=self._table,
                    Key=self._shard_key(instance_id, index),
                    UpdateExpression=(
                        "SET write_token = :wtok, #st = :running, "
                        "attempt = if_not_exists(attempt, :zero) + :one, "
                        "#owner = :worker, lease_until_ms = :until, instance_id = :iid, idx = :idx, "
                        f"bounds = if_not_exists(bounds, :bounds), {attempts}"
                        f"max_attempts = :max{index_keys}"
                    ),
                    ConditionExpression=condition,
                    ExpressionAttributeNames={"#st": "status", "#owner": "owner", "#err": "error"},
                    ExpressionAttributeValues={
                        **values,
                        ":running": {"S": ShardStatus.RUNNING.value},
                        ":zero": {"N": "0"},
                        ":one": {"N": "1"},
                        ":max": {"N": str(max_attempts)},
                        ":worker": {"S": worker},
                        ":until": {"N": str(to_ms(lease_until))},
                        ":now": {"N": str(to_ms(now))},
                        ":iid": {"S": instance_id},
                        ":idx": {"N": str(index)},
                        ":bounds": {"S": json.dumps(bounds, sort_keys=True)},
                        ":new": new_attempt,
                        ":wtok": {"S": token},
                    },
                    ReturnValues="ALL_NEW",
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                ),
            )
        except ClientError as exc:
            if not _conditional_failure(exc):
                raise
            old: Any = exc.response.get("Item")
            if not old:  # pragma: no cover - a failed condition implies an existing item
                raise
            # Our own lease whose response was lost: taken, as the item shows.
            if _landed(exc, token):
                return LeaseResult(taken=True, shard=shard_from(old))
            shard = shard_from(old)
            # The record changed since it was read (the expired attempt released it, say):
            # decide again on what it holds now, a bounded number of times.
            if retries > 0 and _leasable(shard, now=now, max_attempts=max_attempts):
                return self._retake_lease(
                    instance_id,
                    index,
                    previous=shard,
                    bounds=bounds,
                    worker=worker,
                    now=now,
                    lease_until=lease_until,
                    max_attempts=max_attempts,
                    indexed=indexed,
                    retries=retries - 1,
                )
            return LeaseResult(taken=False, shard=shard)
        return LeaseResult(taken=True, shard=shard_from(out["Attributes"]))

    def _fence(self, attempt: int) -> tuple[str, dict[str, str], dict[str, Any]]:
        return (
            "attempt = :attempt AND #st = :running",
            {"#st": "status"},
            {":attempt": {"N": str(attempt)}, ":running": {"S": ShardStatus.RUNNING.value}},
        )

    def extend_lease(
        self,
        instance_id: str,
        index: int,
        *,
        attempt: int,
        until: datetime,
        was: datetime | None = None,
    ) -> None:
        condition, names, values = self._fence(attempt)
        if was is not None:
            condition += " AND lease_until_ms = :was"
            values[":was"] = {"N": str(to_ms(was))}
        if not self._update_if(
            self._shard_key(instance_id, index),
            # the first move puts the lease into the index (see `_lease_pk`)
            "SET lease_until_ms = :until, open_pk = :lease_pk, open_sk = :lease_sk",
            condition,
            names,
            {
                **values,
                ":until": {"N": str(to_ms(until))},
                ":lease_pk": {"S": _lease_pk(instance_id, index, self._buckets)},
                ":lease_sk": {"S": _lease_sk(instance_id, index, until)},
            },
        ):
            raise StaleAttemptError(
                f"{instance_id} shard {index}: attempt {attempt} lost the lease"
            )

    def release_shard(self, instance_id: str, index: int, *, attempt: Attempt) -> None:
        condition, names, values = self._fence(attempt.number)
        ended, attempt_names, attempt_values = attempt_end(attempt)
        names |= attempt_names
        names["#owner"] = "owner"
        names["#err"] = "error"
        if not self._update_if(
            self._shard_key(instance_id, index),
            f"SET #st = :pending, {ended}, #err = :err "
            "REMOVE lease_until_ms, #owner, open_pk, open_sk",
            condition,
            names,
            {
                **values,
                ":pending": {"S": ShardStatus.PENDING.value},
                **attempt_values,
                ":err": {"S": attempt.error or ""},
            },
        ):
            raise StaleAttemptError(
                f"{instance_id} shard {index}: attempt {attempt.number} is stale"
            )

    def _withdraw_put(self, instance_id: str, index: int, token: str) -> None:
        """Delete the first take's record if it is our put's (its write token), best effort."""
        try:
            self._ddb.delete_item(
                TableName=self._table,
                Key=self._shard_key(instance_id, index),
                ConditionExpression="write_token = :tok",
                ExpressionAttributeValues={":tok": {"S": token}},
            )
        except (ClientError, BotoCoreError):
            log.warning(
                "a lease take of unknown outcome not withdrawn: the sweeper takes it over",
                extra={"instance_id": instance_id, "shard": index},
                exc_info=True,
            )

    def give_back_lease(self, taken: ShardRecord) -> None:
        instance_id, index, attempt = taken.instance_id, taken.index, taken.attempt
        assert taken.owner is not None and taken.lease_until is not None
        condition, names, values = self._fence(attempt)
        condition += " AND #owner = :owner AND lease_until_ms = :until"
        names["#owner"] = "owner"
        values |= {
            ":owner": {"S": taken.owner},
            ":until": {"N": str(to_ms(taken.lease_until))},
        }
        if attempt == 1:  # no record, as before the first take (nor one to expire)
            try:
                self._single(
                    f"give-back of {instance_id} shard {index}",
                    lambda: self._ddb.delete_item(
                        TableName=self._table,
                        Key=self._shard_key(instance_id, index),
                        ConditionExpression=condition,
                        ExpressionAttributeNames=names,
                        ExpressionAttributeValues=values,
                        ReturnValuesOnConditionCheckFailure="ALL_OLD",
                    ),
                )
            except ClientError as exc:
                if not _conditional_failure(exc):
                    raise
                if exc.response.get("Item"):  # another take since: left alone
                    raise StaleAttemptError(f"{instance_id} shard {index}: take not ours") from exc
            return  # deleted (or, no item: our delete sent again)
        # The attempt's entry is the last of the list (a takeover appended it after closing
        # the lost one): removed by its index, with the number, in one write fenced on the take.
        if not self._update_if(
            self._shard_key(instance_id, index),
            f"SET #st = :pending, attempt = :before REMOVE attempts[{attempt - 1}], "
            "lease_until_ms, #owner, open_pk, open_sk",
            condition,
            names,
            {
                **values,
                ":pending": {"S": ShardStatus.PENDING.value},
                ":before": {"N": str(attempt - 1)},
            },
        ):
            raise StaleAttemptError(f"{instance_id} shard {index}: take not ours")

    def get_shard(self, instance_id: str, index: int) -> ShardRecord | None:
        item = self._read(
            f"read of {instance_id} shard {index}",
            lambda: self._ddb.get_item(
                TableName=self._table, Key=self._shard_key(instance_id, index), ConsistentRead=True
            ),
        ).get("Item")
        return shard_from(dict(item)) if item else None

    def list_shards(self, instance_id: str) -> list[ShardRecord]:
        # A query per part, merged by index (each part's records come in index order).
        parts = self._parts(instance_id)
        streams = [
            self._paginate(
                "query",
                TableName=self._table,
                KeyConditionExpression="pk = :pk AND begins_with(sk, :shard)",
                ExpressionAttributeValues={
                    ":pk": {"S": _shard_pk(instance_id, part, parts)},
                    ":shard": {"S": "SHARD#"},
                },
                ConsistentRead=True,
            )
            for part in range(parts)
        ]
        merged = heapq.merge(*streams, key=lambda item: str(item["sk"]["S"]))
        return [shard_from(item) for item in merged]
