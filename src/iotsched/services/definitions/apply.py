"""Applying task definitions: a task file validated and checked whole, then written all or
nothing (its named calendars first, then its tasks, each a new version with its audit record).

An unchanged definition keeps its version and clock; a tenant's `max_tasks` is checked before
anything is written and counted in each task's own write.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

from iotsched.core.audit import AuditRecord, Verb, definition_diff, dict_diff, new_audit
from iotsched.core.calendars import Calendar
from iotsched.core.decisions import first_fire_after
from iotsched.core.fires import start_clock
from iotsched.core.quotas import TenantQuotas
from iotsched.core.task_definition import TaskDefinition
from iotsched.core.task_record import TaskRecord
from iotsched.ports.audit import TaskQuotaError
from iotsched.ports.tasks import TaskStore
from iotsched.services.definitions.calendars import (
    apply_calendars,
    check_calendars,
    resolve_calendars,
)
from iotsched.services.definitions.dependencies import check_dependencies, parents_of
from iotsched.services.definitions.task_file import parse_file
from iotsched.services.notices.audit import UNNAMED
from iotsched.services.tenancy.quotas import (
    prepare_quotas,
    quotas_for_file,
    seed_task_count,
    stamp_quotas,
)


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
    stamped_at: datetime | None = None,
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

    `now` is the schedule's time, from which clocks start; `stamped_at` the wall clock's, which
    the versions and audit records are stamped with (`now` if not given).

    A changed trigger restarts the task's clock from `now` (or from its last claimed slot if
    later), so a re-apply never re-fires a slot that was already claimed. A change of what moves
    or stops its fires (jitter, window, exclusions, max_runs, end_at) keeps the trigger's grid
    and recomputes the next fire instant from the last claimed slot (from `now` if its clock
    had stopped).
    """
    stamp = stamped_at or now
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
                # a task created (again) begins an incarnation of its own
                incarnation=current.incarnation if current else version,
                next_fire=next_fire,
                last_slot=last_slot,
                paused=current.paused if current else False,
                pause_note=current.pause_note if current else None,
                updated_at=stamp,
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
            new_audit(
                verb,
                definition.id,
                actor=actor,
                at=stamp,
                tenant=definition.tenant,
                version=version,
                diff=diff,
            )
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
    stamp: Callable[[], datetime] | None = None,
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

    if any(parents_of(d) for d in definitions):
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
    # The schedule's time starts the clocks; the wall clock's (`stamp`) stamps the records.
    stamped = stamp() if stamp is not None else at
    written = apply_calendars(
        list(parsed.calendars), opened(), skip=set(ids), actor=actor, now=stamped
    )
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
        stamped_at=stamped,
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
