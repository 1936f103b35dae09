"""The `after` triggers of task definitions: every parent named exists (in the file or
stored), and no chain of parents closes a cycle; refused whole otherwise."""

from __future__ import annotations

from collections.abc import Collection, Mapping

from iotsched.core.task_definition import TaskDefinition
from iotsched.core.task_triggers import AfterTrigger
from iotsched.services.definitions.task_file import TaskFileError


def check_dependencies(
    definitions: list[TaskDefinition], existing: Collection[TaskDefinition]
) -> None:
    """Reject `after` triggers naming an unknown parent, or closing a cycle.

    Parents may be in the file or already stored; a definition in the file replaces the stored
    one of the same id.

    Raises:
        TaskFileError: naming the task and the unknown parent, or the cycle (`a -> b -> a`).
    """
    graph: dict[str, list[str]] = {d.id: parents_of(d) for d in existing}
    graph.update({d.id: parents_of(d) for d in definitions})
    problems = [
        f"task {d.id!r}: trigger.after: unknown parent {parent!r}"
        for d in definitions
        for parent in parents_of(d)
        if parent not in graph
    ]
    if problems:
        raise TaskFileError(problems)
    cycle = _find_cycle(graph)
    if cycle:
        raise TaskFileError(
            [f"task {cycle[0]!r}: trigger.after: dependency cycle {' -> '.join(cycle)}"]
        )


def parents_of(definition: TaskDefinition) -> list[str]:
    """The ids an `after` trigger names; none for any other trigger."""
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
