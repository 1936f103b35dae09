"""The package's import graph, read from the source: no cycle, and no import inside a function
of the use-cases that reaches another use-case module but the named cold-start deferrals.

Every `import` and `from ... import` of every module under src/iotsched counts, at module level
and inside functions alike (an import inside a function that closes a cycle still closes it: it
only runs later). `from x import y` is an edge to `x.y` when that is a module of the package,
else to `x`. Imports under `if TYPE_CHECKING:` never run and are left out.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = "iotsched"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_modules() -> dict[str, Path]:
    """Every module of the package by its dotted name."""
    return {module_name(p): p for p in sorted((SRC / PACKAGE).rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports(tree: ast.AST) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Each import statement of `tree`, with whether it sits inside a function."""

    def walk(
        node: ast.AST, in_function: bool
    ) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for other in child.orelse:
                    yield from walk(other, in_function)
                continue
            if isinstance(child, ast.Import | ast.ImportFrom):
                yield child, in_function
            inner = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            yield from walk(child, inner)

    yield from walk(tree, False)


def targets(
    node: ast.Import | ast.ImportFrom, importer: str, is_package: bool, known: set[str]
) -> set[str]:
    """The modules of the package that `node` (in module `importer`) imports."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            anchor = importer.split(".")
            if not is_package:
                anchor = anchor[:-1]
            anchor = anchor[: len(anchor) - (node.level - 1)]
            base = ".".join([*anchor, base] if base else anchor)
        names = [
            f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
            for alias in node.names
        ]
    found = set()
    for name in names:
        while name and name not in known:  # `import a.b.c` of a name inside a module
            name = name.rpartition(".")[0]
        if name.startswith(PACKAGE) and name != importer:
            found.add(name)
    return found


def graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """The import graph (module -> modules it imports), and the part of it that imports made
    inside functions."""
    modules = package_modules()
    known = set(modules)
    edges: dict[str, set[str]] = {m: set() for m in modules}
    in_functions: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        is_package = path.name == "__init__.py"
        for node, in_function in imports(tree):
            found = targets(node, name, is_package, known)
            edges[name] |= found
            if in_function:
                in_functions[name] |= found
    return edges, in_functions


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `edges` as the path of modules that closes it, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)) is not None:
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(edges):
        if start not in state and (cycle := visit(start)) is not None:
            return cycle
    return None


def test_the_package_imports_without_a_cycle() -> None:
    edges, _ = graph()
    cycle = find_cycle(edges)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


#: Imports inside a function of a use-case that reach another use-case, each kept off a Lambda's
#: cold start (tests/unit/test_cold_imports.py checks that it is): the worker and the
#: dead-letter handler import `completion`, and only the calls that end an instance need the
#: lifecycle (and the abort, which ends one; as does the worker's start path, for an instance
#: its window's close cancels, and the commit, for a capped instance it refills). They are
#: edges of the graph above like any other, so none can hide a cycle.
COLD_START_ONLY = {
    "iotsched.services.execution.buffer": ["iotsched.services.scheduling.lifecycle"],
    "iotsched.services.execution.completion": [
        "iotsched.services.execution.abort",
        "iotsched.services.scheduling.lifecycle",
    ],
    "iotsched.services.execution.start": ["iotsched.services.scheduling.lifecycle"],
}


def test_no_use_case_imports_another_inside_a_function() -> None:
    _, in_functions = graph()
    services = f"{PACKAGE}.services"
    late = {
        importer: sorted(t for t in found if t.startswith(services + "."))
        for importer, found in in_functions.items()
        if importer == services or importer.startswith(services + ".")
    }
    assert {k: v for k, v in late.items() if v} == COLD_START_ONLY


def test_a_cold_start_deferral_is_in_the_graph_the_cycle_check_reads() -> None:
    edges, _ = graph()
    for importer, imported in COLD_START_ONLY.items():
        assert set(imported) <= edges[importer]
        back = {m: set(e) for m, e in edges.items()}
        for target in imported:  # the same import, closing a loop, would be a cycle
            back[target].add(importer)
            assert find_cycle(back) is not None


# -- the checks have teeth --------------------------------------------------------------------


def _edges_of(source: str, importer: str, known: set[str], *, is_package: bool = False) -> set[str]:
    found: set[str] = set()
    for node, _ in imports(ast.parse(source)):
        found |= targets(node, importer, is_package, known)
    return found


def test_imports_resolve_to_the_module_they_load() -> None:
    known = {"iotsched", "iotsched.services", "iotsched.services.a", "iotsched.services.b"}
    source = (
        "from iotsched.services.wiring import Wiring\n"
        "from iotsched.services import b\n"
        "import iotsched.services.a\n"
        "from . import b as bee\n"
        "from .a import thing\n"
        "import json\n"
    )
    assert _edges_of(source, "iotsched.services.c", known) == {
        "iotsched.services",
        "iotsched.services.a",
        "iotsched.services.b",
    }
    assert _edges_of("from .a import x\n", "iotsched.services", known, is_package=True) == {
        "iotsched.services.a"
    }


def test_an_import_inside_a_function_is_seen_and_one_for_type_checking_is_not() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from iotsched.services import a\n"
        "def f():\n"
        "    from iotsched.services.b import g\n"
    )
    seen = [(ast.unparse(node), inner) for node, inner in imports(ast.parse(source))]
    assert seen == [
        ("from typing import TYPE_CHECKING", False),
        ("from iotsched.services.b import g", True),
    ]


@pytest.mark.parametrize(
    ("edges", "expected"),
    [
        ({"a": {"b"}, "b": {"c"}, "c": set()}, None),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, ["a", "b", "c", "a"]),
        ({"a": {"b"}, "b": {"b"}}, ["b", "b"]),
    ],
)
def test_a_cycle_is_found_and_named(edges: dict[str, set[str]], expected: list[str] | None) -> None:
    assert find_cycle(edges) == expected
