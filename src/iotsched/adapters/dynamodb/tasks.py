"""Task items: definitions, the due index, pauses and clock moves."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import date, datetime
from itertools import islice
from typing import Any

from botocore.exceptions import ClientError

from iotsched.adapters.dynamodb.alertstate import state_key
from iotsched.adapters.dynamodb.audit import AuditItems, version_item
from iotsched.adapters.dynamodb.codec import (
    _TASK_PROJECTION,
    _TASK_PROJECTION_NAMES,
    _calendars_json,
    _from_item,
    _to_item,
    calendar_from,
    calendar_item,
    task_from,
    task_item,
)
from iotsched.adapters.dynamodb.keys import (
    CALENDARS_PARTITION,
    DUE_PARTITION,
    LEGACY_DUE_BUCKET,
    TASKS_PREFIX,
    _calendar_key,
    _children_pk,
    _key_of,
    _task_key,
    _tasks_pk,
    due_partition,
)
from iotsched.adapters.dynamodb.partition_reads import GATHER_THREADS
from iotsched.adapters.dynamodb.transact_outcomes import Kind
from iotsched.adapters.dynamodb.transactions import _conditional_failure, _pack, _rejected
from iotsched.core.audit import AuditRecord, Verb
from iotsched.core.buckets import partitions
from iotsched.core.model import AfterTrigger, Calendar, TenantQuotas
from iotsched.core.records import TaskRecord
from iotsched.core.timeutil import iso, slot_text
from iotsched.ports.audit import (
    TaskConflictError,
    TaskQuotaError,
)
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


class Tasks(AuditItems):
    """Task items: definitions, the due index, pauses and clock moves."""

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
            count = _tenant_count_add(self._table, t) if t.task_id in counted else None
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

    def tenant_task_count(self, tenant: str) -> int | None:
        item = self._ddb.get_item(
            TableName=self._table, Key=_tenant_count_key(tenant), ConsistentRead=True
        ).get("Item")
        return int(item["tasks"]["N"]) if item and "tasks" in item else None

    def get_tenant_quotas(self, tenant: str) -> TenantQuotas | None:
        item = self._ddb.get_item(
            TableName=self._table,
            Key=_tenant_count_key(tenant),
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
            "Key": _tenant_count_key(tenant),
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
                    Key=_tenant_count_key(tenant),
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
                Key=_tenant_count_key(tenant),
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
        # a task deleted between the two reads is left out
        return [
            task_from(read[_key_of(key)]) for key in map(_task_key, page) if _key_of(key) in read
        ]

    def _due_partitions(self, prefix: str, bucket: int | None) -> list[str]:
        """The partition keys one due read queries: the bucket's own (every bucket's for None),
        and the former constant key (`prefix` alone) for bucket 0 and all-bucket reads."""
        if bucket is None:
            return [*partitions(prefix, self._buckets), prefix]
        own = f"{prefix}#{bucket}"
        return [own, prefix] if bucket == LEGACY_DUE_BUCKET else [own]

    def due_tasks(
        self, now: datetime, *, bucket: int | None = None, limit: int | None = None
    ) -> list[TaskRecord]:
        # '~' sorts after '#' and every task-id character: all tasks due at or before `now`.
        # Only the attributes a TaskRecord is built from come back (`_TASK_RECORD_FIELDS`):
        # a 10,000-task tick reads ~8 MB, and every attribute left out is one less the service
        # serialises and botocore parses per task (the read units are the same: DynamoDB counts
        # the items read, before the filter and the projection).
        found: list[TaskRecord] = []
        for due_pk in self._due_partitions(DUE_PARTITION, bucket):
            if limit is not None and len(found) >= limit:
                break
            found += [
                task_from(item)
                for item in islice(
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
                )
            ]
        # The order of one partition's due_sk (`<next fire>#<task>`), across partitions.
        return sorted(found, key=lambda t: (t.next_fire or now, t.task_id))[:limit]

    def delete_task(
        self, task_id: str, *, audit: AuditRecord | None = None, counted: str | None = None
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
            # a task created again under this id must not inherit its failing state
            {"Delete": {"TableName": self._table, "Key": state_key(task_id)}},
        ]
        if counted is not None:
            actions.append(
                {
                    "Update": {
                        "TableName": self._table,
                        "Key": _tenant_count_key(counted),
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

    # -- named calendars --------------------------------------------------------------------

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


def _tenant_count_key(tenant: str) -> dict[str, Any]:
    """The tenant's item, `TENANT#<tenant>` / `TENANT` beside its slots: its quotas (`quotas`)
    and the count of its tasks kept for `max_tasks` (`tasks`)."""
    return {"pk": {"S": f"TENANT#{tenant}"}, "sk": {"S": "TENANT"}}


def _tenant_count_add(table: str, task: TaskRecord) -> tuple[dict[str, Any], str, int] | None:
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
            "Key": _tenant_count_key(tenant),
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
