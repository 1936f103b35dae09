"""A tenant's in-flight slots (`max_concurrent_shards`): `TENANT#<tenant>` / `SLOT#<0042>`, in
groups of `SLOTS_PER_GROUP` (group g > 0 on `TENANT#<tenant>#S<g>`); and
its line: `TENANT#<tenant>` / `LINE#<place>`, one item per capped instance that waits to send.

A slot is taken by one conditional PutItem (free: no item, or its lease ended), so concurrent
takers never hold more than the cap and a dead worker's slot comes back by itself; a release
frees only the holder's own slot. How: docs/design.md, section 20, "A tenant's in-flight slots".
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from iotsched.adapters.dynamodb.base import Table
from iotsched.adapters.dynamodb.codec import _epoch_s
from iotsched.adapters.dynamodb.transactions import _conditional_failure
from iotsched.core.quotas import slot_groups, slot_order
from iotsched.core.timeutil import to_ms
from iotsched.ports.store_errors import StoreContendedError

log = logging.getLogger(__name__)

#: How long a slot item is kept past its lease (DynamoDB's TTL); a slot in use is rewritten.
SLOT_RETENTION = timedelta(days=1)
#: A tenant's slots in groups of this many, each group on a partition of its own (group 0 on
#: `TENANT#<tenant>`, group g on `TENANT#<tenant>#S<g>`): a take reads one group's items (one
#: read unit) and writes one slot, so no partition takes more than this many slots' starts and
#: ends however large the cap. Part of the stored layout: changing it moves slots.
SLOTS_PER_GROUP = 25
#: The most groups one take reads: a take that finds them full waits as one at the cap does,
#: though a slot of a group it did not read may be free (a moment's slack below a large cap,
#: taken by the next taker whose groups hold it), so a refusal costs a few reads, not one per
#: group of a cap of hundreds.
GROUPS_READ = 4


def _group_pk(tenant: str, group: int) -> str:
    return f"TENANT#{tenant}" if group == 0 else f"TENANT#{tenant}#S{group}"


def _slot_key(tenant: str, slot: int) -> dict[str, Any]:
    return {
        "pk": {"S": _group_pk(tenant, slot // SLOTS_PER_GROUP)},
        "sk": {"S": f"SLOT#{slot:04d}"},
    }


class TenantSlots(Table):
    """The tenants' in-flight slots (InstanceStore.take_tenant_slot, release_tenant_slot)."""

    def take_tenant_slot(
        self, tenant: str, holder: str, *, cap: int, now: datetime, until: datetime
    ) -> int | None:
        # Group by group from the holder's own, until a free slot is taken: a tenant under its
        # cap mostly has room in the first group read.
        held = 0
        for group in slot_groups(holder, cap, SLOTS_PER_GROUP)[:GROUPS_READ]:
            live = self._live_slots(tenant, group.start // SLOTS_PER_GROUP, now)
            held += len(live)
            if held >= cap:
                return None  # a lowered cap: the slots above it still held count
            free = [i for i in group if i not in live]
            for index in slot_order(holder, free, cap):
                if self._put_slot(tenant, index, holder, now=now, until=until):
                    return index
        return None

    def _put_slot(
        self, tenant: str, index: int, holder: str, *, now: datetime, until: datetime
    ) -> bool:
        """Take slot `index` if it is free: True if ours (taken now, or by a try of ours whose
        response was lost), False if another holder's."""
        key = _slot_key(tenant, index)
        try:
            self._single(
                f"slot {index} of tenant {tenant}",
                lambda: self._ddb.put_item(
                    TableName=self._table,
                    Item={
                        **key,
                        "kind": {"S": "slot"},
                        "holder": {"S": holder},
                        "until_ms": {"N": str(to_ms(until))},
                        "expires_at": {"N": str(_epoch_s(until + SLOT_RETENTION))},
                    },
                    ConditionExpression="attribute_not_exists(pk) OR until_ms <= :now",
                    ExpressionAttributeValues={":now": {"N": str(to_ms(now))}},
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                ),
            )
        except ClientError as exc:
            if not _conditional_failure(exc):
                self._release_unknown(tenant, index, holder)
                raise
            old: Any = exc.response.get("Item") or {}
            return bool(old.get("holder", {}).get("S") == holder)
        except BotoCoreError:
            self._release_unknown(tenant, index, holder)
            raise
        return True

    def _release_unknown(self, tenant: str, index: int, holder: str) -> None:
        """A put whose outcome is unknown (it raised past botocore's retries: a timeout or a
        reset may come after DynamoDB applied it) is released before the take raises, so a slot
        it may have written is not held until its lease ends; a release that fails too leaves
        it to that lease. Conditioned on `holder`: a put that never landed changes nothing."""
        try:
            self.release_tenant_slot(tenant, index, holder)
        except (ClientError, BotoCoreError, StoreContendedError):
            log.warning(
                "a slot take of unknown outcome not released: freed when its lease ends",
                extra={"tenant": tenant, "slot": index},
                exc_info=True,
            )

    def _live_slots(self, tenant: str, group: int, now: datetime) -> set[int]:
        """The slots of one of the tenant's groups held at `now` (a consistent read, so a
        release that returned is seen)."""
        live: set[int] = set()
        request: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": "pk = :pk AND begins_with(sk, :slot)",
            "ExpressionAttributeValues": {
                ":pk": {"S": _group_pk(tenant, group)},
                ":slot": {"S": "SLOT#"},
            },
            "ProjectionExpression": "sk, until_ms",
            "ConsistentRead": True,
        }
        at = to_ms(now)
        while True:
            page = self._read(f"slots of tenant {tenant}", lambda: self._ddb.query(**request))
            for item in page.get("Items", []):
                if int(item["until_ms"]["N"]) > at:
                    live.add(int(item["sk"]["S"].removeprefix("SLOT#")))
            if "LastEvaluatedKey" not in page:
                return live
            request["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def extend_tenant_slot(self, tenant: str, slot: int, holder: str, *, until: datetime) -> bool:
        # Conditioned on our holder: a retried request whose first try landed passes again
        # (the same values), so a lost response needs no token.
        try:
            self._single(
                f"slot {slot} of tenant {tenant}",
                lambda: self._ddb.update_item(
                    TableName=self._table,
                    Key=_slot_key(tenant, slot),
                    UpdateExpression="SET until_ms = :until, expires_at = :exp",
                    ConditionExpression="holder = :holder",
                    ExpressionAttributeValues={
                        ":holder": {"S": holder},
                        ":until": {"N": str(to_ms(until))},
                        ":exp": {"N": str(_epoch_s(until + SLOT_RETENTION))},
                    },
                ),
            )
        except ClientError as exc:
            if _conditional_failure(exc):
                return False
            raise
        return True

    def release_tenant_slot(self, tenant: str, slot: int, holder: str) -> None:
        try:
            self._single(
                f"release of slot {slot} of tenant {tenant}",
                lambda: self._ddb.update_item(
                    TableName=self._table,
                    Key=_slot_key(tenant, slot),
                    UpdateExpression="SET until_ms = :free REMOVE holder",
                    ConditionExpression="holder = :holder",
                    ExpressionAttributeValues={":holder": {"S": holder}, ":free": {"N": "0"}},
                ),
            )
        except ClientError as exc:
            if not _conditional_failure(exc):
                raise

    def join_tenant_line(self, tenant: str, place: str, *, expires: datetime) -> None:
        # An unconditional put: joining twice (a retried request, a resumed send) is one place.
        self._single(
            f"line of tenant {tenant}",
            lambda: self._ddb.put_item(
                TableName=self._table,
                Item={
                    **_line_key(tenant, place),
                    "kind": {"S": "line"},
                    "expires_at": {"N": str(_epoch_s(expires))},
                },
            ),
        )

    def tenant_line_head(self, tenant: str) -> str | None:
        page = self._read(
            f"line of tenant {tenant}",
            lambda: self._ddb.query(
                TableName=self._table,
                KeyConditionExpression="pk = :pk AND begins_with(sk, :line)",
                ExpressionAttributeValues={
                    ":pk": {"S": f"TENANT#{tenant}"},
                    ":line": {"S": "LINE#"},
                },
                ProjectionExpression="sk",
                ConsistentRead=True,
                Limit=1,
            ),
        )
        items = page.get("Items", [])
        return str(items[0]["sk"]["S"]).removeprefix("LINE#") if items else None

    def leave_tenant_line(self, tenant: str, place: str) -> None:
        self._single(
            f"line of tenant {tenant}",
            lambda: self._ddb.delete_item(TableName=self._table, Key=_line_key(tenant, place)),
        )


def _line_key(tenant: str, place: str) -> dict[str, Any]:
    return {"pk": {"S": f"TENANT#{tenant}"}, "sk": {"S": f"LINE#{place}"}}
