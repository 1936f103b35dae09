"""A task's versions, what each changed, and rolling a task back to one of them.

A rollback never rewrites history: it applies version N's definition as a new version, through
the same checks as an apply of a task file (handlers, sizes, parents, calendars).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from iotsched.core.audit import TaskVersion, Verb, definition_diff
from iotsched.ports import TaskStore
from iotsched.services.admin import TaskNotFoundError
from iotsched.services.audit import UNNAMED
from iotsched.services.tasks import AppliedFile, apply_task_file


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
    """Every stored version of the task, oldest first (kept after a delete).

    Raises:
        TaskNotFoundError: neither the task nor any version of it is stored.
    """
    versions = store.task_versions(task_id)
    task = store.get_task(task_id)
    if not versions and task is None:
        raise TaskNotFoundError(task_id)
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
    if store.get_task(task_id) is None:
        raise TaskNotFoundError(task_id)
    found = [v for v in store.task_versions(task_id) if v.version == to]
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
    )
