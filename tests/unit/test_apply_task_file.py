"""`apply_task_file`: the one apply orchestration the CLI's `tasks apply` and the API's
`POST /tasks` and `PUT /tasks/<id>` share: validate the file whole, check `after` parents,
write all of it or none, and say what changed."""

from __future__ import annotations

from typing import Any

import pytest

from iotsched import bootstrap
from iotsched.ports.tasks import TaskStore
from iotsched.services.definitions.apply import apply_task_file
from iotsched.services.definitions.task_file import TaskFileError
from iotsched.tasklib import registry
from tests.support import T0

SCAN: dict[str, Any] = {"id": "scan", "handler": "noop", "trigger": {"rate": "1h"}}
REPORT: dict[str, Any] = {"id": "report", "handler": "noop", "trigger": {"after": ["scan"]}}


class CountedStore:
    """Hands out one store, counting how often it is asked for."""

    def __init__(self) -> None:
        self.store = bootstrap.build_memory().tasks
        self.asked = 0

    def __call__(self) -> TaskStore:
        self.asked += 1
        return self.store


def apply(data: Any, store: CountedStore, *, dry_run: bool = False) -> Any:
    return apply_task_file(data, handlers=registry(), store=store, now=lambda: T0, dry_run=dry_run)


def test_a_dry_run_without_parents_needs_no_store() -> None:
    store = CountedStore()

    applied = apply({"tasks": [SCAN]}, store, dry_run=True)

    assert (applied.dry_run, applied.valid, applied.created) == (True, ["scan"], [])
    assert store.asked == 0
    assert store.store.list_tasks() == []


def test_created_then_unchanged_then_updated() -> None:
    store = CountedStore()

    first = apply({"tasks": [SCAN, REPORT]}, store)
    again = apply({"tasks": [SCAN, REPORT]}, store)
    changed = apply({"tasks": [{**SCAN, "trigger": {"rate": "2h"}}]}, store)

    assert (first.created, first.updated, first.unchanged) == (["scan", "report"], [], [])
    assert (again.created, again.updated, again.unchanged) == ([], [], ["scan", "report"])
    assert (changed.created, changed.updated, changed.unchanged) == ([], ["scan"], [])
    assert changed.valid == ["scan"]
    stored = store.store.get_task("scan")
    assert stored is not None and stored.version == 2


def test_a_parent_may_be_stored_and_a_dry_run_checks_it() -> None:
    store = CountedStore()
    apply({"tasks": [SCAN]}, store)

    checked = apply({"tasks": [REPORT]}, store, dry_run=True)

    assert checked.valid == ["report"] and store.store.get_task("report") is None
    assert store.asked == 2  # the first write, then the parents of the dry run


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ({"tasks": [REPORT]}, "task 'report': trigger.after: unknown parent 'scan'"),
        ({"tasks": [{**SCAN, "handler": "nope"}]}, "task 'scan': handler: unknown handler 'nope'"),
        ({"task": []}, "a task file is a mapping with a 'tasks' list"),
    ],
)
def test_a_bad_file_writes_nothing_and_names_the_problem(data: Any, problem: str) -> None:
    store = CountedStore()

    with pytest.raises(TaskFileError) as raised:
        apply(data, store)

    assert any(problem in p for p in raised.value.problems), raised.value.problems
    assert store.store.list_tasks() == []
