"""A task file's YAML, read within the input limits (docs/limits.md), and its errors as one line.

`load_task_yaml` is PyYAML's safe loader that refuses, while it composes the file and before
any value is built of it, a file nesting deeper than `MAX_DOCUMENT_DEPTH` levels, listing more
than `MAX_TASKS_PER_FILE` tasks (at the first task past it) or expanding to more than
`MAX_YAML_NODES` nodes, counted as they are composed (so a refusal costs no more
than that many nodes), an alias counting the nodes it repeats each time it is used (a few lines
of aliases name billions of nodes, which the validation would walk). It also
refuses what PyYAML would read other than as written: a mapping giving a key twice (YAML forbids
it; PyYAML keeps the last value) and a date that does not exist (PyYAML raises a bare
ValueError), each a YAML error at its line and column.

Where PyYAML has libyaml, the file's events are first counted by libyaml's parser, which refuses
a file past a limit as written (nodes, tasks, depth) in a tenth of the pure-Python composer's
time: the bounded loader then only meets files whose aliases expand them past a limit.

Only the CLI and the testing kit read YAML (PyYAML is the `cli` extra's): nothing a function
imports imports this module.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

import yaml
from yaml.error import Mark
from yaml.events import (
    CollectionEndEvent,
    CollectionStartEvent,
    MappingStartEvent,
    NodeEvent,
    ScalarEvent,
    SequenceStartEvent,
)
from yaml.nodes import CollectionNode, MappingNode, Node, ScalarNode, SequenceNode

from iotsched.core.input_limits import (
    MAX_DOCUMENT_DEPTH,
    MAX_TASKS_PER_FILE,
    MAX_YAML_NODES,
    too_deep,
)


class TaskFileLimitError(yaml.MarkedYAMLError):
    """A task file past an input limit, at the mark where it passed it; `problem` names the
    limit."""


def _too_many_nodes() -> str:
    return (
        f"expands to more than {MAX_YAML_NODES:,} nodes, the most a task file may (an alias "
        "counts the nodes it repeats, each time it is used)"
    )


def _too_many_tasks() -> str:
    return (
        f"a task file holds at most {MAX_TASKS_PER_FILE} tasks: split it (task "
        f"{MAX_TASKS_PER_FILE + 1} starts here)"
    )


@dataclass
class _Open:
    """A collection being parsed: where it starts, and (a mapping's) whether a key comes next."""

    start: NodeEvent
    mapping: bool
    key_next: bool = True


def _within_limits_as_written(text: str) -> None:
    """Refuse, from libyaml's events, a file whose nodes as written (an alias counting one) pass
    a limit, counted as the bounded loader counts them (a collection as it ends) and refused at
    the same place.

    Raises:
        TaskFileLimitError: past a limit. A file libyaml cannot parse passes here: the bounded
            loader reports it, at its own marks.
    """
    if not yaml.__with_libyaml__:
        return
    nodes = tasks = 0
    open_: list[_Open] = []
    key: str | None = None  # the root mapping's latest key
    tasks_open = False  # the root's `tasks` list is being parsed

    def count(event: NodeEvent) -> None:
        nonlocal nodes
        nodes += 1
        if nodes > MAX_YAML_NODES:
            raise TaskFileLimitError(None, None, _too_many_nodes(), _as_written(event))

    try:
        for event in yaml.parse(text, Loader=yaml.CSafeLoader):
            if isinstance(event, CollectionEndEvent):
                count(open_.pop().start)
                tasks_open = tasks_open and len(open_) >= 2
                continue
            if not isinstance(event, NodeEvent):
                continue
            parent = open_[-1] if open_ else None
            value_of_key = parent is not None and parent.mapping and not parent.key_next
            if parent is not None and parent.mapping:
                if parent.key_next and len(open_) == 1:
                    key = event.value if isinstance(event, ScalarEvent) else None
                parent.key_next = not parent.key_next
            if tasks_open and len(open_) == 2:
                tasks += 1
                if tasks > MAX_TASKS_PER_FILE:
                    raise TaskFileLimitError(None, None, _too_many_tasks(), _as_written(event))
            if not isinstance(event, CollectionStartEvent):
                count(event)
                continue
            if len(open_) >= MAX_DOCUMENT_DEPTH:
                problem = too_deep(MAX_DOCUMENT_DEPTH, "a task file")
                raise TaskFileLimitError(None, None, problem, _as_written(event))
            if len(open_) == 1 and value_of_key and key == "tasks":
                tasks_open = isinstance(event, SequenceStartEvent)
            open_.append(_Open(event, mapping=isinstance(event, MappingStartEvent)))
    except TaskFileLimitError:
        raise
    except yaml.YAMLError:
        return


def _as_written(event: NodeEvent) -> Mark | None:
    """The event's place as the pure-Python loader marks it (libyaml's marks are its own type)."""
    mark = event.start_mark
    if mark is None:
        return None
    return Mark(mark.name, mark.index, mark.line, mark.column, None, 0)


class _BoundedLoader(yaml.SafeLoader):
    """`yaml.SafeLoader`, counting the nodes composed so far (an alias counting the nodes it
    repeats) and each collection's depth as expanded, and refusing past the limits."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._open = 0  # collections being composed around the current event
        self._nodes = 0  # nodes composed so far, aliases expanded
        # id(collection node) -> (nodes, depth) it expands to, once composed
        self._expanded: dict[int, tuple[int, int]] = {}
        self._tasks_next = False  # the root's `tasks` value is being composed
        self._tasks: SequenceNode | None = None  # the root's `tasks` list, once it started

    # (The stubs type `anchor` as a dict: it is the anchor's name, or None.)

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        self._count_tasks(parent, index)
        mark = self._mark()
        alias = self.check_event(yaml.AliasEvent)
        node = super().compose_node(parent, index)
        if not alias:
            if isinstance(node, ScalarNode):
                _refuse_surrogates(node)
                self._count(1, mark)
            return node  # a collection counted itself as it ended
        if isinstance(node, CollectionNode) and id(node) not in self._expanded:
            raise TaskFileLimitError(
                None, None, "an alias inside its own anchor repeats it without end", mark
            )
        self._count(self._expanded[id(node)][0] if isinstance(node, CollectionNode) else 1, mark)
        return node

    def compose_sequence_node(self, anchor: Any) -> SequenceNode:
        self._enter()
        try:
            node = super().compose_sequence_node(anchor)
        finally:
            self._open -= 1
        self._measure(node, node.value)
        return node

    def compose_mapping_node(self, anchor: Any) -> MappingNode:
        self._enter()
        try:
            node = super().compose_mapping_node(anchor)
        finally:
            self._open -= 1
        self._measure(node, [child for pair in node.value for child in pair])
        _refuse_duplicate_keys(node)
        return node

    def construct_yaml_timestamp(self, node: ScalarNode) -> date:
        try:
            return super().construct_yaml_timestamp(node)
        except ValueError as exc:
            raise yaml.constructor.ConstructorError(
                None, None, f"{node.value} is not a date or an instant: {exc}", node.start_mark
            ) from None

    def _count_tasks(self, parent: Node | None, index: object) -> None:
        """Refuse the root's `tasks` list at its task past the most a file may hold, before
        composing it (a file of small tasks is refused in a few thousand nodes, not at the
        node limit)."""
        if isinstance(parent, MappingNode) and self._open == 1 and isinstance(index, ScalarNode):
            self._tasks_next = index.value == "tasks"  # (a key's value: `index` is its key)
        elif isinstance(parent, SequenceNode) and isinstance(index, int):
            if index == 0 and self._tasks_next and self._open == 2:
                self._tasks = parent
            if parent is self._tasks and index >= MAX_TASKS_PER_FILE:
                raise TaskFileLimitError(None, None, _too_many_tasks(), self._mark())

    def _mark(self) -> Mark | None:
        """Where the next event starts (the pure-Python parser's marks are `Mark`s)."""
        event: yaml.Event = self.peek_event()  # type: ignore[no-untyped-call]
        return event.start_mark if isinstance(event.start_mark, Mark) else None

    def _enter(self) -> None:
        # Checked before composing deeper: the composer recurses once per level.
        if self._open >= MAX_DOCUMENT_DEPTH:
            problem = too_deep(MAX_DOCUMENT_DEPTH, "a task file")
            raise TaskFileLimitError(None, None, problem, self._mark())
        self._open += 1

    def _measure(self, node: CollectionNode, children: list[Node]) -> None:
        """Record what the collection just composed expands to (its children were counted as
        they were composed; the collection counts itself)."""
        nodes, depth = 1, 1
        for child in children:
            child_nodes, child_depth = self._expanded.get(id(child), (1, 0))
            nodes += child_nodes
            depth = max(depth, child_depth + 1)
        if depth > MAX_DOCUMENT_DEPTH:  # aliases of deep collections inside deep collections
            problem = too_deep(MAX_DOCUMENT_DEPTH, "a task file")
            raise TaskFileLimitError(None, None, problem, node.start_mark)
        self._expanded[id(node)] = (nodes, depth)
        self._count(1, node.start_mark)

    def _count(self, nodes: int, mark: Mark | None) -> None:
        self._nodes += nodes
        if self._nodes > MAX_YAML_NODES:
            raise TaskFileLimitError(None, None, _too_many_nodes(), mark)


_BoundedLoader.add_constructor(
    "tag:yaml.org,2002:timestamp", _BoundedLoader.construct_yaml_timestamp
)

_MERGE = "tag:yaml.org,2002:merge"


_SURROGATE = re.compile(r"[\ud800-\udfff]")


def _refuse_surrogates(node: ScalarNode) -> None:
    """Refuse a scalar holding a surrogate (a double-quoted `"\\uD800"` escape): no character,
    it cannot be stored or sent as UTF-8 (the JSON the definition is written as would fail at
    apply); a JSON body's `"\\ud800"` is refused as not JSON."""
    found = _SURROGATE.search(node.value)
    if found is not None:
        raise yaml.constructor.ConstructorError(
            None,
            None,
            f"\\u{ord(found.group()):04x} is a surrogate, not a character: write the "
            "character itself (the file is UTF-8), or its \\U escape",
            node.start_mark,
        )


def _refuse_duplicate_keys(node: MappingNode) -> None:
    """Refuse a mapping giving a key twice (PyYAML would keep the last value). A key that a
    `<<` merge brings may be given again: the mapping's own wins, as YAML's merge key says."""
    first: dict[tuple[str, str], Node] = {}
    for key, _ in node.value:
        if not isinstance(key, ScalarNode) or key.tag == _MERGE:
            continue
        seen = first.setdefault((key.tag, key.value), key)
        if seen is not key:
            raise yaml.constructor.ConstructorError(
                "first", seen.start_mark, f"found duplicate key {key.value!r}", key.start_mark
            )


def load_task_yaml(text: str) -> Any:
    """A task file's YAML, parsed (not yet validated).

    Raises:
        TaskFileLimitError: past an input limit (depth, expanded nodes), naming it.
        yaml.YAMLError: not YAML.
    """
    _within_limits_as_written(text)
    loader = _BoundedLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def yaml_problem(path: Path, text: str, exc: yaml.YAMLError) -> str:
    """A YAML error as one line: `tasks.yaml:3:5: not valid YAML: problem (context at 2:3)`, or
    `tasks.yaml:3:5: <the limit passed>`."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}"
        if isinstance(exc, TaskFileLimitError):
            return f"{where}: {exc.problem}"
        problem = exc.problem or "unexpected content"
        if exc.context and exc.context_mark is not None:
            context = exc.context_mark
            problem += f" ({exc.context} at {context.line + 1}:{context.column + 1})"
        return f"{where}: not valid YAML: {problem}"
    if isinstance(exc, yaml.reader.ReaderError):  # a control character: no mark, an offset
        line = text.count("\n", 0, exc.position) + 1
        column = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
        character = exc.character if isinstance(exc.character, int) else ord(exc.character)
        return f"{path}:{line}:{column}: not valid YAML: {exc.reason} (#x{character:04x})"
    return f"{path}: not valid YAML: {' '.join(str(exc).split())}"
