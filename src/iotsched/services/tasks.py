"""Task definitions: validate a whole file, then write all of it or none of it."""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from iotsched.core.decisions import first_fire_after
from iotsched.core.fits import largest_task_message, message_problem
from iotsched.core.itemsize import ITEM_LIMIT_BYTES, item_size
from iotsched.core.model import (
    AfterTrigger,
    CustomSharding,
    ShardingStrategy,
    TaskDefinition,
    TaskFile,
)
from iotsched.core.records import TaskRecord
from iotsched.core.sharding import planner_names
from iotsched.ports import TaskStore


class TaskFileError(ValueError):
    """A task file that cannot be applied; `problems` name the task and the field of each."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


#: Room a task item keeps for what is stored beside its definition: keys, version, clock, index
#: keys and the blocking hold (up to 100 queued instance ids).
TASK_STATE_BYTES = 16 * 1024
#: The largest definition a task item holds within DynamoDB's item limit.
MAX_DEFINITION_BYTES = ITEM_LIMIT_BYTES - TASK_STATE_BYTES

_UNION_TAGS = {
    "trigger": {"cron", "rate", "at", "after"},
    "sharding": {s.value for s in ShardingStrategy},
}


def field_location(data: Any, loc: tuple[int | str, ...]) -> str:
    """`task 'x': trigger.cron` from a pydantic error location inside a task file."""
    parts = list(loc)
    prefix = ""
    if len(parts) >= 2 and parts[0] == "tasks" and isinstance(parts[1], int):
        index = parts[1]
        task_id = None
        if isinstance(data, Mapping) and isinstance(data.get("tasks"), list):
            entries = data["tasks"]
            if index < len(entries) and isinstance(entries[index], Mapping):
                task_id = entries[index].get("id")
        prefix = f"task {task_id!r}" if task_id else f"task #{index + 1}"
        parts = parts[2:]
    # pydantic puts the union member's tag in the path (trigger.cron.timezone, sharding.
    # id_range.shards); operators wrote trigger.timezone, so the tag goes unless it is the field.
    fields: list[str] = []
    for n, part in enumerate(parts):
        text = str(part)
        tagged = n > 0 and str(parts[n - 1]) in _UNION_TAGS
        if tagged and text in _UNION_TAGS[str(parts[n - 1])]:
            if n + 1 < len(parts):
                continue
            if fields and fields[-1] == text:
                continue
        fields.append(text)
    field = ".".join(fields) or "(file)"
    return f"{prefix}: {field}" if prefix else field


def parse_task_file(data: Any, *, handlers: Collection[str]) -> list[TaskDefinition]:
    """Validate a parsed task file (`{"tasks": [...]}`).

    Raises:
        TaskFileError: listing every problem as `task 'id': field: message`; nothing is
            returned, so nothing can be written, when any task is bad.
    """
    if not isinstance(data, Mapping) or "tasks" not in data:
        raise TaskFileError(["(file): a task file is a mapping with a 'tasks' list"])
    try:
        parsed = TaskFile.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            message = err["msg"].removeprefix("Value error, ")
            problems.append(f"{field_location(data, tuple(err['loc']))}: {message}")
        raise TaskFileError(problems) from None
    problems = [
        f"task {t.id!r}: {name}: unknown handler {getattr(t, name)!r} "
        f"(known: {', '.join(sorted(handlers))})"
        for t in parsed.tasks
        for name in ("handler", "reduce")
        if getattr(t, name) is not None and getattr(t, name) not in handlers
    ]
    problems += [
        f"task {t.id!r}: sharding.planner: unknown planner {t.sharding.planner!r} "
        f"(known: {', '.join(planner_names())})"
        for t in parsed.tasks
        if isinstance(t.sharding, CustomSharding) and t.sharding.planner not in planner_names()
    ]
    problems += [
        f"task {t.id!r}: window.group_attribute: a window taken from device groups is not "
        "supported; give the window's cron, duration and timezone on the task"
        for t in parsed.tasks
        if t.window is not None and t.window.group_attribute is not None
    ]
    problems += [p for t in parsed.tasks if (p := size_problem(t) or send_problem(t)) is not None]
    if problems:
        raise TaskFileError(problems)
    return list(parsed.tasks)


def size_problem(definition: TaskDefinition) -> str | None:
    """`task 'x': params: too large to store: ...` if the task's item would pass DynamoDB's
    item limit (the definition is stored as one JSON string), naming its largest field."""
    size = item_size({"definition": definition.model_dump_json()})
    if size <= MAX_DEFINITION_BYTES:
        return None
    fields = definition.model_dump(mode="json")
    largest = max(
        fields,
        key=lambda name: len(
            json.dumps(fields[name], ensure_ascii=False, separators=(",", ":")).encode()
        ),
    )
    return (
        f"task {definition.id!r}: {largest}: too large to store: the task takes {size:,} bytes, "
        f"which exceeds the {MAX_DEFINITION_BYTES:,} a task holds within DynamoDB's 400 KB item "
        "limit; keep large data in object storage and pass its key"
    )


def send_problem(definition: TaskDefinition) -> str | None:
    """`task 'x': params: too large to send: ...` if the task's largest shard message would
    pass SQS's message limit (every shard message carries the task's params)."""
    problem = message_problem(largest_task_message(definition))
    return f"task {definition.id!r}: {problem}" if problem else None


def check_dependencies(
    definitions: list[TaskDefinition], existing: Collection[TaskDefinition]
) -> None:
    """Reject `after` triggers naming an unknown parent, or closing a cycle.

    Parents may be in the file or already stored; a definition in the file replaces the stored
    one of the same id.

    Raises:
        TaskFileError: naming the task and the unknown parent, or the cycle (`a -> b -> a`).
    """
    graph: dict[str, list[str]] = {d.id: _parents(d) for d in existing}
    graph.update({d.id: _parents(d) for d in definitions})
    problems = [
        f"task {d.id!r}: trigger.after: unknown parent {parent!r}"
        for d in definitions
        for parent in _parents(d)
        if parent not in graph
    ]
    if problems:
        raise TaskFileError(problems)
    cycle = _find_cycle(graph)
    if cycle:
        raise TaskFileError(
            [f"task {cycle[0]!r}: trigger.after: dependency cycle {' -> '.join(cycle)}"]
        )


def _parents(definition: TaskDefinition) -> list[str]:
    trigger = definition.trigger
    return list(trigger.after) if isinstance(trigger, AfterTrigger) else []


def _find_cycle(graph: Mapping[str, list[str]]) -> list[str] | None:
    """A cycle in child -> parents edges, as a closed path, or None."""
    state: dict[str, int] = {}  # 1 visiting, 2 done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for parent in graph.get(node, []):
            if state.get(parent) == 1:
                return [*path[path.index(parent) :], parent]
            if parent not in state and (found := visit(parent)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


@dataclass(frozen=True)
class ApplyResult:
    """What `apply_tasks` did, per task id."""

    created: list[str]
    updated: list[str]
    unchanged: list[str]


def apply_tasks(
    definitions: list[TaskDefinition], store: TaskStore, *, now: datetime
) -> ApplyResult:
    """Create or update tasks; an unchanged definition keeps its version and clock.

    A changed trigger restarts the task's clock from `now` (or from its last claimed slot if
    later), so a re-apply never re-fires a slot that was already claimed.
    """
    created: list[str] = []
    updated: list[str] = []
    unchanged: list[str] = []
    records: list[TaskRecord] = []
    for definition in definitions:
        current = store.get_task(definition.id)
        if current is not None and current.definition == definition:
            unchanged.append(definition.id)
            continue
        start = now
        if current is not None and current.last_slot is not None:
            start = max(now, current.last_slot)
        next_fire = first_fire_after(definition, start)
        if current is not None and current.definition.trigger == definition.trigger:
            next_fire = current.next_fire
        records.append(
            TaskRecord(
                definition=definition,
                version=(current.version + 1) if current else 1,
                next_fire=next_fire,
                last_slot=current.last_slot if current else None,
                paused=current.paused if current else False,
                pause_note=current.pause_note if current else None,
                updated_at=now,
            )
        )
        (updated if current else created).append(definition.id)
    if records:
        store.put_tasks(records)
    return ApplyResult(created=created, updated=updated, unchanged=unchanged)


@dataclass(frozen=True)
class AppliedFile:
    """What applying a task file did: every task id it holds (`valid`), and, unless it was a
    dry run, which of them were created, updated or left unchanged."""

    dry_run: bool
    valid: list[str]
    created: list[str]
    updated: list[str]
    unchanged: list[str]


def apply_task_file(
    data: Any,
    *,
    handlers: Collection[str],
    store: Callable[[], TaskStore],
    now: Callable[[], datetime],
    dry_run: bool = False,
) -> AppliedFile:
    """Validate a parsed task file whole, check its `after` parents, then write all of it.

    `store` is called only when the store is needed (parents to check, or tasks to write): a dry
    run of a file that names no parent reads nothing, so it needs no deployment.

    Raises:
        TaskFileError: every problem of the file, or its unknown parents or cycle; nothing is
            written.
    """
    definitions = parse_task_file(data, handlers=handlers)
    tasks: TaskStore | None = None
    if any(_parents(d) for d in definitions):
        tasks = store()
        check_dependencies(definitions, [t.definition for t in tasks.list_tasks()])
    ids = [d.id for d in definitions]
    if dry_run:
        return AppliedFile(dry_run=True, valid=ids, created=[], updated=[], unchanged=[])
    applied = apply_tasks(definitions, tasks or store(), now=now())
    return AppliedFile(
        dry_run=False,
        valid=ids,
        created=applied.created,
        updated=applied.updated,
        unchanged=applied.unchanged,
    )
