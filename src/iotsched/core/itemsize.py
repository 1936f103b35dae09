"""The size of a DynamoDB item by DynamoDB's rules (its developer guide, "item sizes"), computed
before anything is written, so that an item over the 400 KB limit is refused as bad input,
naming the field, with nothing written.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

#: DynamoDB's maximum item size, names and values together.
ITEM_LIMIT_BYTES = 400 * 1024


def value_size(value: Any) -> int:
    """Bytes `value` takes as a DynamoDB attribute value (JSON-like Python values)."""
    if value is None or isinstance(value, bool):
        return 1
    if isinstance(value, str):
        return len(value.encode("utf-8"))
    if isinstance(value, bytes | bytearray):
        return len(value)
    if isinstance(value, int | float | Decimal):
        digits = Decimal(str(value)).normalize().as_tuple().digits
        return (len(digits) + 1) // 2 + 1
    if isinstance(value, Mapping):
        return 3 + sum(len(str(k).encode("utf-8")) + value_size(v) + 1 for k, v in value.items())
    if isinstance(value, list | tuple | set | frozenset):
        return 3 + sum(value_size(v) + 1 for v in value)
    raise TypeError(f"no DynamoDB size for {type(value).__name__}")


def item_size(item: Mapping[str, Any]) -> int:
    """Bytes of an item: every attribute's name and value."""
    return sum(len(name.encode("utf-8")) + value_size(value) for name, value in item.items())
