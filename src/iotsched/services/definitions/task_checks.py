"""The checks of one task definition that its schema cannot make: a handler that loads and
takes its params, shards that can be planned (a custom planner that loads, takes its params and
plans; bounds an instance can store), an item DynamoDB can store and shard messages SQS can
carry. Each returns the problems as `task 'id': field: message` lines.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import ValidationError

from iotsched.core.itemsize import ITEM_LIMIT_BYTES, item_size
from iotsched.core.payload_limits import (
    largest_task_message,
    message_problem,
)
from iotsched.core.plugins import PluginError
from iotsched.core.sharding import (
    PlannerParamsError,
    PlanningError,
    check_plan_fits,
    find_planner,
    plan_shards,
    planner_names,
    planner_params,
)
from iotsched.core.task_definition import TaskDefinition
from iotsched.core.task_sharding import CustomSharding, StaticSharding
from iotsched.core.value_types import params_problems
from iotsched.registry import spec_for

#: Room a task item keeps for what is stored beside its definition: keys, version, clock, index
#: keys and the blocking hold (up to 100 queued instance ids).
TASK_STATE_BYTES = 16 * 1024
#: The largest definition a task item holds within DynamoDB's item limit.
MAX_DEFINITION_BYTES = ITEM_LIMIT_BYTES - TASK_STATE_BYTES


def handler_problems(
    definition: TaskDefinition, handlers: Mapping[str, Callable[..., Any]]
) -> list[str]:
    """Why the task's handler and reduce handler cannot run it: a handler that cannot be loaded
    (importing its module to know: `task 'x': handler: handler 'h' from acme-jobs 1.2: ...`),
    or params that do not fit a handler's params model (`task 'x': params.currency: ...`).
    Names unknown to `handlers` are reported apart."""
    problems: list[str] = []
    for field_name in ("handler", "reduce"):
        name = getattr(definition, field_name)
        if name is None or name not in handlers:
            continue
        try:
            spec = spec_for(name, handlers[name])
        except PluginError as exc:
            problems.append(f"task {definition.id!r}: {field_name}: {exc}")
            continue
        try:
            spec.parse_params(definition.params)
        except ValidationError as exc:
            problems += [
                f"task {definition.id!r}: {problem}"
                for problem in params_problems(exc)
                if f"task {definition.id!r}: {problem}" not in problems
            ]
    return problems


def sharding_problems(definition: TaskDefinition) -> list[str]:
    """Why the task's shards cannot be planned, as each firing would find: a custom planner
    unknown, not loadable (importing its module to know), given params that do not fit its
    params model (`task 'x': sharding.params.buckets: ...`, found before it runs), failing, or
    a plan (custom or static) whose bounds an instance cannot store. A planner is pure, so what
    it answers here it answers at every claim; `groups` are read only when a task fires."""
    sharding = definition.sharding
    where = f"task {definition.id!r}: sharding"
    if isinstance(sharding, CustomSharding):
        try:
            found = find_planner(sharding.planner)
        except PluginError as exc:
            return [f"{where}.planner: {exc}"]
        if found is None:
            known = ", ".join(planner_names())
            return [f"{where}.planner: unknown planner {sharding.planner!r} (known: {known})"]
        try:
            planner_params(sharding.planner, found, sharding.params)
        except PlannerParamsError as exc:
            return [f"{where}.{problem}" for problem in exc.problems]
    elif not isinstance(sharding, StaticSharding):
        return []
    try:
        check_plan_fits(plan_shards(sharding))
    except PlanningError as exc:
        return [f"{where}: {exc}"]
    return []


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
