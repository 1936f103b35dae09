"""Task items: definitions written with their versions, audit records and dependency edges
(a version lands with its task or not at all), read by key or listed without a scan, and
deleted while no instance holds the task."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from iotsched.adapters.dynamodb.alertstate import state_key
from iotsched.adapters.dynamodb.audit import version_item
from iotsched.adapters.dynamodb.calendars import Calendars
from iotsched.adapters.dynamodb.codec import (
    _from_item,
    _task_from,
    _to_item,
    readable,
    task_from,
    task_item,
)
from iotsched.adapters.dynamodb.keys import (
    TASKS_PREFIX,
    _children_pk,
    _key_of,
    _task_key,
)
from iotsched.adapters.dynamodb.partition_reads import GATHER_THREADS
from iotsched.adapters.dynamodb.task_clock import TaskClock
from iotsched.adapters.dynamodb.tenants import TenantItems, count_task_action, tenant_key
from iotsched.adapters.dynamodb.transact_outcomes import Kind
from iotsched.adapters.dynamodb.transactions import _pack, _rejected
from iotsched.core.audit import AuditRecord, Verb
from iotsched.core.buckets import partitions
from iotsched.core.instance_record import incarnation_key
from iotsched.core.task_record import TaskRecord
from iotsched.core.task_triggers import AfterTrigger
from iotsched.ports.audit import (
    TaskConflictError,
    TaskQuotaError,
)


class Tasks(TaskClock, Calendars, TenantItems):
    """Task definitions (TaskDefinitions), with the clock, calendars and tenant items that
    make up the TaskStore."""

    def _task_item(self, task: TaskRecord) -> dict[str, Any]:
        """`codec.task_item` with this store's buckets."""
        return task_item(task, self._buckets)

    def put_tasks(
        self,
        tasks: Sequence[TaskRecord],
        *,
        audit: Sequence[AuditRecord] = (),
        counted: Collection[str] = (),
    ) -> None:
        # One group per task: its update (conditional on an older version), its version item
        # (new), its audit records, its dependency edges, and for a task `counted` the count of
        # its tenant's tasks (`max_tasks`); the groups packed into transactions, a group never
        # split, so no version lands without its task or back.
        groups: list[list[Any]] = []
        quota_actions: dict[int, tuple[str, int]] = {}  # id() of a count action: tenant, limit
        for t in tasks:
            own = [e for e in audit if e.subject == t.task_id]
            update = self._task_update(t)
            update["ConditionExpression"] = "attribute_not_exists(pk) OR #ver < :ver"
            update["ExpressionAttributeNames"]["#ver"] = "version"
            update["ExpressionAttributeValues"][":ver"] = {"N": str(t.version)}
            group: list[Any] = [
                {"Update": update},
                {
                    "Put": {
                        "TableName": self._table,
                        "Item": version_item(t, own[0].verb if own else Verb.APPLY),
                        "ConditionExpression": "attribute_not_exists(pk)",
                    }
                },
                *(self._audit_put(e) for e in own),
            ]
            # Dependency edges (`CHILDREN#<parent>` / `<child>`), so that an ending instance
            # finds its dependents with one Query. Stale edges are harmless: readers re-check.
            if isinstance(t.definition.trigger, AfterTrigger):
                group += [
                    {
                        "Put": {
                            "TableName": self._table,
                            "Item": _to_item(
                                {"pk": _children_pk(parent), "sk": t.task_id, "kind": "edge"}
                            ),
                        }
                    }
                    for parent in t.definition.trigger.after
                ]
            count = count_task_action(self._table, t) if t.task_id in counted else None
            if count is not None:
                action, tenant, limit = count
                quota_actions[id(action)] = (tenant, limit)
                group.append(action)
            groups.append(group)
        for chunk in _pack(list(range(len(groups))), groups):
            actions = [a for n in chunk for a in groups[n]]
            owners = [tasks[n].task_id for n in chunk for _ in groups[n]]
            outcome = self._transaction(actions, what="tasks")
            # A count refused: the tenant is at its `max_tasks` (no task of this transaction, and
            # none after it, was written).
            over = [i for i in outcome.failed if id(actions[i]) in quota_actions]
            if outcome.kind is Kind.CONDITION_FAILED and over:
                tenant, limit = quota_actions[id(actions[over[0]])]
                raise TaskQuotaError(tenant, limit, sorted({owners[i] for i in over}))
            if outcome.kind is Kind.CONDITION_FAILED:
                failed = sorted({owners[i] for i in outcome.failed})
                raise TaskConflictError(
                    f"task {', '.join(failed)} changed meanwhile (a newer version is stored): "
                    "read it and apply again"
                )
            if outcome.kind is not Kind.COMMITTED:
                raise _rejected(outcome, "tasks not written")

    def children_of(self, task_id: str) -> list[str]:
        return sorted(
            _from_item(item)["sk"]
            for item in self._paginate(
                "query",
                TableName=self._table,
                KeyConditionExpression="pk = :pk",
                ExpressionAttributeValues={":pk": {"S": _children_pk(task_id)}},
            )
        )

    def _task_update(self, task: TaskRecord) -> Any:
        item = self._task_item(task)
        # The run count is the dispatcher's (its clock moves add to it): a new task starts at 0
        # and a re-apply keeps it.
        settable = {k: v for k, v in item.items() if k not in ("pk", "sk", "runs")}
        names = {f"#a{n}": k for n, k in enumerate(settable)}
        values = {f":v{n}": v for n, v in enumerate(settable.values())}
        expression = "SET " + ", ".join(f"#a{n} = :v{n}" for n in range(len(settable)))
        names["#runs"] = "runs"
        values[":zero"] = {"N": "0"}
        expression += ", #runs = if_not_exists(#runs, :zero)"
        cleared = ("next_fire", "last_slot", "due_pk", "due_sk", "calendars", "quotas")
        absent = [k for k in cleared if k not in item]
        if absent:
            names.update({f"#r{n}": k for n, k in enumerate(absent)})
            expression += " REMOVE " + ", ".join(f"#r{n}" for n in range(len(absent)))
        return {
            "TableName": self._table,
            "Key": _task_key(task.task_id),
            "UpdateExpression": expression,
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
        }

    def get_task(self, task_id: str) -> TaskRecord | None:
        item = self._ddb.get_item(
            TableName=self._table, Key=_task_key(task_id), ConsistentRead=True
        ).get("Item")
        return task_from(item) if item else None

    def list_tasks(self, *, after: str | None = None, limit: int | None = None) -> list[TaskRecord]:
        # The task items' sparse `TASKS#<k>` entries in by_date (keys only: written once, when
        # the task is created; no update of the task ever writes that index), every bucket
        # read, sorted by task id; then the page's items themselves by key. No scan.
        def bucket(pk: str) -> list[str]:
            return [
                str(item["pk"]["S"]).removeprefix("TASK#")
                for item in self._paginate(
                    "query",
                    TableName=self._table,
                    IndexName="by_date",
                    KeyConditionExpression="date_pk = :pk",
                    ExpressionAttributeValues={":pk": {"S": pk}},
                )
            ]

        pks = partitions(TASKS_PREFIX, self._buckets)
        with ThreadPoolExecutor(max_workers=min(GATHER_THREADS, len(pks))) as pool:
            ids = sorted(task_id for found in pool.map(bucket, pks) for task_id in found)
        page = [i for i in ids if after is None or i > after][:limit]
        read = self._batch_get([_task_key(i) for i in page])
        # a task deleted between the two reads is left out, and so is one that cannot be read
        items = [read[_key_of(key)] for key in map(_task_key, page) if _key_of(key) in read]
        return readable(items, _task_from)

    def delete_task(
        self,
        task_id: str,
        *,
        audit: AuditRecord | None = None,
        counted: str | None = None,
        incarnation: int = 1,
    ) -> bool:
        # The definition item (`TASK#<task>` / `DEF`) and the task's alert state: the
        # instances and versions in the same partition are history. Guarded by the blocking
        # hold, so a hold the dispatcher just took is not lost with its queue. A retried delete
        # whose first try landed finds no item: False, which the caller reads as "gone", the
        # same outcome. One transaction (a lost response is answered by its request token):
        # the state's delete is unconditional, so only the definition's condition can refuse it.
        delete = {
            "TableName": self._table,
            "Key": _task_key(task_id),
            "ConditionExpression": "attribute_exists(pk) AND attribute_not_exists(active)",
        }
        actions: list[Any] = [
            {"Delete": delete},
            # its incarnation's failing state (a task created again has its own)
            {
                "Delete": {
                    "TableName": self._table,
                    "Key": state_key(incarnation_key(task_id, incarnation)),
                }
            },
        ]
        if counted is not None:
            actions.append(
                {
                    "Update": {
                        "TableName": self._table,
                        "Key": tenant_key(counted),
                        "UpdateExpression": "ADD #n :minus",
                        "ExpressionAttributeNames": {"#n": "tasks"},
                        "ExpressionAttributeValues": {":minus": {"N": "-1"}},
                    }
                }
            )
        if audit is not None:
            actions.append(self._audit_put(audit))
        what = f"delete of task {task_id}"
        outcome = self._transaction(actions, what=what)
        if outcome.kind is Kind.CONDITION_FAILED:
            return False
        if outcome.kind is not Kind.COMMITTED:
            raise _rejected(outcome, f"{what} not written")
        return True
