"""The bounds an input is held to before any work is done on it (docs/limits.md): how large a
task file or a request body is, how deep it nests, how many tasks a file holds, how deep params
nest. They are checked where the input enters (the YAML loader, the API's body, the task file
model, the params type), each refusal naming its limit; the limits of what a firing writes (an
item, a shard message, a plan) are checked where those are built."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

#: Bytes of a task file (YAML or JSON) and of a management API request body. Reading and
#: validating a file take time and memory in proportion (PyYAML reads about 100 KB a second):
#: large data belongs in object storage, passed by its key.
MAX_FILE_BYTES = 1024 * 1024
#: Tasks one task file (one `POST /tasks`) holds: each is validated, checked and written.
MAX_TASKS_PER_FILE = 500
#: Levels a task file or a request body nests (a list or a mapping inside another is one
#: level more): the parsers and the validators recurse once per level.
MAX_DOCUMENT_DEPTH = 64
#: Nodes a YAML file expands to, an alias counting the nodes it repeats each time it is used:
#: nine lines of aliases can name a billion nodes, which every later step would walk. Counted
#: as they are composed (PyYAML takes about 1 KB a node), so a refusal stops there. A file of
#: 500 tasks takes a few tens of thousands; a plan's or params' size limits, fewer.
MAX_YAML_NODES = 100_000
#: Levels params nest (a task's, a run's, a custom planner's, a static shard's bounds): they
#: travel in every shard message, whose reader takes at most 200 levels with its envelope.
MAX_PARAMS_DEPTH = 32


class InputError(ValueError):
    """An input refused before it is used: past one of these limits, or not readable as
    written (a key given twice); the message names which."""


def too_large(what: str) -> str:
    """Why a file or body past `MAX_FILE_BYTES` is refused (`what`: "a task file")."""
    return (
        f"larger than {MAX_FILE_BYTES:,} bytes (1 MiB), the most {what} takes: split it, or keep "
        "large data in object storage and pass its key"
    )


def too_deep(limit: int, what: str) -> str:
    """Why a value nesting deeper than `limit` is refused (`what`: "params")."""
    return f"nests deeper than {limit} levels, the most {what} may"


def nesting(value: Any, *, beyond: int) -> int:
    """How many levels of lists and mappings `value` nests (a scalar 0, `{"a": [1]}` 2). The
    walk stops once past `beyond` (and answers `beyond + 1`), so its cost is bounded by the
    value's first `beyond` levels; it never recurses, whatever the depth."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, Mapping):
            children: Any = item.values()
        elif isinstance(item, list | tuple | set | frozenset):
            children = item
        else:
            continue
        if level > beyond:
            return level
        deepest = max(deepest, level)
        stack.extend((child, level + 1) for child in children)
    return deepest


def check_params_depth(params: Any) -> Any:
    """`params` if they nest at most `MAX_PARAMS_DEPTH` levels; else ValueError naming it (the
    check of every params type, and of a run's params at the request)."""
    if nesting(params, beyond=MAX_PARAMS_DEPTH) > MAX_PARAMS_DEPTH:
        raise ValueError(too_deep(MAX_PARAMS_DEPTH, "params"))
    return params


def _distinct_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object's members, refusing a key given twice (`json` would keep the last value)."""
    mapping: dict[str, Any] = {}
    for key, value in pairs:
        if key in mapping:
            raise InputError(f"found duplicate key {key!r}")
        mapping[key] = value
    return mapping


def load_json(text: str | bytes) -> Any:
    """JSON text parsed within the limits (a request body, `--params`, a JSON task file), each
    object giving each key once.

    Raises:
        InputError: it nests deeper than `MAX_DOCUMENT_DEPTH` levels, or an object gives a key
            twice.
        json.JSONDecodeError: it is not JSON.
    """
    try:
        value = json.loads(text, object_pairs_hook=_distinct_keys)
    except RecursionError:  # the decoder recurses per level: far past the limit
        raise InputError(too_deep(MAX_DOCUMENT_DEPTH, "a document")) from None
    if nesting(value, beyond=MAX_DOCUMENT_DEPTH) > MAX_DOCUMENT_DEPTH:
        raise InputError(too_deep(MAX_DOCUMENT_DEPTH, "a document"))
    return value
