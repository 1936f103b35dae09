"""The dispatcher's per-task clock on the task items: the due index (fireable tasks only),
pauses, and clock moves, each conditioned on the next fire time it was read at."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from itertools import islice
from typing import Any

from iotsched.adapters.dynamodb.audit import AuditItems
from iotsched.adapters.dynamodb.codec import (
    _TASK_PROJECTION,
    _TASK_PROJECTION_NAMES,
    _task_from,
    readable,
)
from iotsched.adapters.dynamodb.keys import (
    DUE_PARTITION,
    LEGACY_DUE_BUCKET,
    _task_key,
    _tasks_pk,
    due_partition,
)
from iotsched.adapters.dynamodb.transact_outcomes import Kind
from iotsched.adapters.dynamodb.transactions import _rejected
from iotsched.core.audit import AuditRecord
from iotsched.core.buckets import partitions
from iotsched.core.task_record import TaskRecord
from iotsched.core.timeutil import iso, slot_text
from iotsched.ports.store_errors import UnreadableRecordError
from iotsched.ports.tasks import TaskAdvance


def _advance(
    task_id: str,
    *,
    expected_next_fire: datetime | None,
    next_fire: datetime | None,
    last_slot: datetime | None,
    buckets: int,
    runs: int = 0,
) -> tuple[str, str, dict[str, str], dict[str, Any]]:
    """A task's clock move: (update expression, condition, names, values)."""
    names = {"#nf": "next_fire"}
    values: dict[str, Any] = {}
    sets = []
    removes = []
    if expected_next_fire is None:
        condition = "attribute_exists(pk) AND attribute_not_exists(#nf)"
    else:
        condition = "#nf = :expected"
        values[":expected"] = {"S": iso(expected_next_fire)}
    if next_fire is None:
        removes += ["#nf", "due_pk", "due_sk"]
    else:
        # due_pk is set again in case the task had no next fire time (an `at` task moved,
        # a re-applied trigger); due_tasks filters paused tasks out.
        sets += ["#nf = :nf", "due_pk = :due_pk", "due_sk = :due_sk"]
        values[":nf"] = {"S": iso(next_fire)}
        values[":due_pk"] = {"S": due_partition(task_id, buckets)}
        values[":due_sk"] = {"S": f"{slot_text(next_fire)}#{task_id}"}
    if last_slot is not None:
        sets.append("last_slot = :ls")
        values[":ls"] = {"S": iso(last_slot)}
    # A task stored by a version without the task list's key gets it at its next fire (the
    # same value afterwards: no index write).
    sets.append("date_pk = if_not_exists(date_pk, :tasks_pk)")
    values[":tasks_pk"] = {"S": _tasks_pk(task_id, buckets)}
    expression = ""
    if sets:
        expression += "SET " + ", ".join(sets)
    if removes:
        expression += " REMOVE " + ", ".join(removes)
    if runs:  # the firings counted towards max_runs, in the write that moves the clock
        expression += " ADD #runs :runs"
        names["#runs"] = "runs"
        values[":runs"] = {"N": str(runs)}
    return expression.strip(), condition, names, values


class TaskClock(AuditItems):
    """The due index, pauses and clock moves (TaskClocks)."""

    def _due_partitions(self, prefix: str, bucket: int | None) -> list[str]:
        """The partition keys one due read queries: the bucket's own (every bucket's for None),
        and the former constant key (`prefix` alone) for bucket 0 and all-bucket reads."""
        if bucket is None:
            return [*partitions(prefix, self._buckets), prefix]
        own = f"{prefix}#{bucket}"
        return [own, prefix] if bucket == LEGACY_DUE_BUCKET else [own]

    def due_tasks(
        self,
        now: datetime,
        *,
        bucket: int | None = None,
        limit: int | None = None,
        unreadable: list[UnreadableRecordError] | None = None,
    ) -> list[TaskRecord]:
        # '~' sorts after '#' and every task-id character: all tasks due at or before `now`.
        # Only the attributes a TaskRecord is built from come back (`_TASK_RECORD_FIELDS`):
        # each one left out is one less to serialise and parse per task of a large tick.
        found: list[TaskRecord] = []
        for due_pk in self._due_partitions(DUE_PARTITION, bucket):
            if limit is not None and len(found) >= limit:
                break
            found += readable(
                islice(
                    self._paginate(
                        "query",
                        TableName=self._table,
                        IndexName="by_due",
                        KeyConditionExpression="due_pk = :due AND due_sk <= :upto",
                        FilterExpression=(
                            "enabled = :on AND (attribute_not_exists(paused) OR paused = :off)"
                        ),
                        ProjectionExpression=_TASK_PROJECTION,
                        ExpressionAttributeNames=_TASK_PROJECTION_NAMES,
                        ExpressionAttributeValues={
                            ":due": {"S": due_pk},
                            ":upto": {"S": f"{slot_text(now)}#~"},
                            ":on": {"BOOL": True},
                            ":off": {"BOOL": False},
                        },
                        **({"Limit": limit} if limit is not None else {}),
                    ),
                    limit,
                ),
                _task_from,
                unreadable,
            )
        # The order of one partition's due_sk (`<next fire>#<task>`), across partitions.
        return sorted(found, key=lambda t: (t.next_fire or now, t.task_id))[:limit]

    def set_paused(
        self,
        task_id: str,
        *,
        paused: bool,
        note: str | None = None,
        audit: AuditRecord | None = None,
        restart: tuple[datetime | None, datetime | None] | None = None,
    ) -> bool:
        values: dict[str, Any] = {":paused": {"BOOL": paused}}
        sets = ["paused = :paused"]
        removes = []
        if note is not None:
            sets.append("pause_note = :note")
            values[":note"] = {"S": note}
        else:
            removes.append("pause_note")
        next_fire, last_slot = restart or (None, None)
        if restart is not None:
            if next_fire is not None:
                sets += ["next_fire = :nf", "due_sk = :due_sk"]
                values[":nf"] = {"S": iso(next_fire)}
                values[":due_sk"] = {"S": f"{slot_text(next_fire)}#{task_id}"}
            else:
                removes += ["next_fire", "due_sk"]
            if last_slot is not None:
                sets.append("last_slot = :ls")
                values[":ls"] = {"S": iso(last_slot)}
            else:
                removes.append("last_slot")
        # The due index holds fireable tasks only: a paused task leaves it. A resume without a
        # restart puts it back under the sort key it kept (due_sk): an entry needs both keys,
        # so a task with no next fire (no due_sk) stays out.
        if paused or (restart is not None and next_fire is None):
            removes.append("due_pk")
        else:
            sets.append("due_pk = :due_pk")
            values[":due_pk"] = {"S": due_partition(task_id, self._buckets)}
        expression = "SET " + ", ".join(sets)
        if removes:
            expression += " REMOVE " + ", ".join(removes)
        if audit is not None:
            update = {
                "TableName": self._table,
                "Key": _task_key(task_id),
                "UpdateExpression": expression,
                "ConditionExpression": "attribute_exists(pk)",
                "ExpressionAttributeValues": values,
            }
            return self._with_record({"Update": update}, audit, f"pause of task {task_id}")
        return self._update_if(_task_key(task_id), expression, "attribute_exists(pk)", {}, values)

    def _with_record(self, action: dict[str, Any], audit: AuditRecord, what: str) -> bool:
        """`action` (conditional) and the put of its audit record in one transaction: False,
        and no record, when the action's condition failed."""
        outcome = self._transaction([action, self._audit_put(audit)], what=what)
        if outcome.kind is Kind.CONDITION_FAILED:
            return False
        if outcome.kind is not Kind.COMMITTED:
            raise _rejected(outcome, f"{what} not written")
        return True

    def advance_task(
        self,
        task_id: str,
        *,
        expected_next_fire: datetime | None,
        next_fire: datetime | None,
        last_slot: datetime | None,
        runs: int = 0,
    ) -> bool:
        expression, condition, names, values = _advance(
            task_id,
            expected_next_fire=expected_next_fire,
            next_fire=next_fire,
            last_slot=last_slot,
            buckets=self._buckets,
            runs=runs,
        )
        return self._update_if(_task_key(task_id), expression, condition, names, values)

    def advance_tasks(self, advances: Sequence[TaskAdvance]) -> list[bool]:
        entries: list[list[Any]] = []
        for a in advances:
            expression, condition, names, values = _advance(
                a.task_id,
                expected_next_fire=a.expected_next_fire,
                next_fire=a.next_fire,
                last_slot=a.last_slot,
                buckets=self._buckets,
                runs=a.runs,
            )
            update: dict[str, Any] = {
                "TableName": self._table,
                "Key": _task_key(a.task_id),
                "UpdateExpression": expression,
                "ConditionExpression": condition,
                "ExpressionAttributeNames": names,
            }
            if values:  # DynamoDB rejects an empty map
                update["ExpressionAttributeValues"] = values
            entries.append([{"Update": update}])
        return self._write_groups(entries)
