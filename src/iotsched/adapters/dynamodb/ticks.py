"""The fanned-out tick's bucket leases."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from iotsched.adapters.dynamodb.base import Table
from iotsched.adapters.dynamodb.codec import (
    _from_item,
)
from iotsched.adapters.dynamodb.keys import _tick_key
from iotsched.core.timeutil import from_ms, to_ms
from iotsched.ports.ticks import TickLease


class TickLeases(Table):
    """The fanned-out tick's bucket leases."""

    def take_tick(
        self, bucket: int, minute: datetime, *, owner: str, now: datetime, until: datetime
    ) -> TickLease:
        key = _tick_key(bucket)
        taken = self._update_if(
            key,
            "SET #o = :me, until_ms = :until, minute_ms = :minute",
            # Free (never taken, ended, released) or already ours (a retried request), and
            # this minute not the one last dispatched in full.
            "(attribute_not_exists(pk) OR until_ms <= :now OR #o = :me)"
            " AND (attribute_not_exists(done_ms) OR done_ms <> :minute)",
            {"#o": "owner"},
            {
                ":me": {"S": owner},
                ":until": {"N": str(to_ms(until))},
                ":minute": {"N": str(to_ms(minute))},
                ":now": {"N": str(to_ms(now))},
            },
        )
        if taken:
            return TickLease(taken=True, owner=owner, minute=minute, until=until)
        item = self._ddb.get_item(TableName=self._table, Key=key, ConsistentRead=True).get("Item")
        v = _from_item(item) if item else {}
        live = bool(v) and int(v.get("until_ms", 0)) > to_ms(now)
        return TickLease(
            taken=False,
            owner=v.get("owner") if live else None,
            minute=from_ms(int(v["minute_ms"])) if live and "minute_ms" in v else None,
            until=from_ms(int(v["until_ms"])) if live else None,
            done=from_ms(int(v["done_ms"])) if "done_ms" in v else None,
        )

    def release_tick(self, bucket: int, *, owner: str, minute: datetime, done: bool) -> bool:
        # The owner stays written: a retried release (its first response lost) still matches.
        expression = "SET until_ms = :zero" + (", done_ms = :minute" if done else "")
        values: dict[str, Any] = {":me": {"S": owner}, ":zero": {"N": "0"}}
        if done:
            values[":minute"] = {"N": str(to_ms(minute))}
        return self._update_if(
            _tick_key(bucket),
            expression,
            "#o = :me",
            {"#o": "owner"},
            values,
        )
