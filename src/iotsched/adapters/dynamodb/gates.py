"""Gates: seats sold per minute in order, and the fence of an instance's starts.

A seat gate is one small item, `GATE#<name>` / `GATE` (a rollout's, `instance#<id>` or
`<tenant>#<task>`; a tenant's instances, `quota#<tenant>#instances`). A seat is one conditional
UpdateItem: concurrent takers never put more than the limit in a minute, and a seat whose
response was lost is sold once. The fence is `closed` on `INST#<instance id>` / `GATE`, and for
an instance of more than `FENCE_SHARDS_PER_PART` shards also on `INST#<instance id>#FENCE#<k>` /
`GATE`: each start reads the part its shard falls in, so no item takes every start's read. How
the writes hold that: docs/design.md, section 11, "The gates".
"""

from __future__ import annotations

import time
import zlib
from datetime import datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError

from iotsched.adapters.dynamodb.base import Table
from iotsched.adapters.dynamodb.codec import _epoch_s
from iotsched.adapters.dynamodb.keys import _gate_key
from iotsched.adapters.dynamodb.transactions import _conditional_failure, _token
from iotsched.core.timeutil import from_ms, to_ms
from iotsched.ports.store_errors import StoreContendedError

#: Token slots on a gate item (see the module docstring).
GATE_TOKENS = 16
#: Writes a seat tries before it gives up (StoreContendedError). DynamoDB applies one write of
#: an item at a time and each round's refusal names what won it, so each round one of the
#: concurrent takers is served: N takers need at most N rounds.
SEAT_ROUNDS = 32
#: How long a gate item is kept after its last write: as long as a copy of a shard message may
#: come back (the shard queue's 4 days, then a redrive from the DLQ's 14).
GATE_RETENTION = timedelta(days=18)
#: A fence part per this many shards of the instance, up to `FENCE_PARTS`: a part is read
#: strongly consistent by each start of its shards, and one item serves 3,000 such reads a
#: second, so an instance's starts may come as fast as its shards can be run.
FENCE_SHARDS_PER_PART = 1_000
FENCE_PARTS = 16


def fence_parts(shards: int | None) -> int:
    """The items an instance of `shards` shards spreads its fence over (None: the most)."""
    if shards is None:
        return FENCE_PARTS
    return max(1, min(FENCE_PARTS, -(-shards // FENCE_SHARDS_PER_PART)))


def _fence_key(instance_id: str, part: int) -> dict[str, Any]:
    if part == 0:
        return _gate_key(instance_id, None)  # the fence of an instance of one part
    return {"pk": {"S": f"INST#{instance_id}#FENCE#{part}"}, "sk": {"S": "GATE"}}


def _number(item: dict[str, Any], name: str) -> int:
    value = item.get(name, {}).get("N")
    return int(value) if value is not None else 0


class Gates(Table):
    """Seats on gates (InstanceStore.take_seat) and the fence of an instance's starts
    (starts_closed, close_starts)."""

    def take_seat(
        self,
        gate: str,
        *,
        minute: datetime,
        limit: int,
        weight: int = 1,
        latest: datetime | None = None,
    ) -> datetime | None:
        # One conditional write into an exact minute, chosen from what the item held (ALL_OLD
        # of a refusal), first assuming our own minute is the last one sold:
        #   room for `weight` in the last minute sold (ours or later) ── seats + weight there
        #   none sold at or after our minute                         ── our minute, weight
        #   no room in the last minute sold                           ── the minute after it
        # Each write leaves `<token>@<its minute>` in the slot its token hashes to: a retry of
        # a write that landed is refused and reads its own token there, with the minute it sold.
        key = _gate_key("", gate)
        token = _token()
        slot = f"t{zlib.crc32(token.encode()) % GATE_TOKENS}"
        names = {"#seat": "seat_ms", "#seats": "seats", "#exp": "expires_at", "#slot": slot}
        at = to_ms(minute)
        horizon = None if latest is None else to_ms(latest)
        target, request = at, self._seat_request("count", at, limit - weight)
        for _ in range(SEAT_ROUNDS):
            if horizon is not None and target > horizon:
                return None  # no seat at or before `latest`: none sold
            mark = f"{token}@{target}"
            request["ExpressionAttributeValues"] |= {
                ":w": {"N": str(weight)},
                ":mark": {"S": mark},
                ":exp": {"N": str(_epoch_s(from_ms(target) + GATE_RETENTION))},
            }
            try:
                self._seat_write(
                    gate,
                    {
                        "TableName": self._table,
                        "Key": key,
                        "ExpressionAttributeNames": names,
                        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                        **request,
                    },
                )
                return from_ms(target)
            except ClientError as exc:
                if not _conditional_failure(exc):
                    raise
                refused: Any = exc.response.get("Item") or {}
                old: dict[str, Any] = dict(refused)
            mine = old.get(slot, {}).get("S", "")
            if mine.startswith(f"{token}@"):
                return from_ms(int(mine.rsplit("@", 1)[1]))  # ours, its response lost
            last = _number(old, "seat_ms") if "seat_ms" in old else None
            if last is None or last < at:
                target, request = at, self._seat_request("open", at, limit - weight)
            elif _number(old, "seats") + weight > limit:
                target = last + 60_000
                request = self._seat_request("next", last, limit - weight)
            else:  # room in the last minute sold
                target, request = last, self._seat_request("count", last, limit - weight)
        raise StoreContendedError(f"seat on gate {gate}: contended through its rounds")

    @staticmethod
    def _seat_request(kind: str, minute_ms: int, room: int) -> dict[str, Any]:
        """The write of a seat: `count` one more in `minute_ms` (the last minute sold), `open`
        `minute_ms` (later than any sold), `next` the minute after `minute_ms` (full)."""
        if kind == "count":
            return {
                "UpdateExpression": "SET #seats = #seats + :w, #slot = :mark, #exp = :exp",
                "ConditionExpression": "#seat = :minute AND #seats <= :room"
                " AND (attribute_not_exists(#slot) OR #slot <> :mark)",
                "ExpressionAttributeValues": {
                    ":minute": {"N": str(minute_ms)},
                    ":room": {"N": str(room)},
                },
            }
        if kind == "open":
            return {
                "UpdateExpression": "SET #seat = :minute, #seats = :w, #slot = :mark, #exp = :exp",
                "ConditionExpression": "attribute_not_exists(#seat) OR #seat < :minute",
                "ExpressionAttributeValues": {":minute": {"N": str(minute_ms)}},
            }
        return {
            "UpdateExpression": "SET #seat = :next, #seats = :w, #slot = :mark, #exp = :exp",
            "ConditionExpression": "#seat = :minute AND #seats > :room",
            "ExpressionAttributeValues": {
                ":next": {"N": str(minute_ms + 60_000)},
                ":minute": {"N": str(minute_ms)},
                ":room": {"N": str(room)},
            },
        }

    def _seat_write(self, gate: str, request: dict[str, Any]) -> Any:
        return self._single(f"seat on gate {gate}", lambda: self._ddb.update_item(**request))

    def starts_closed(self, instance_id: str, *, shard: int = 0, shards: int = 1) -> bool:
        key = _fence_key(instance_id, shard % fence_parts(shards))
        item = self._read(
            f"fence of {instance_id}",
            lambda: self._ddb.get_item(
                TableName=self._table,
                Key=key,
                ConsistentRead=True,
                ProjectionExpression="#closed",
                ExpressionAttributeNames={"#closed": "closed"},
            ),
        ).get("Item")
        return bool(item)

    def close_starts(self, instance_id: str, reason: str, *, shards: int | None = None) -> None:
        # Unconditional and idempotent: a retried request writes the same. The first reason
        # stays. TTL from the wall clock: DynamoDB deletes expired items by it. Every part is
        # written before this returns (an end is written only after), one write each: a close
        # is once per instance, its reads once per start.
        expires = int(time.time()) + int(GATE_RETENTION.total_seconds())
        request: dict[str, Any] = {
            "TableName": self._table,
            "UpdateExpression": "SET #closed = if_not_exists(#closed, :reason), #exp = :exp",
            "ExpressionAttributeNames": {"#closed": "closed", "#exp": "expires_at"},
            "ExpressionAttributeValues": {":reason": {"S": reason}, ":exp": {"N": str(expires)}},
        }
        for part in range(fence_parts(shards)):
            key = _fence_key(instance_id, part)
            self._single(
                f"close starts of {instance_id}",
                lambda: self._ddb.update_item(Key=key, **request),  # noqa: B023 (called at once)
            )
