"""Named calendars (`CALENDAR#<name>`, listed by their sparse by_date entries), written with
the resolved dates of the tasks that use them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import date
from typing import Any

from iotsched.adapters.dynamodb.audit import AuditItems
from iotsched.adapters.dynamodb.codec import (
    _calendars_json,
    calendar_from,
    calendar_item,
)
from iotsched.adapters.dynamodb.keys import (
    CALENDARS_PARTITION,
    _calendar_key,
    _key_of,
    _task_key,
)
from iotsched.adapters.dynamodb.transact_outcomes import Kind
from iotsched.adapters.dynamodb.transactions import _rejected
from iotsched.core.audit import AuditRecord
from iotsched.core.calendars import Calendar


class Calendars(AuditItems):
    """Named calendars and each task's resolved calendar dates (CalendarStore)."""

    def put_calendars(
        self,
        calendars: Sequence[Calendar],
        resolved: Mapping[str, Mapping[str, list[date]]],
        *,
        audit: Sequence[AuditRecord] = (),
    ) -> None:
        # The records first, in the first transaction with the calendars they name.
        writes: list[Any] = [self._audit_put(e) for e in audit]
        writes += [{"Put": {"TableName": self._table, "Item": calendar_item(c)}} for c in calendars]
        for task_id, dates in resolved.items():
            update: dict[str, Any] = {
                "TableName": self._table,
                "Key": _task_key(task_id),
                "ConditionExpression": "attribute_exists(pk)",
                "ExpressionAttributeNames": {"#c": "calendars"},
            }
            if dates:
                update["UpdateExpression"] = "SET #c = :c"
                update["ExpressionAttributeValues"] = {":c": {"S": _calendars_json(dates)}}
            else:
                update["UpdateExpression"] = "REMOVE #c"
            writes.append({"Update": update})
        for start in range(0, len(writes), 100):
            chunk = writes[start : start + 100]
            outcome = self._transaction(chunk, what="calendars")
            if outcome.kind is Kind.CONDITION_FAILED and outcome.failed:
                # Only a task update has a condition: a task deleted since it was read. The
                # rest goes again without it (a calendar put never fails its condition).
                chunk = [w for n, w in enumerate(chunk) if n not in set(outcome.failed)]
                outcome = self._transaction(chunk, what="calendars") if chunk else outcome
            if chunk and outcome.kind is not Kind.COMMITTED:
                raise _rejected(outcome, "calendars not written")

    def get_calendar(self, name: str) -> Calendar | None:
        item = self._ddb.get_item(
            TableName=self._table, Key=_calendar_key(name), ConsistentRead=True
        ).get("Item")
        return calendar_from(item) if item else None

    def list_calendars(self) -> list[Calendar]:
        keys = [
            {"pk": item["pk"], "sk": item["sk"]}
            for item in self._paginate(
                "query",
                TableName=self._table,
                IndexName="by_date",
                KeyConditionExpression="date_pk = :pk",
                ExpressionAttributeValues={":pk": {"S": CALENDARS_PARTITION}},
            )
        ]
        read = self._batch_get(keys)
        found = [calendar_from(read[_key_of(k)]) for k in keys if _key_of(k) in read]
        return sorted(found, key=lambda c: c.name)
