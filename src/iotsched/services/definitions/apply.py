"""Task definitions: validate a whole file, then write all of it or none of it."""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

from pydantic import ValidationError

from iotsched.core.audit import AuditRecord, Verb, definition_diff, dict_diff, new_audit
from iotsched.core.decisions import first_fire_after
from iotsched.core.fires import start_clock
from iotsched.core.itemsize import ITEM_LIMIT_BYTES, item_size
from iotsched.core.model import (
    AfterTrigger,
    Calendar,
    CustomSharding,
    GroupsSharding,
    ShardingStrategy,
    TaskDefinition,
    TaskFile,
    TenantQuotas,
    with_tenant_defaults,
)
from iotsched.core.payload_limits import (
    largest_task_message,
    message_problem,
)
from iotsched.core.plugins import PluginError
from iotsched.core.records import TaskRecord
from iotsched.core.sharding import find_planner, planner_names
from iotsched.ports.audit import TaskQuotaError
from iotsched.ports.stores import TaskStore
from iotsched.registry import params_problems, spec_for
from iotsched.services.operations.audit import UNNAMED
from iotsched.services.tenancy.quotas import (
    prepare_quotas,
    quotas_for_file,
    seed_task_count,
    stamp_quotas,
)


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
    return list(parse_file(data, handlers=handlers).tasks)


def parse_file(data: Any, *, handlers: Collection[str]) -> TaskFile:
    """`parse_task_file`, keeping the file's named calendars (`calendars:`) beside its tasks."""
    if not isinstance(data, Mapping) or ("tasks" not in data and "calendars" not in data):
        raise TaskFileError(["(file): a task file is a mapping with a 'tasks' list"])
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
    problems += [p for t in parsed.tasks if (p := planner_problem(t)) is not None]
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


def planner_problem(definition: TaskDefinition) -> str | None:
    """Why the task's custom planner cannot plan it: unknown, or not loadable (importing its
    module to know)."""
    if not isinstance(definition.sharding, CustomSharding):
        return None
    name = definition.sharding.planner
    where = f"task {definition.id!r}: sharding.planner"
    try:
        found = find_planner(name)
    except PluginError as exc:
        return f"{where}: {exc}"
    if found is None:
        return f"{where}: unknown planner {name!r} (known: {', '.join(planner_names())})"
    return None


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
    definitions: list[TaskDefinition],
    store: TaskStore,
    *,
    now: datetime,
    calendars: Mapping[str, Calendar] | None = None,
    quotas: Mapping[str, TenantQuotas] | None = None,
    actor: str = UNNAMED,
    verb: Verb = Verb.APPLY,
) -> ApplyResult:
    """Create or update tasks; an unchanged definition keeps its version and clock.

    Each task written is a new version (its definition stored as a version item of its own)
    with one audit record by `actor` (`verb`: apply, or rollback) holding the field-level
    difference, all written with the task. Of two applies that read the same version, the
    second is refused (TaskConflictError) rather than writing over the first.

    `calendars`: the named calendars the definitions exclude, by name; each task stores the
    dates of those it names (`TaskRecord.calendars`), so the tick reads no calendar.
    `quotas`: tenants' quotas, by tenant; each task of such a tenant stores them
    (`TaskRecord.quotas`), so neither the tick nor a worker reads a tenant item. A tenant not
    named keeps what its tasks stored.

    A changed trigger restarts the task's clock from `now` (or from its last claimed slot if
    later), so a re-apply never re-fires a slot that was already claimed. A change of what moves
    or stops its fires (jitter, window, exclusions, max_runs, end_at) keeps the trigger's grid
    and recomputes the next fire instant from the last claimed slot (from `now` if its clock
    had stopped).
    """
    created: list[str] = []
    updated: list[str] = []
    unchanged: list[str] = []
    records: list[TaskRecord] = []
    audit: list[AuditRecord] = []
    currents: dict[str, TaskRecord | None] = {}
    for definition in definitions:
        current = currents[definition.id] = store.get_task(definition.id)
        resolved = resolve_calendars(definition, calendars or {})
        tenant_quotas = _quotas_of(definition, current, quotas or {})
        if (
            current is not None
            and current.definition == definition
            and current.calendars == resolved
            and current.quotas == tenant_quotas
        ):
            unchanged.append(definition.id)
            continue
        runs = current.runs if current is not None else 0
        last_slot = current.last_slot if current is not None else None
        start = now if last_slot is None else max(now, last_slot)
        next_fire, last_slot = start_clock(
            definition, start, calendars=resolved, runs=runs, last_slot=last_slot
        )
        if current is not None and current.definition.trigger == definition.trigger:
            next_fire, last_slot = current.next_fire, current.last_slot
            if _fires_changed(current, definition, resolved):
                if current.next_fire is not None and last_slot is not None:
                    # The clock runs on from its last slot under the new fields.
                    next_fire = first_fire_after(
                        definition, last_slot, calendars=resolved, runs=runs
                    )
                else:
                    next_fire, last_slot = start_clock(
                        definition, start, calendars=resolved, runs=runs, last_slot=last_slot
                    )
        version = _next_version(current, definition.id, store)
        records.append(
            TaskRecord(
                definition=definition,
                version=version,
                next_fire=next_fire,
                last_slot=last_slot,
                paused=current.paused if current else False,
                pause_note=current.pause_note if current else None,
                updated_at=now,
                updated_by=actor,
                calendars=resolved,
                quotas=tenant_quotas,
            )
        )
        diff = definition_diff(current.definition if current else None, definition)
        before = _dates_json(current.calendars) if current else {}
        diff.update(dict_diff(before, _dates_json(resolved), "calendars."))
        diff.update(
            dict_diff(
                _quotas_json(current.quotas if current else None),
                _quotas_json(tenant_quotas),
                "quotas.",
            )
        )
        audit.append(
            new_audit(verb, definition.id, actor=actor, at=now, version=version, diff=diff)
        )
        (updated if current else created).append(definition.id)
    counted = _counted(records, currents, store)
    if records:
        store.put_tasks(records, audit=audit, counted=counted)
    return ApplyResult(created=created, updated=updated, unchanged=unchanged)


def _counted(
    records: list[TaskRecord], currents: Mapping[str, TaskRecord | None], store: TaskStore
) -> list[str]:
    """The tasks new to a tenant with `max_tasks`, each to be counted with its write; refused
    here, before anything is written, when they would take their tenant past it (the count in
    each write's transaction is what holds the quota under concurrent applies)."""
    by_tenant: dict[str, list[TaskRecord]] = {}
    for record in records:
        tenant, quotas = record.definition.tenant, record.quotas
        if tenant is not None and quotas is not None and quotas.max_tasks is not None:
            by_tenant.setdefault(tenant, []).append(record)
    counted: list[str] = []
    for tenant, mine in sorted(by_tenant.items()):
        limit = mine[0].quotas.max_tasks if mine[0].quotas else None
        assert limit is not None
        new = [r.task_id for r in mine if _new_to(tenant, currents.get(r.task_id))]
        if not new:
            continue
        count = store.tenant_task_count(tenant)
        if count is None:  # the quota came with a task's own stamp: count the tenant now
            seed_task_count(tenant, store)
            count = store.tenant_task_count(tenant) or 0
        if count + len(new) > limit:
            raise TaskQuotaError(tenant, limit, new)
        counted += new
    return counted


def _new_to(tenant: str, current: TaskRecord | None) -> bool:
    return current is None or current.definition.tenant != tenant


def _quotas_of(
    definition: TaskDefinition, current: TaskRecord | None, quotas: Mapping[str, TenantQuotas]
) -> TenantQuotas | None:
    """The quotas a task stores: its tenant's as given, else what it stored (of the same
    tenant); none for a tenant without any."""
    tenant = definition.tenant
    if tenant is None:
        return None
    if tenant in quotas:
        given = quotas[tenant]
        return None if given.empty else given
    if current is not None and current.definition.tenant == tenant:
        return current.quotas
    return None


def _quotas_json(quotas: TenantQuotas | None) -> dict[str, Any]:
    return {} if quotas is None else quotas.model_dump(exclude_none=True)


def _dates_json(calendars: Mapping[str, list[date]]) -> dict[str, list[str]]:
    return {name: [d.isoformat() for d in days] for name, days in calendars.items()}


def _next_version(current: TaskRecord | None, task_id: str, store: TaskStore) -> int:
    """The version a write of the task takes: one past the stored task's, or, for a task
    created again after a delete, one past its last stored version (versions are kept)."""
    if current is not None:
        return current.version + 1
    kept = store.task_versions(task_id)
    return kept[-1].version + 1 if kept else 1


#: The fields besides the trigger that decide when (and whether) a task's slots fire.
_FIRE_FIELDS = ("jitter_s", "window", "exclude", "max_runs", "end_at")


def _fires_changed(
    current: TaskRecord, definition: TaskDefinition, resolved: Mapping[str, list[date]]
) -> bool:
    old = current.definition
    return current.calendars != resolved or any(
        getattr(old, name) != getattr(definition, name) for name in _FIRE_FIELDS
    )


def resolve_calendars(
    definition: TaskDefinition, calendars: Mapping[str, Calendar]
) -> dict[str, list[date]]:
    """The dates of each named calendar `definition` excludes (a name not in `calendars` is
    left out: `check_calendars` refuses it before anything is written)."""
    return {
        name: list(calendars[name].dates)
        for name in definition.exclude.calendars
        if name in calendars
    }


def check_calendars(
    definitions: list[TaskDefinition],
    calendars: Mapping[str, Calendar],
    known: Callable[[], list[str]],
) -> None:
    """Refuse a task naming a calendar neither in its file nor stored.

    Raises:
        TaskFileError: naming each task and the unknown calendar (with the known ones).
    """
    problems = [
        (d.id, name) for d in definitions for name in d.exclude.calendars if name not in calendars
    ]
    if problems:
        names = sorted({*calendars, *known()})
        listed = ", ".join(names) if names else "none"
        raise TaskFileError(
            [
                f"task {task_id!r}: exclude.calendars: unknown calendar {name!r} (known: {listed})"
                for task_id, name in problems
            ]
        )


def apply_calendars(
    calendars: list[Calendar],
    store: TaskStore,
    *,
    skip: Collection[str] = (),
    actor: str = UNNAMED,
    now: datetime | None = None,
) -> list[str]:
    """Store the named calendars that changed, and re-store the resolved dates of every stored
    task naming one of them (but those in `skip`, which the caller rewrites whole); returns the
    names of the calendars written. Reads the task list only when a calendar changed."""
    stored = {c.name: store.get_calendar(c.name) for c in calendars}
    changed = [c for c in calendars if stored[c.name] != c]
    if not changed:
        return []
    by_name = {c.name: list(c.dates) for c in changed}
    resolved = {
        t.task_id: {
            **t.calendars,
            **{n: by_name[n] for n in t.definition.exclude.calendars if n in by_name},
        }
        for t in store.list_tasks()
        if t.task_id not in skip and by_name.keys() & set(t.definition.exclude.calendars)
    }
    audit = []
    if now is not None:  # one record per calendar changed, written with it
        for c in changed:
            was = stored[c.name]
            before = {"dates": [d.isoformat() for d in was.dates]} if was else {}
            after = {"dates": [d.isoformat() for d in c.dates]}
            audit.append(
                new_audit(
                    Verb.CALENDARS,
                    f"calendar:{c.name}",
                    actor=actor,
                    at=now,
                    diff=dict_diff(before, after),
                )
            )
    store.put_calendars(changed, resolved, audit=audit)
    return [c.name for c in changed]


@dataclass(frozen=True)
class AppliedFile:
    """What applying a task file did: every task id it holds (`valid`), and, unless it was a
    dry run, which of them were created, updated or left unchanged, and which of its named
    calendars were written (`calendars`: those that changed)."""

    dry_run: bool
    valid: list[str]
    created: list[str]
    updated: list[str]
    unchanged: list[str]
    calendars: list[str] = field(default_factory=list)


def apply_task_file(
    data: Any,
    *,
    handlers: Collection[str],
    store: Callable[[], TaskStore],
    now: Callable[[], datetime],
    dry_run: bool = False,
    actor: str = UNNAMED,
    verb: Verb = Verb.APPLY,
) -> AppliedFile:
    """Validate a parsed task file whole, check its `after` parents and the calendars its
    tasks name, then write all of it: its named calendars first, then its tasks.

    `store` is called only when the store is needed (parents or stored calendars to check, or
    anything to write): a dry run of a file that names neither reads nothing, so it needs no
    deployment.

    Raises:
        TaskFileError: every problem of the file, its unknown parents or cycle, or a calendar
            neither in the file nor stored; nothing is written.
    """
    parsed = parse_file(data, handlers=handlers)
    definitions = list(parsed.tasks)
    tasks: TaskStore | None = None

    def opened() -> TaskStore:
        nonlocal tasks
        tasks = tasks or store()
        return tasks

    if any(_parents(d) for d in definitions):
        check_dependencies(definitions, [t.definition for t in opened().list_tasks()])
    calendars = {c.name: c for c in parsed.calendars}
    for name in sorted({n for d in definitions for n in d.exclude.calendars} - calendars.keys()):
        stored = opened().get_calendar(name)
        if stored is not None:
            calendars[name] = stored
    check_calendars(definitions, calendars, lambda: [c.name for c in opened().list_calendars()])
    ids = [d.id for d in definitions]
    if dry_run:
        return AppliedFile(dry_run=True, valid=ids, created=[], updated=[], unchanged=[])
    at = now()
    written = apply_calendars(list(parsed.calendars), opened(), skip=set(ids), actor=actor, now=at)
    quotas = {t.name: t.quotas for t in parsed.tenants if t.quotas is not None}
    for tenant, given in sorted(quotas.items()):
        prepare_quotas(tenant, given, opened())
    named = {d.tenant for d in definitions if d.tenant is not None}
    applied = apply_tasks(
        definitions,
        opened(),
        now=at,
        calendars=calendars,
        quotas=quotas_for_file(named, quotas, opened()),
        actor=actor,
        verb=verb,
    )
    for tenant, given in sorted(quotas.items()):
        stamp_quotas(tenant, given, opened(), skip=set(ids))
    return AppliedFile(
        dry_run=False,
        valid=ids,
        created=applied.created,
        updated=applied.updated,
        unchanged=applied.unchanged,
        calendars=written,
    )
