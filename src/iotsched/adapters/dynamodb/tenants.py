"""The tenant's item (`TENANT#<tenant>` / `TENANT`, beside its first group of slots): its quotas, and the
count of its tasks kept for `max_tasks`, which concurrent applies never take past the quota."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from iotsched.adapters.dynamodb.base import Table
from iotsched.adapters.dynamodb.keys import _task_key
from iotsched.adapters.dynamodb.transactions import _conditional_failure
from iotsched.core.quotas import TenantQuotas
from iotsched.core.task_record import TaskRecord


class TenantItems(Table):
    """A tenant's quotas and task count (TenantQuotaStore), and the quotas a task carries."""

    def tenant_task_count(self, tenant: str) -> int | None:
        item = self._ddb.get_item(
            TableName=self._table, Key=tenant_key(tenant), ConsistentRead=True
        ).get("Item")
        return int(item["tasks"]["N"]) if item and "tasks" in item else None

    def get_tenant_quotas(self, tenant: str) -> TenantQuotas | None:
        item = self._ddb.get_item(
            TableName=self._table,
            Key=tenant_key(tenant),
            ConsistentRead=True,
            ProjectionExpression="#q",
            ExpressionAttributeNames={"#q": "quotas"},
        ).get("Item")
        if not item or "quotas" not in item:
            return None
        return TenantQuotas.model_validate_json(item["quotas"]["S"])

    def put_tenant_quotas(self, tenant: str, quotas: TenantQuotas | None) -> None:
        request: dict[str, Any] = {
            "TableName": self._table,
            "Key": tenant_key(tenant),
            "ExpressionAttributeNames": {"#q": "quotas"},
        }
        if quotas is None:
            request["UpdateExpression"] = "REMOVE #q"
        else:
            request["UpdateExpression"] = "SET #q = :q"
            request["ExpressionAttributeValues"] = {
                ":q": {"S": quotas.model_dump_json(exclude_none=True)}
            }
        self._single(f"quotas of tenant {tenant}", lambda: self._ddb.update_item(**request))

    def seed_tenant_task_count(self, tenant: str, count: int) -> bool:
        # Only where none is kept: a count already kept (another apply's seed, or creates
        # counted since) stays. A lost response's retry is refused and reads as not seeded:
        # the count stands either way.
        try:
            self._single(
                f"task count of tenant {tenant}",
                lambda: self._ddb.update_item(
                    TableName=self._table,
                    Key=tenant_key(tenant),
                    UpdateExpression="SET #n = :n",
                    ConditionExpression="attribute_not_exists(#n)",
                    ExpressionAttributeNames={"#n": "tasks"},
                    ExpressionAttributeValues={":n": {"N": str(count)}},
                ),
            )
        except ClientError as exc:
            if _conditional_failure(exc):
                return False
            raise
        return True

    def forget_tenant_task_count(self, tenant: str) -> None:
        self._single(
            f"task count of tenant {tenant}",
            lambda: self._ddb.update_item(
                TableName=self._table,
                Key=tenant_key(tenant),
                UpdateExpression="REMOVE #n",
                ExpressionAttributeNames={"#n": "tasks"},
            ),
        )

    def set_task_quotas(self, task_id: str, quotas: TenantQuotas | None) -> bool:
        request: dict[str, Any] = {
            "TableName": self._table,
            "Key": _task_key(task_id),
            "ConditionExpression": "attribute_exists(pk)",
            "ExpressionAttributeNames": {"#q": "quotas"},
        }
        if quotas is None:
            request["UpdateExpression"] = "REMOVE #q"
        else:
            request["UpdateExpression"] = "SET #q = :q"
            request["ExpressionAttributeValues"] = {
                ":q": {"S": quotas.model_dump_json(exclude_none=True)}
            }
        try:
            self._single(f"quotas of task {task_id}", lambda: self._ddb.update_item(**request))
        except ClientError as exc:
            if _conditional_failure(exc):
                return False
            raise
        return True


def tenant_key(tenant: str) -> dict[str, Any]:
    """The tenant's item, `TENANT#<tenant>` / `TENANT` beside its first group of slots: its quotas (`quotas`)
    and the count of its tasks kept for `max_tasks` (`tasks`)."""
    return {"pk": {"S": f"TENANT#{tenant}"}, "sk": {"S": "TENANT"}}


def count_task_action(table: str, task: TaskRecord) -> tuple[dict[str, Any], str, int] | None:
    """The transaction action that counts a task new to its tenant against `max_tasks`
    (`ADD tasks 1` while the count is below it), with the tenant and the limit; None if the
    tenant has no such quota. In a transaction: a retried request carries its token, so a task
    is never counted twice."""
    tenant, quotas = task.definition.tenant, task.quotas
    if tenant is None or quotas is None or quotas.max_tasks is None:
        return None
    action = {
        "Update": {
            "TableName": table,
            "Key": tenant_key(tenant),
            "UpdateExpression": "ADD #n :one",
            # the count must be kept (seeded when the quota was set): a comparison with an
            # absent attribute is false
            "ConditionExpression": "#n < :max",
            "ExpressionAttributeNames": {"#n": "tasks"},
            "ExpressionAttributeValues": {
                ":one": {"N": "1"},
                ":max": {"N": str(quotas.max_tasks)},
            },
        }
    }
    return action, tenant, quotas.max_tasks
