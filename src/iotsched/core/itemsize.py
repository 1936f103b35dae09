"""The size of a DynamoDB item by DynamoDB's rules, computed before anything is written.

DynamoDB refuses an item over 400 KB (409,600 bytes) with a ValidationException; knowing the
size first lets bad input be refused as bad input, naming the field, with nothing written.
The rules (DynamoDB developer guide, "item sizes"): an item is the sum of its attribute names
(UTF-8) and values; a string is its UTF-8 length, binary its length, a number about one byte
per two significant digits plus one, a boolean or null one byte, a list or map 3 bytes plus
one byte per element plus the elements (and a map's keys).
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
