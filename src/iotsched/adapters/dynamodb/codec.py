"""Items and records: DynamoDB's typed attributes to plain Python and back, and each
record (task, instance, shard, attempt) to its item and back."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any, TypeVar, cast

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer

from iotsched.adapters.dynamodb.keys import (
    CALENDARS_PARTITION,
    _calendar_key,
    _counter_key,
    _date_pk,
    _instance_key,
    _open_pk,
    _status_pk,
    _tasks_pk,
    counter_stripes,
    due_partition,
    owed_partition,
    shard_parts,
    submission_partition,
)
from iotsched.core.attempt_record import Attempt
from iotsched.core.calendars import Calendar
from iotsched.core.instance_record import (
    InstanceRecord,
    InstanceStatus,
    listing_key,
)
from iotsched.core.quotas import TenantQuotas
from iotsched.core.shard_record import (
    ShardRecord,
    ShardStatus,
)
from iotsched.core.task_definition import TaskDefinition
from iotsched.core.task_record import TaskRecord
from iotsched.core.timeutil import from_ms, iso, parse_iso, slot_text, to_ms
from iotsched.ports.store_errors import UnreadableRecordError

_T = TypeVar("_T")
log = logging.getLogger(__name__)

DAY_S = 86_400
_INSTANCE_TOP_LEVEL = ("status", "reason", "finished_at")

#: The task item's attributes `task_from` reads (the due query asks for these), and its key,
#: which names a record that cannot be decoded.
_TASK_RECORD_FIELDS = (
    "pk",
    "sk",
    "definition",
    "version",
    "incarnation",
    "next_fire",
    "last_slot",
    "paused",
    "updated_at",
    "active",
    "queue",
    "runs",
    "calendars",
    "quotas",
)
_TASK_PROJECTION_NAMES = {f"#p{n}": name for n, name in enumerate(_TASK_RECORD_FIELDS)}
_TASK_PROJECTION = ", ".join(_TASK_PROJECTION_NAMES)
_ser = TypeSerializer()
_deser = TypeDeserializer()


def _to_item(values: dict[str, Any]) -> dict[str, Any]:
    return {k: _ser.serialize(v) for k, v in values.items() if v is not None}


def _from_item(item: dict[str, Any]) -> dict[str, Any]:
    return {k: _plain(_deser.deserialize(v)) for k, v in item.items()}


def _plain(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _epoch_s(at: datetime) -> int:
    """`expires_at`, the table's TTL attribute: epoch seconds."""
    return int(at.timestamp())


def _counter_item(instance_id: str, remaining: int, failed: int) -> dict[str, Any]:
    """An instance's counter item. It carries no index key: a decrement writes this small
    item alone, never an index entry."""
    return {
        **_counter_key(instance_id),
        "kind": {"S": "counter"},
        "remaining": {"N": str(remaining)},
        "failed_shards": {"N": str(failed)},
    }


def task_item(task: TaskRecord, buckets: int) -> dict[str, Any]:
    values: dict[str, Any] = {
        "pk": f"TASK#{task.task_id}",
        "sk": "DEF",
        "kind": "task",
        "task_id": task.task_id,
        "definition": task.definition.model_dump_json(exclude_unset=True),
        "version": task.version,
        # a task's first incarnation stores none (every task before incarnations were kept)
        "incarnation": task.incarnation if task.incarnation > 1 else None,
        "enabled": task.definition.enabled,
        "next_fire": iso(task.next_fire) if task.next_fire else None,
        "last_slot": iso(task.last_slot) if task.last_slot else None,
        "updated_at": iso(task.updated_at),
        "updated_by": task.updated_by,
        "paused": task.paused,
        "pause_note": task.pause_note,
        "runs": task.runs,
        # a task naming no calendar stores none (the tick reads nothing more for it)
        "calendars": _calendars_json(task.calendars) if task.calendars else None,
        # a task of a tenant without quotas stores none
        "quotas": task.quotas.model_dump_json(exclude_none=True) if task.quotas else None,
        # the task list's entry (by_date, keys only): written with the item, never moved
        "date_pk": _tasks_pk(task.task_id, buckets),
    }
    if task.fires and task.next_fire is not None:
        values["due_pk"] = due_partition(task.task_id, buckets)
        values["due_sk"] = f"{slot_text(task.next_fire)}#{task.task_id}"
    return _to_item(values)


def decoded(item: dict[str, Any], decode: Callable[[dict[str, Any]], _T]) -> _T:
    """`decode(item)`, or UnreadableRecordError naming the item's key: a record this version
    cannot decode (a field it refuses, JSON nested past the parser's depth) is named, never a
    traceback of its decoder."""
    try:
        return decode(item)
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        key = f"{item.get('pk', {}).get('S', '?')} / {item.get('sk', {}).get('S', '?')}"
        raise UnreadableRecordError(key, f"{type(exc).__name__}: {str(exc)[:300]}") from None


def readable(
    items: Iterable[dict[str, Any]],
    decode: Callable[[dict[str, Any]], _T],
    unreadable: list[UnreadableRecordError] | None = None,
) -> list[_T]:
    """Each item decoded; one that cannot be is left out (logged as an error naming its key,
    and added to `unreadable`), so that one bad record never hides the others from a list or
    a tick."""
    found: list[_T] = []
    for item in items:
        try:
            found.append(decoded(item, decode))
        except UnreadableRecordError as exc:
            log.error(
                "stored record skipped: it cannot be read", extra={"key": exc.key, "why": exc.why}
            )
            if unreadable is not None:
                unreadable.append(exc)
    return found


def task_from(item: dict[str, Any]) -> TaskRecord:
    """The task record of a task item (UnreadableRecordError if it cannot be decoded)."""
    return decoded(item, _task_from)


def _task_from(item: dict[str, Any]) -> TaskRecord:
    # Reads `_TASK_RECORD_FIELDS` (and `pause_note`): the due query projects the items onto them.
    v = _from_item(item)
    return TaskRecord(
        definition=TaskDefinition.model_validate_json(v["definition"]),
        version=v["version"],
        incarnation=int(v.get("incarnation", 1)),
        next_fire=parse_iso(v["next_fire"]) if v.get("next_fire") else None,
        last_slot=parse_iso(v["last_slot"]) if v.get("last_slot") else None,
        paused=bool(v.get("paused", False)),
        updated_at=parse_iso(v["updated_at"]),
        updated_by=v.get("updated_by"),
        active=v.get("active"),
        queue=list(v.get("queue", [])),
        # not projected onto the due index: a due task is not paused, so it has no note
        pause_note=v.get("pause_note"),
        runs=int(v.get("runs", 0)),
        calendars=(
            {name: [date.fromisoformat(d) for d in days] for name, days in json.loads(cal).items()}
            if (cal := v.get("calendars"))
            else {}
        ),
        quotas=TenantQuotas.model_validate_json(q) if (q := v.get("quotas")) else None,
    )


def _calendars_json(calendars: Mapping[str, list[date]]) -> str:
    """A task's resolved calendars as one compact string attribute."""
    plain = {name: [d.isoformat() for d in days] for name, days in calendars.items()}
    return json.dumps(plain, separators=(",", ":"))


def calendar_item(calendar: Calendar) -> dict[str, Any]:
    """A named calendar's item, with its entry in the calendar list (by_date, keys only)."""
    return _to_item(
        {
            **{k: v["S"] for k, v in _calendar_key(calendar.name).items()},
            "kind": "calendar",
            "date_pk": CALENDARS_PARTITION,
            "calendar": calendar.model_dump_json(),
        }
    )


def calendar_from(item: dict[str, Any]) -> Calendar:
    return Calendar.model_validate_json(_from_item(item)["calendar"])


def _defaulted(inst: InstanceRecord) -> set[str]:
    """The instance's top-level fields at their default: not stored, refilled on read. Every
    policy a task does not use is one (an instance item over 1 KB costs 2 write units per
    status write); `InstanceRecord`'s defaults are thereby part of the stored format."""
    return {
        name
        for name, info in InstanceRecord.model_fields.items()
        if not info.is_required()
        and getattr(inst, name) == info.get_default(call_default_factory=True)
    }


def instance_item(inst: InstanceRecord, buckets: int) -> dict[str, Any]:
    body = inst.model_dump(
        mode="json",
        exclude=set(_INSTANCE_TOP_LEVEL)
        | {"dispatch_lease_until", "owed", "remaining", "failed_shards", "unrun_shards", "sent"}
        | {"waiting"}  # top level: set and cleared by `advance_dispatch`
        | _defaulted(inst),
    )
    parts = shard_parts(inst.plan.count)  # fixed at the claim (`keys.shard_parts`)
    if parts > 1:
        # Also in the body, which a version before the parts refuses to read (an unknown
        # field): its workers never run, nor key, a shard of an instance kept in parts.
        body["shard_parts"] = parts
    key = _instance_key(inst.instance_id)  # the slot, and a manual run's suffix
    values: dict[str, Any] = {
        "pk": key["pk"]["S"],
        "sk": key["sk"]["S"],
        "kind": "instance",
        "instance_id": inst.instance_id,
        "body": json.dumps(body, separators=(",", ":")),
        "status": inst.status.value,
        "reason": inst.reason,
        # The counter's first value: what its item starts from (`_counter_item`), and what
        # reads and `_ensure_counter` fall back on while it has no item. Never rewritten.
        "planned": inst.remaining,
        "finished_at": iso(inst.finished_at) if inst.finished_at else None,
        "status_pk": _status_pk(inst.status, inst.instance_id, buckets),
        "status_sk": listing_key(inst.instance_id),
        # by_date (keys only): written once with the item, never moved by an update.
        "date_pk": _date_pk(inst.task_id, inst.business_date),
        # what the final status write turns into `expires_at` (see _status_change)
        "retention_s": inst.retention_days * DAY_S,
    }
    if parts > 1:
        values["shard_parts"] = parts
        # Its own attribute, not derived from the parts: instances kept in parts before the
        # stripes count on their one counter item.
        values["counter_stripes"] = counter_stripes(parts)
    if inst.expires_at is not None:  # final as claimed
        values["expires_at"] = _epoch_s(inst.expires_at)
    if inst.dispatch_lease_until is not None:
        values["dispatch_lease_until_ms"] = to_ms(inst.dispatch_lease_until)
    if inst.sent:  # a number of its own, so that a step of a send rewrites no body
        values["sent"] = inst.sent
    if not inst.status.final:
        values["open_pk"] = _open_pk(inst.instance_id, buckets)
        values["open_sk"] = f"{iso(inst.deadline)}#{inst.instance_id}"
    elif inst.owed:  # final as claimed (skipped, failed to plan), its follow-ups owed
        values["owed"] = {step.value for step in inst.owed}
        values["open_pk"] = owed_partition(inst.instance_id, buckets)
        values["open_sk"] = f"{iso(inst.finished_at or inst.created_at)}#{inst.instance_id}"
    if inst.status is InstanceStatus.SCHEDULED and inst.fire_at is not None:
        values["due_pk"] = submission_partition(inst.instance_id, buckets)
        values["due_sk"] = f"{iso(inst.fire_at)}#{inst.instance_id}"
    return _to_item(values)


def counts(item: Mapping[str, Any], counter: Mapping[str, Any] | None) -> tuple[int, int, int]:
    """(remaining, failed_shards, unrun_shards): the counter item's; without one, the instance
    item's own counter (written by the previous version, see `_ensure_counter`), else
    `planned` (nothing counted yet: the claimer died before writing the counter). A counter
    that never counted an unrun shard has no `unrun_shards`: 0."""
    source = counter if counter is not None else item
    if "remaining" in source:
        unrun = int(source.get("unrun_shards", {"N": "0"})["N"])
        return int(source["remaining"]["N"]), int(source["failed_shards"]["N"]), unrun
    return int(item.get("planned", {"N": "0"})["N"]), 0, 0


@dataclass(frozen=True)
class StripedCounts:
    """The counts of an instance counted on stripes (`keys.counter_stripes`)."""

    remaining: int
    failed_shards: int
    unrun_shards: int
    reducing: bool  # stripe 0 marks the reduce counted (`start_reduce`)
    expires_at_s: int | None = None  # the latest TTL a stripe took (epoch seconds)


def striped_counts(planned: int, stripes: Sequence[Mapping[str, Any] | None]) -> StripedCounts:
    """An instance's counts from its stripes (in stripe order; None: a stripe not yet written):
    its `planned` shards, and its reduce once counted, less the shards the stripes saw end."""

    def total(name: str) -> int:
        return sum(int(s.get(name, {"N": "0"})["N"]) for s in stripes if s is not None)

    first = stripes[0] if stripes else None
    reducing = bool(first is not None and first.get("reducing", {}).get("BOOL", False))
    return StripedCounts(
        # Never below zero: a read of stripe 0 before the reduce's mark and of another after
        # the reduce's count (eventually consistent, or between two reads) would say -1.
        remaining=max(0, planned + int(reducing) - total("ended")),
        failed_shards=total("failed_shards"),
        unrun_shards=total("unrun_shards"),
        reducing=reducing,
        expires_at_s=max(
            (int(s["expires_at"]["N"]) for s in stripes if s is not None and "expires_at" in s),
            default=None,
        ),
    )


def instance_from(
    item: dict[str, Any],
    counter: Mapping[str, Any] | None = None,
    stripes: Sequence[Mapping[str, Any] | None] | None = None,
) -> InstanceRecord:
    """An instance item as a record, with its counts from its counter item, or from its
    stripes when it is counted on stripes (`stripes` given, each None where not written)."""
    v = _from_item(item)
    body = json.loads(v["body"])
    body.pop("shard_parts", None)  # the adapter's, beside the record (`instance_item`)
    for name in _INSTANCE_TOP_LEVEL:
        body[name] = v.get(name)
    if stripes is not None:
        counted = striped_counts(int(v.get("planned", 0)), stripes)
        body["remaining"], body["failed_shards"] = counted.remaining, counted.failed_shards
        body["unrun_shards"] = counted.unrun_shards
    else:
        body["remaining"], body["failed_shards"], body["unrun_shards"] = counts(item, counter)
    if "dispatch_lease_until_ms" in v:
        body["dispatch_lease_until"] = from_ms(v["dispatch_lease_until_ms"])
    body["sent"] = int(v.get("sent", 0))
    body["waiting"] = v.get("waiting")  # top level: set and cleared by `advance_dispatch`
    if "deadline_at" in v:  # moved by `advance_dispatch` (a capped instance's paced send)
        body["deadline"] = v["deadline_at"]
    body["owed"] = sorted(v.get("owed", ()))  # a string set, absent once nothing is owed
    return InstanceRecord.model_validate(body)


def shard_from(item: dict[str, Any]) -> ShardRecord:
    v = _from_item(item)
    attempts = [
        Attempt.model_validate({**a, "number": n, **_log_of(a)})
        for n, a in enumerate(v.get("attempts", []), 1)
    ]
    return ShardRecord(
        instance_id=v["instance_id"],
        index=v["idx"],
        bounds=json.loads(v.get("bounds", "{}")),
        status=ShardStatus(v["status"]),
        attempt=v.get("attempt", 0),
        max_attempts=v.get("max_attempts", 1),
        owner=v.get("owner"),
        lease_until=from_ms(v["lease_until_ms"]) if "lease_until_ms" in v else None,
        attempts=attempts,
        error=v.get("error") or None,
        result=json.loads(v["result"]) if v.get("result") else None,
        expires_at=datetime.fromtimestamp(v["expires_at"], UTC) if "expires_at" in v else None,
    )


def _log_of(entry: Mapping[str, Any]) -> dict[str, Any]:
    """An attempt entry's log, stored as one JSON string (its fields may hold floats, which
    a DynamoDB map would need as numbers of its own)."""
    text = entry.get("log")
    return {"log": json.loads(text)} if isinstance(text, str) else {}


def attempt_value(attempt: Attempt) -> dict[str, Any]:
    data = attempt.model_dump(mode="json", exclude={"number", "log"})
    if attempt.log is not None:
        data["log"] = attempt.log.model_dump_json(exclude_defaults=True)
    return cast("dict[str, Any]", _ser.serialize({k: v for k, v in data.items() if v is not None}))


def attempt_end(attempt: Attempt) -> tuple[str, dict[str, str], dict[str, Any]]:
    """The worker's end of `attempt`, set field by field on its entry (SET clauses, names,
    values). Its `keys` are left as the entry has them: each effect's transaction appended its
    key there, including one whose response the worker never saw (its call raised), which the
    worker's own list lacks."""
    fields = attempt_value(attempt)["M"]
    fields.pop("keys", None)
    n = attempt.number - 1
    names = {f"#a_{i}": name for i, name in enumerate(fields)}
    values = {f":a_{i}": value for i, value in enumerate(fields.values())}
    clauses = ", ".join(f"attempts[{n}].#a_{i} = :a_{i}" for i in range(len(fields)))
    return clauses, names, values
