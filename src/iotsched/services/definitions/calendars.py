"""Named calendars a task excludes: resolved to dates stored with each task (so the tick reads
no calendar), refused when unknown, and written with an audit record per changed calendar."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from datetime import date, datetime

from iotsched.core.audit import Verb, dict_diff, new_audit
from iotsched.core.calendars import Calendar
from iotsched.core.task_definition import TaskDefinition
from iotsched.ports.tasks import TaskStore
from iotsched.services.definitions.task_file import TaskFileError
from iotsched.services.notices.audit import UNNAMED


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
                    tenant=None,  # calendars are shared: the operators'
                    diff=dict_diff(before, after),
                )
            )
    store.put_calendars(changed, resolved, audit=audit)
    return [c.name for c in changed]
