"""Audit records and task versions.

| item    | pk                           | sk                  | index |
|---------|------------------------------|---------------------|-------|
| version | `TASK#<task>`                | `VERSION#<00000042>`| none |
| audit   | `AUDIT#<subject>#<day>`      | `<at>#<random>`     | by_date (keys only): `date_pk=AUDITS#<day>#<k>`, `sk` |

A subject's records of a day are one partition, so no key takes every change of every tenant;
the by_date entries are spread over the buckets of the subject. Neither expires: they are the
record of what was done.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any

from iotsched.adapters.dynamodb.base import Table
from iotsched.adapters.dynamodb.codec import _from_item, _to_item, readable
from iotsched.adapters.dynamodb.keys import _key_of
from iotsched.adapters.dynamodb.partition_reads import GATHER_THREADS
from iotsched.core.audit import AuditRecord, TaskVersion, Verb
from iotsched.core.buckets import partition, partitions
from iotsched.core.task_definition import TaskDefinition
from iotsched.core.task_record import TaskRecord
from iotsched.core.timeutil import iso, parse_iso

AUDIT_PREFIX = "AUDIT"
AUDITS_PREFIX = "AUDITS"
VERSION_PREFIX = "VERSION#"


def _version_sk(version: int) -> str:
    return f"{VERSION_PREFIX}{version:08d}"


def version_item(task: TaskRecord, verb: Verb) -> dict[str, Any]:
    """The version item a task write stores beside the task."""
    return _to_item(
        {
            "pk": f"TASK#{task.task_id}",
            "sk": _version_sk(task.version),
            "kind": "version",
            "version": task.version,
            "definition": task.definition.model_dump_json(),
            "at": iso(task.updated_at),
            "actor": task.updated_by or "",
            "verb": verb.value,
        }
    )


def audit_item(entry: AuditRecord, buckets: int) -> dict[str, Any]:
    day = entry.day.isoformat()
    return _to_item(
        {
            "pk": f"{AUDIT_PREFIX}#{entry.subject}#{day}",
            "sk": entry.audit_id,
            "kind": "audit",
            # the fields set, as set: a record read back is `stamped` as it was written
            "record": entry.model_dump_json(exclude_unset=True),
            "date_pk": partition(f"{AUDITS_PREFIX}#{day}", entry.subject, buckets),
        }
    )


def _days(since: datetime, until: datetime) -> list[str]:
    day, last = since.date(), until.date()
    found = []
    while day <= last:
        found.append(day.isoformat())
        day += timedelta(days=1)
    return found


class AuditItems(Table):
    """Audit records and task versions (AuditLog)."""

    def _audit_put(self, entry: AuditRecord) -> dict[str, Any]:
        """A transaction's action storing `entry` (a put by id: storing it again is harmless)."""
        return {"Put": {"TableName": self._table, "Item": audit_item(entry, self._buckets)}}

    def record_audit(self, entry: AuditRecord) -> None:
        self._single(
            f"audit record {entry.audit_id}",
            lambda: self._ddb.put_item(
                TableName=self._table, Item=audit_item(entry, self._buckets)
            ),
        )

    def list_audit(
        self,
        *,
        since: datetime,
        until: datetime,
        subject: str | None = None,
        limit: int | None = None,
    ) -> list[AuditRecord]:
        lo, hi = {"S": iso(since)}, {"S": iso(until)}
        if subject is not None:
            items = [
                item
                for day in _days(since, until)
                for item in self._paginate(
                    "query",
                    TableName=self._table,
                    KeyConditionExpression="pk = :pk AND sk BETWEEN :lo AND :hi",
                    ExpressionAttributeValues={
                        ":pk": {"S": f"{AUDIT_PREFIX}#{subject}#{day}"},
                        ":lo": lo,
                        ":hi": hi,
                    },
                )
            ]
        else:
            pks = [
                pk
                for day in _days(since, until)
                for pk in partitions(f"{AUDITS_PREFIX}#{day}", self._buckets)
            ]

            def keys_of(pk: str) -> list[dict[str, Any]]:
                return [
                    {"pk": item["pk"], "sk": item["sk"]}
                    for item in self._paginate(
                        "query",
                        TableName=self._table,
                        IndexName="by_date",
                        KeyConditionExpression="date_pk = :pk AND sk BETWEEN :lo AND :hi",
                        ExpressionAttributeValues={":pk": {"S": pk}, ":lo": lo, ":hi": hi},
                    )
                ]

            with ThreadPoolExecutor(max_workers=min(GATHER_THREADS, len(pks))) as pool:
                keys = [k for found in pool.map(keys_of, pks) for k in found]
            read = self._batch_get(keys)
            items = [read[_key_of(k)] for k in keys if _key_of(k) in read]
        records = readable(items, _audit_from)
        # `until` is exclusive; an id at exactly `until` sorts after its instant's text
        found = sorted((r for r in records if since <= r.at < until), key=lambda r: r.audit_id)
        return found[:limit]

    def task_versions(self, task_id: str) -> list[TaskVersion]:
        items = self._paginate(
            "query",
            TableName=self._table,
            KeyConditionExpression="pk = :pk AND begins_with(sk, :v)",
            ExpressionAttributeValues={
                ":pk": {"S": f"TASK#{task_id}"},
                ":v": {"S": VERSION_PREFIX},
            },
            ConsistentRead=True,
        )
        return readable(items, lambda item: _version_from(task_id, item))


def _audit_from(item: dict[str, Any]) -> AuditRecord:
    return AuditRecord.model_validate_json(_from_item(item)["record"])


def _version_from(task_id: str, item: dict[str, Any]) -> TaskVersion:
    v = _from_item(item)
    return TaskVersion(
        task_id=task_id,
        version=v["version"],
        definition=TaskDefinition.model_validate_json(v["definition"]),
        at=parse_iso(v["at"]),
        actor=v["actor"],
        verb=Verb(v["verb"]),
    )
