"""DynamoDB's limits and rules that moto does not enforce, as pure functions.

Item sizes by DynamoDB's rules (`item_size`), the per-item and per-transaction limits, and the
update expressions DynamoDB refuses because two actions write overlapping or conflicting
document paths (`update_paths_error`). No state and no I/O: the middleware applies them.
"""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

#: DynamoDB's limits.
MAX_ITEM_BYTES = 400 * 1024
MAX_TRANSACTION_ACTIONS = 100
MAX_TRANSACTION_BYTES = 4 * 1024 * 1024

# -- DynamoDB's item size --------------------------------------------------------------------


def attribute_value_size(value: Mapping[str, Any]) -> int:
    """The size of one typed value, by DynamoDB's rules."""
    ((kind, inner),) = value.items()
    if kind == "S":
        return len(str(inner).encode())
    if kind == "N":
        return _number_size(str(inner))
    if kind == "B":
        return len(base64.b64decode(inner)) if isinstance(inner, str) else len(inner)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(len(str(v).encode()) for v in inner)
    if kind == "NS":
        return sum(_number_size(str(v)) for v in inner)
    if kind == "BS":
        return sum(len(base64.b64decode(v)) if isinstance(v, str) else len(v) for v in inner)
    if kind == "L":
        return 3 + sum(1 + attribute_value_size(v) for v in inner)
    if kind == "M":
        return 3 + sum(len(k.encode()) + 1 + attribute_value_size(v) for k, v in inner.items())
    raise ValueError(f"unknown attribute type {kind!r}")


def item_size(item: Mapping[str, Any]) -> int:
    """An item's size: each attribute's name (UTF-8) plus its value."""
    return sum(len(name.encode()) + attribute_value_size(v) for name, v in item.items())


def _number_size(text: str) -> int:
    # One byte per two significant digits (leading and trailing zeros trimmed), plus one; one
    # more for a negative number.
    try:
        number = Decimal(text)
    except InvalidOperation:
        return len(text)
    if number.is_zero():
        return 1
    digits = len(number.normalize().as_tuple().digits)
    return math.ceil(digits / 2) + 1 + (1 if number < 0 else 0)


# -- DynamoDB's update expression paths --------------------------------------------------------

_CLAUSE = re.compile(r"(?<![#:\w])(SET|REMOVE|ADD|DELETE)(?!\w)", re.IGNORECASE)
_PATH = re.compile(r"\s*(#?\w+)((?:\[\d+\]|\.#?\w+)*)")
_ELEMENT = re.compile(r"\[(\d+)\]|\.(#?\w+)")
PathElement = tuple[str, str | int]  # ("key", name) or ("index", n)


def _split_top(text: str) -> list[str]:
    """`text` split at the commas outside parentheses (a function's arguments stay together)."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p for p in (part.strip() for part in parts) if p]


def _resolve(name: str, names: Mapping[str, str]) -> str:
    return names.get(name, name) if name.startswith("#") else name


def update_paths(expression: str, names: Mapping[str, str]) -> list[list[PathElement]]:
    """The document path each action of an update expression writes, names resolved."""
    cuts = list(_CLAUSE.finditer(expression))
    paths = []
    for n, cut in enumerate(cuts):
        end = cuts[n + 1].start() if n + 1 < len(cuts) else len(expression)
        for action in _split_top(expression[cut.end() : end]):
            match = _PATH.match(action)
            if match is None:
                continue  # malformed: moto answers it
            path: list[PathElement] = [("key", _resolve(match.group(1), names))]
            for index, key in _ELEMENT.findall(match.group(2)):
                path.append(("index", int(index)) if index else ("key", _resolve(key, names)))
            paths.append(path)
    return paths


def _path_text(path: list[PathElement]) -> str:
    return ", ".join(f"[{v}]" if kind == "index" else str(v) for kind, v in path)


def update_paths_error(expression: str, names: Mapping[str, str]) -> str | None:
    """DynamoDB's refusal of an update expression two of whose actions write overlapping
    document paths (one a prefix of the other) or conflicting ones (one indexes a list where
    the other names a map key); None if it has none."""
    paths = update_paths(expression, names)
    for n, one in enumerate(paths):
        for two in paths[n + 1 :]:
            common = 0
            while common < min(len(one), len(two)) and one[common] == two[common]:
                common += 1
            if common == min(len(one), len(two)):
                verdict = "overlap with each other; must remove or rewrite one of these paths"
            elif common > 0 and one[common][0] != two[common][0]:
                verdict = "conflict with each other; must remove or rewrite one of these paths"
            else:
                continue
            return (
                f"Invalid UpdateExpression: Two document paths {verdict}; "
                f"path one: [{_path_text(one)}], path two: [{_path_text(two)}]"
            )
    return None
