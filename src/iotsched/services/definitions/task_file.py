"""A task file read whole: its schema, then every task's own checks, every problem named.

`parse_file` either returns the whole file (tasks, named calendars, tenants) or raises one
`TaskFileError` listing each problem as `task 'id': field: message`; it reads no store.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from pydantic import ValidationError

from iotsched.core.task_definition import TaskDefinition
from iotsched.core.task_file import (
    TaskFile,
    too_many_tasks,
    with_tenant_defaults,
)
from iotsched.core.task_sharding import (
    GroupsSharding,
    ShardingStrategy,
)
from iotsched.core.tenant_scope import tenant_problem
from iotsched.services.definitions.task_checks import (
    handler_problems,
    send_problem,
    sharding_problems,
    size_problem,
)


class TaskFileError(ValueError):
    """A task file that cannot be applied; `problems` name the task and the field of each."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


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
    return list(parse_file(data, handlers=handlers).tasks)


def parse_file(data: Any, *, handlers: Collection[str]) -> TaskFile:
    """`parse_task_file`, keeping the file's named calendars (`calendars:`) beside its tasks."""
    if not isinstance(data, Mapping) or ("tasks" not in data and "calendars" not in data):
        raise TaskFileError(["(file): a task file is a mapping with a 'tasks' list"])
    if (too_many := too_many_tasks(data)) is not None:
        raise TaskFileError([f"tasks: {too_many}"])
    try:
        parsed = TaskFile.model_validate(with_tenant_defaults(data))
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
    if isinstance(handlers, Mapping):
        problems += [p for t in parsed.tasks for p in handler_problems(t, handlers)]
    problems += [p for t in parsed.tasks for p in sharding_problems(t)]
    problems += [p for t in parsed.tasks if (p := tenant_problem(t)) is not None]
    problems += [
        f"task {t.id!r}: window.group_attribute: a window per device group needs sharding: "
        f"groups (this task's sharding is {t.sharding.strategy.value!r})"
        for t in parsed.tasks
        if t.window is not None
        and t.window.per_group
        and not isinstance(t.sharding, GroupsSharding)
    ]
    problems += [p for t in parsed.tasks if (p := size_problem(t) or send_problem(t)) is not None]
    if problems:
        raise TaskFileError(problems)
    return parsed
