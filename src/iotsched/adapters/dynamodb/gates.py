"""Shard-start gates: the starts counted in the current minute, and the fence of an instance.

One small item per gate: `INST#<instance id>` / `GATE` (an instance's own), or
`GATE#<key>` / `GATE` (a budget several instances share, e.g. `<tenant>#<task>`), never a key
every instance writes. Attributes: `minute_ms` (the minute counted), `starts` (its starts, by
weight), `seq` (the number of writes that counted, ever), `t0`..`t7` (the tokens of the last
eight counting writes, slot `seq mod 8`), `closed` (why starts were closed: on an instance's
own gate only) and `expires_at` (TTL).

A start is a compare-and-set on `seq`, after a consistent read: `SET seq = seq + 1, minute,
starts, t<seq mod 8> = token IF seq = <read> AND attribute_not_exists(closed)`. So:

* concurrent takers never count past the limit: each write was computed from the exact state
  it replaces (a refused one reads the state from its refusal, `ALL_OLD`, and computes again);
* a write whose response was lost is sent again by botocore and then always fails its own
  condition (`seq` moved), with `ALL_OLD` showing its token in its slot: it is read as
  counted, once. Its token leaves the slot only after eight more counting writes, far more
  than land while botocore retries (an increment instead of the set would count the retry
  again whenever no other write came between);
* `closed` in the condition fences the start against `close_starts` in the same write.

A start with no rate (`limit` None) writes nothing: a consistent read of the instance's own gate
is its fence (a start read open happened before the close). A start on a shared gate counts
there, then reads the instance's own gate for the fence.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError

from iotsched.adapters.dynamodb.base import Table
from iotsched.adapters.dynamodb.codec import _epoch_s
from iotsched.adapters.dynamodb.keys import _gate_key
from iotsched.adapters.dynamodb.transactions import _conditional_failure, _token
from iotsched.core.timeutil import to_ms
from iotsched.ports import StartVerdict, StoreContendedError

#: Token slots on a gate item (see the module docstring).
GATE_TOKENS = 8
#: Compare-and-set rounds before a contended start gives up (StoreContendedError).
GATE_ROUNDS = 12
#: How long a gate item is kept after its last write: as long as a copy of a shard message may
#: come back (the shard queue's 4 days, then a redrive from the DLQ's 14).
GATE_RETENTION = timedelta(days=18)

_NAMES = {"#seq": "seq", "#minute": "minute_ms", "#starts": "starts", "#exp": "expires_at"}


def _number(item: dict[str, Any], name: str) -> int:
    value = item.get(name, {}).get("N")
    return int(value) if value is not None else 0


class Gates(Table):
    """The gates of shard starts (InstanceStore.take_start, close_starts)."""

    def take_start(
        self,
        instance_id: str,
        *,
        gate: str | None,
        minute: datetime,
        limit: int | None,
        weight: int = 1,
    ) -> StartVerdict:
        if limit is None:
            return StartVerdict.CLOSED if self._starts_closed(instance_id) else StartVerdict.STARTED
        verdict = self._count_start(
            _gate_key(instance_id, gate),
            fenced=gate is None,
            minute=minute,
            limit=limit,
            weight=weight,
        )
        # Counted on a shared gate: the fence is the instance's own, read after the count (so a
        # start answered STARTED was read open after it was counted).
        if (
            verdict is StartVerdict.STARTED
            and gate is not None
            and self._starts_closed(instance_id)
        ):
            return StartVerdict.CLOSED
        return verdict

    def _count_start(
        self, key: dict[str, Any], *, fenced: bool, minute: datetime, limit: int, weight: int
    ) -> StartVerdict:
        read: Any = self._ddb.get_item(TableName=self._table, Key=key, ConsistentRead=True)
        item: dict[str, Any] = dict(read.get("Item") or {})
        for _ in range(GATE_ROUNDS):
            if fenced and "closed" in item:
                return StartVerdict.CLOSED
            at = max(to_ms(minute), _number(item, "minute_ms"))
            used = _number(item, "starts") if at == _number(item, "minute_ms") else 0
            if used and used + weight > limit:
                return StartVerdict.WAIT
            seq = _number(item, "seq")
            slot = f"t{(seq + 1) % GATE_TOKENS}"
            token = _token()
            names = {**_NAMES, "#slot": slot}
            condition = "#seq = :seq" if "seq" in item else "attribute_not_exists(#seq)"
            if fenced:  # DynamoDB refuses a name the expressions do not use
                condition += " AND attribute_not_exists(#closed)"
                names["#closed"] = "closed"
            values: dict[str, Any] = {
                ":next": {"N": str(seq + 1)},
                ":minute": {"N": str(at)},
                ":starts": {"N": str(used + weight)},
                ":tok": {"S": token},
                ":exp": {"N": str(_epoch_s(minute + GATE_RETENTION))},
            }
            if "seq" in item:
                values[":seq"] = {"N": str(seq)}
            refused = self._write_start(
                {
                    "TableName": self._table,
                    "Key": key,
                    "UpdateExpression": "SET #seq = :next, #minute = :minute,"
                    " #starts = :starts, #slot = :tok, #exp = :exp",
                    "ConditionExpression": condition,
                    "ExpressionAttributeNames": names,
                    "ExpressionAttributeValues": values,
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                }
            )
            if refused is None:
                return StartVerdict.STARTED
            if refused.get(slot, {}).get("S") == token:
                return StartVerdict.STARTED  # our own write, landed: its response was lost
            item = refused  # another start (or a close) came first: compute again from it
        raise StoreContendedError(
            f"start gate {key['pk']['S']}: contended through {GATE_ROUNDS} rounds"
        )

    def _write_start(self, request: dict[str, Any]) -> dict[str, Any] | None:
        """One counting write: None if it was written, else the item as its refusal showed it
        (empty if there was none)."""
        try:
            self._single(
                f"start gate {request['Key']['pk']['S']}",
                lambda: self._ddb.update_item(**request),
            )
        except ClientError as exc:
            if not _conditional_failure(exc):
                raise
            old: Any = exc.response.get("Item") or {}
            return dict(old)
        return None

    def _starts_closed(self, instance_id: str) -> bool:
        item = self._ddb.get_item(
            TableName=self._table,
            Key=_gate_key(instance_id, None),
            ConsistentRead=True,
            ProjectionExpression="#closed",
            ExpressionAttributeNames={"#closed": "closed"},
        ).get("Item")
        return bool(item)

    def close_starts(self, instance_id: str, reason: str) -> None:
        key = _gate_key(instance_id, None)
        # Unconditional and idempotent: a retried request writes the same. The first reason
        # stays. TTL from the wall clock: DynamoDB deletes expired items by it.
        expires = int(time.time()) + int(GATE_RETENTION.total_seconds())
        self._single(
            f"close starts of {instance_id}",
            lambda: self._ddb.update_item(
                TableName=self._table,
                Key=key,
                UpdateExpression="SET #closed = if_not_exists(#closed, :reason), #exp = :exp",
                ExpressionAttributeNames={"#closed": "closed", "#exp": "expires_at"},
                ExpressionAttributeValues={
                    ":reason": {"S": reason},
                    ":exp": {"N": str(expires)},
                },
            ),
        )
