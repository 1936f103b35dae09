"""Items and values: DynamoDB's typed attributes to plain Python and back."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer

from iotsched.adapters.dynamodb.keys import _counter_key

DAY_S = 86_400
_INSTANCE_TOP_LEVEL = ("status", "reason", "finished_at")

#: The task item's attributes `DynamoDBStore._task_from` reads (the due query asks for these).
_TASK_RECORD_FIELDS = (
    "definition",
    "version",
    "next_fire",
    "last_slot",
    "paused",
    "updated_at",
    "active",
    "queue",
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
