"""The alert policy's state (AlertStateStore): a task's failures counted per threshold window
(`ALERTWINDOW#<task>#<window start>` / `COUNT`) and whether it is failing
(`ALERTSTATE#<task>` / `STATE`). Items per task: no key every task's alerts write.

Each write is one conditional UpdateItem that carries its own proof of having landed, so a
retried call counts or clears nothing more. Both items expire (`expires_at`); an expired item
reads as gone. `delete_task` deletes the state with its task.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError

from iotsched.adapters.dynamodb.base import Table
from iotsched.adapters.dynamodb.transactions import _conditional_failure
from iotsched.core.timeutil import iso
from iotsched.ports.alert_state import FailureCount


def _window_key(task_id: str, window_start: datetime) -> dict[str, Any]:
    return {"pk": {"S": f"ALERTWINDOW#{task_id}#{iso(window_start)}"}, "sk": {"S": "COUNT"}}


def state_key(task_id: str) -> dict[str, Any]:
    """The key of a task's failing state (deleted with the task)."""
    return {"pk": {"S": f"ALERTSTATE#{task_id}"}, "sk": {"S": "STATE"}}


class AlertStates(Table):
    """The alert policy's state on the scheduler's table."""

    def count_failure(
        self,
        task_id: str,
        window_start: datetime,
        failure_id: str,
        *,
        threshold: int,
        expires_at: datetime,
    ) -> FailureCount:
        key = _window_key(task_id, window_start)
        try:
            out = self._single(
                f"count of {key['pk']['S']}",
                lambda: self._ddb.update_item(
                    TableName=self._table,
                    Key=key,
                    # `counted_order`: the ids in the order counted, so that a call whose
                    # answer was lost learns the count its failure made, not the count now.
                    UpdateExpression=(
                        "ADD n :one, ids :id SET expires_at = :exp, "
                        "counted_order = list_append(if_not_exists(counted_order, :none), :idl)"
                    ),
                    ConditionExpression=(
                        "(attribute_not_exists(n) OR n < :threshold) AND NOT contains(ids, :fid)"
                    ),
                    ExpressionAttributeValues={
                        ":one": {"N": "1"},
                        ":id": {"SS": [failure_id]},
                        ":idl": {"L": [{"S": failure_id}]},
                        ":none": {"L": []},
                        ":fid": {"S": failure_id},
                        ":threshold": {"N": str(threshold)},
                        ":exp": {"N": str(int(expires_at.timestamp()))},
                    },
                    ReturnValues="ALL_NEW",
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                ),
            )
        except ClientError as exc:
            if not _conditional_failure(exc):
                raise
            old: Any = exc.response.get("Item") or {}
            ids = sorted(old.get("ids", {}).get("SS", []))
            count = int(old.get("n", {}).get("N", "0"))
            if failure_id in ids:
                # this call's earlier try (or an earlier call) counted it: the count it made
                order = [v["S"] for v in old.get("counted_order", {}).get("L", [])]
                if failure_id in order:
                    count = order.index(failure_id) + 1
            return FailureCount(count, failure_id in ids, ids)
        new: Any = out.get("Attributes", {})
        return FailureCount(int(new["n"]["N"]), True, sorted(new["ids"]["SS"]))

    def mark_failing(
        self, task_id: str, instance_id: str, *, at: datetime, expires_at: datetime
    ) -> None:
        # Idempotent: the first failure since the last recovery is kept. Conditioned only on
        # the item not having expired at `at`; a retried request finds it live (its own expiry).
        values = {":id": {"S": instance_id}, ":exp": {"N": str(int(expires_at.timestamp()))}}
        try:
            self._single(
                f"failing state of {task_id}",
                lambda: self._ddb.update_item(
                    TableName=self._table,
                    Key=state_key(task_id),
                    UpdateExpression="SET failing = if_not_exists(failing, :id), expires_at = :exp",
                    ConditionExpression="attribute_not_exists(expires_at) OR expires_at > :at",
                    ExpressionAttributeValues={**values, ":at": {"N": str(int(at.timestamp()))}},
                ),
            )
        except ClientError as exc:
            if not _conditional_failure(exc):
                raise
            # expired, TTL's delete still to come: what it held is gone, the task fails since
            # this failure (idempotent: a retry writes the same)
            self._single(
                f"failing state of {task_id}",
                lambda: self._ddb.update_item(
                    TableName=self._table,
                    Key=state_key(task_id),
                    UpdateExpression="SET failing = :id, expires_at = :exp "
                    "REMOVE recovered_from, recovered_by",
                    ExpressionAttributeValues=values,
                ),
            )

    def clear_failing(
        self, task_id: str, *, by: str, at: datetime, expires_at: datetime
    ) -> str | None:
        key = state_key(task_id)
        try:
            out = self._single(
                f"recovery of {task_id}",
                lambda: self._ddb.update_item(
                    TableName=self._table,
                    Key=key,
                    UpdateExpression="SET recovered_from = failing, recovered_by = :by, "
                    "expires_at = :exp REMOVE failing",
                    ConditionExpression="attribute_exists(failing) AND "
                    "(attribute_not_exists(expires_at) OR expires_at > :at)",
                    ExpressionAttributeValues={
                        ":by": {"S": by},
                        ":exp": {"N": str(int(expires_at.timestamp()))},
                        ":at": {"N": str(int(at.timestamp()))},
                    },
                    ReturnValues="ALL_NEW",
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                ),
            )
        except ClientError as exc:
            if not _conditional_failure(exc):
                raise
            old: Any = exc.response.get("Item") or {}
            if old.get("recovered_by", {}).get("S") == by:  # our own write, landed before
                return str(old["recovered_from"]["S"])
            return None
        return str(out["Attributes"]["recovered_from"]["S"])
