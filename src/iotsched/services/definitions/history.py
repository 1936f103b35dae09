"""A task's versions, what each changed, and rolling a task back to one of them.

A rollback never rewrites history: it applies version N's definition as a new version, through
the same checks as an apply of a task file (handlers, sizes, parents, calendars).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from iotsched.core.audit import TaskVersion, Verb, definition_diff
from iotsched.ports.store_errors import UnreadableRecordError
from iotsched.ports.tasks import TaskStore
from iotsched.services.definitions.apply import (
    AppliedFile,
    apply_task_file,
)
from iotsched.services.definitions.control import TaskNotFoundError
from iotsched.services.notices.audit import UNNAMED

#: The longest window one audit listing reads (it reads one partition per day and bucket).
MAX_AUDIT_DAYS = 366


def audit_window(
    since: str | None, until: str | None, *, now: datetime
) -> tuple[datetime, datetime]:
    """The [since, until) of an audit listing from its options: ISO dates or instants (UTC
    without an offset); default the day before `now` up to `now`.

    Raises:
        ValueError: a bad date or instant, an empty window, or one over MAX_AUDIT_DAYS.
    """
    end = _instant(until, "--until") if until else now + timedelta(seconds=1)
    start = _instant(since, "--since") if since else end - timedelta(days=1)
    if start >= end:
        raise ValueError(f"--since {start.isoformat()} is not before --until {end.isoformat()}")
    if end - start > timedelta(days=MAX_AUDIT_DAYS):
        raise ValueError(f"an audit listing covers at most {MAX_AUDIT_DAYS} days")
    return start, end


def _instant(text: str, option: str) -> datetime:
    try:
        if len(text) == 10:
            day = date.fromisoformat(text)
            return datetime(day.year, day.month, day.day, tzinfo=UTC)
        found = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"{option} {text!r}: not an ISO date (2026-12-01) or instant (2026-12-01T12:00Z)"
        ) from None
    return found if found.tzinfo else found.replace(tzinfo=UTC)


def listed_incarnation(task_id: str | None, store: TaskStore) -> int | None:
    """The incarnation whose instances a listing of `task_id`'s shows: the stored task's (a
    task created again starts clean); every one (None) for no task, a deleted one, or one
    whose record cannot be read."""
    if task_id is None:
        return None
    try:
        task = store.get_task(task_id)
    except UnreadableRecordError:
        return None
    return task.incarnation if task is not None else None


class VersionNotFoundError(LookupError):
    """The task has no such stored version."""


@dataclass(frozen=True)
class VersionView:
    """One version as `tasks history` shows it: who wrote it, when, by which verb, and the
    field-level difference from the version before it (from nothing, for the first)."""

    version: int
    at: datetime
    actor: str
    verb: str
    current: bool
    diff: dict[str, list[Any]]

    def as_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "at": self.at.isoformat().replace("+00:00", "Z"),
            "actor": self.actor,
            "verb": self.verb,
            "current": self.current,
            "diff": self.diff,
        }


def task_history(task_id: str, store: TaskStore) -> list[VersionView]:
    """The stored versions of the task, oldest first: its current incarnation's, or, once it
    is deleted, every one kept (the operators' record of what ran under the id).

    Raises:
        TaskNotFoundError: neither the task nor any version of it is stored.
    """
    versions = store.task_versions(task_id)
    task = store.get_task(task_id)
    if not versions and task is None:
        raise TaskNotFoundError(task_id)
    if task is not None:
        versions = [v for v in versions if v.version >= task.incarnation]
    current = task.version if task else None
    views = []
    before: TaskVersion | None = None
    for v in versions:
        views.append(
            VersionView(
                version=v.version,
                at=v.at,
                actor=v.actor,
                verb=v.verb.value,
                current=v.version == current,
                diff=definition_diff(before.definition if before else None, v.definition),
            )
        )
        before = v
    return views


def rollback_task(
    task_id: str,
    store: TaskStore,
    *,
    to: int,
    handlers: Collection[str],
    now: Callable[[], datetime],
    actor: str = UNNAMED,
    stamp: Callable[[], datetime] | None = None,
) -> AppliedFile:
    """Make version `to`'s definition the task's current one, as a new version (its audit
    record's verb: rollback). A version equal to the current definition changes nothing.

    Raises:
        TaskNotFoundError: no such task (a deleted task is created again by an apply).
        VersionNotFoundError: no such version.
        TaskFileError: the version no longer passes apply's checks (a handler gone, a parent
            deleted, a calendar unknown); nothing is written.
        TaskConflictError: another change landed meanwhile; nothing is written.
    """
    task = store.get_task(task_id)
    if task is None:
        raise TaskNotFoundError(task_id)
    # a version of the task that held the id before is not this task's to restore
    found = [v for v in store.task_versions(task_id) if v.version == to >= task.incarnation]
    if not found:
        raise VersionNotFoundError(f"task {task_id} has no version {to}")
    data = {"tasks": [found[0].definition.model_dump(mode="json", exclude_none=True)]}
    return apply_task_file(
        data,
        handlers=handlers,
        store=lambda: store,
        now=now,
        actor=actor,
        verb=Verb.ROLLBACK,
        stamp=stamp,
    )
