"""The ports each use case takes: every Protocol a use-case module declares is satisfied by the
`Wiring` bag and by the in-memory build, names only ports of the bag, and names no port that
the functions taking it never touch.

What a function touches is read from the source: the attributes it reads on its ports
parameter (or, for a class, on the `self._services` its constructor keeps, and on a local name
bound to it), and the Protocol of each use case it passes them on to (by its annotation), the
lifecycle's cold-start import inside a function included. A call the reading cannot follow
counts as touching every port of the caller's Protocol, so the check never fails on what it
cannot see; it fails on a Protocol wider than every one of its users.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

import pytest

from iotsched import bootstrap
from iotsched.services.wiring import Wiring

SERVICES = Path(__file__).resolve().parents[2] / "src" / "iotsched" / "services"
#: The bag's ports: its fields, and the properties it derives from them (`record_clock`).
BAG = {f.name for f in dataclasses.fields(Wiring)} | {
    name for name, value in vars(Wiring).items() if isinstance(value, property)
}


def _module_names() -> list[str]:
    names = []
    for path in sorted(SERVICES.rglob("*.py")):
        parts = list(path.relative_to(SERVICES.parents[1]).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names.append(".".join(parts))
    return names


MODULES: dict[str, ModuleType] = {n: importlib.import_module(n) for n in _module_names()}


def _is_port_set(obj: object) -> bool:
    return (
        inspect.isclass(obj)
        and obj.__name__.endswith("Ports")
        and bool(getattr(obj, "_is_protocol", False))
    )


#: Every Protocol the use-case modules declare, by name (a name is declared once).
PORT_SETS: dict[str, type] = {
    obj.__name__: obj
    for module in MODULES.values()
    for obj in vars(module).values()
    if _is_port_set(obj) and obj.__module__ == module.__name__
}


def members(port_set: type) -> set[str]:
    """The ports a Protocol names, its bases' included."""
    return {
        name
        for klass in port_set.__mro__
        if klass not in (Protocol, object, Any)
        for name, value in vars(klass).items()
        if isinstance(value, property)
    }


def test_the_use_cases_declare_their_port_sets() -> None:
    assert {"LifecyclePorts", "SendPorts", "SweepPorts", "AttemptPorts"} <= set(PORT_SETS)


@pytest.mark.parametrize("name", sorted(PORT_SETS))
def test_a_port_set_names_ports_of_the_bag(name: str) -> None:
    assert members(PORT_SETS[name]) and members(PORT_SETS[name]) <= BAG


@pytest.mark.parametrize("name", sorted(PORT_SETS))
def test_the_bag_and_the_memory_build_satisfy_every_port_set(name: str) -> None:
    port_set = PORT_SETS[name]
    services = bootstrap.build_memory()
    assert isinstance(services, port_set)
    for port in members(port_set):
        assert hasattr(services, port)
    # the bag's fields stand behind each port: the check is not passed by the dataclass alone
    bare = type("Bare", (), {})()
    assert not isinstance(bare, port_set)


# -- what each use case touches ----------------------------------------------------------------


def _annotation(node: ast.arg) -> str | None:
    return ast.unparse(node.annotation) if node.annotation is not None else None


def _params(node: ast.FunctionDef) -> list[ast.arg]:
    return [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]


def _parsed(func: Callable[..., Any]) -> ast.FunctionDef | None:
    try:
        source = textwrap.dedent(inspect.getsource(func))
    except (OSError, TypeError):
        return None
    tree = ast.parse(source).body[0]
    return tree if isinstance(tree, ast.FunctionDef) else None


def _callee(func: object, position: int | None, keyword: str | None) -> str | None:
    """The use case `func` is (its key in `uses()`) when the ports go to a parameter of it
    annotated with a port set or the bag; None when the reading cannot follow it."""
    key = f"{getattr(func, '__module__', '')}.{getattr(func, '__qualname__', '')}"
    if inspect.isclass(func):
        func = vars(func).get("__init__")
        if position is not None:
            position += 1  # self
    if not inspect.isfunction(func):
        return None
    node = _parsed(func)
    if node is None:
        return None
    params = _params(node)
    found: ast.arg | None = None
    if keyword is not None:
        found = next((p for p in params if p.arg == keyword), None)
    elif position is not None and position < len(node.args.posonlyargs) + len(node.args.args):
        found = [*node.args.posonlyargs, *node.args.args][position]
    annotation = _annotation(found) if found is not None else None
    if annotation == "Wiring":
        return "Wiring"
    return key if annotation in PORT_SETS else None


def _local_imports(node: ast.FunctionDef) -> dict[str, object]:
    names: dict[str, object] = {}
    for inner in ast.walk(node):
        if isinstance(inner, ast.ImportFrom) and inner.module:
            module = importlib.import_module(inner.module)
            for alias in inner.names:
                names[alias.asname or alias.name] = getattr(module, alias.name)
    return names


def _is_ports(node: ast.expr, names: set[str]) -> bool:
    if isinstance(node, ast.Name):
        return node.id in names
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "_services"
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    )


def reads(
    bodies: list[ast.FunctionDef], names: set[str], scope: dict[str, object], declared: set[str]
) -> tuple[set[str], set[str]]:
    """The ports `bodies` read through `names` (or `self._services`) themselves, and the use
    cases they pass them to (by key; "Wiring" for one taking the whole bag)."""
    used: set[str] = set()
    callees: set[str] = set()
    for body in bodies:
        local = dict(scope) | _local_imports(body)
        aliases = set(names)
        for node in ast.walk(body):  # `services = self._services`
            if isinstance(node, ast.Assign) and _is_ports(node.value, aliases):
                aliases |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        for node in ast.walk(body):
            is_read = isinstance(node, ast.Attribute) and _is_ports(node.value, aliases)
            if is_read and node.attr in BAG:
                used.add(node.attr)
            if not isinstance(node, ast.Call):
                continue
            args = list(node.args)
            func_node = node.func
            if isinstance(func_node, ast.Attribute) and func_node.attr == "submit" and args:
                func_node, args = args[0], args[1:]  # an executor runs the use case
            passed = [(i, None) for i, a in enumerate(args) if _is_ports(a, aliases)]
            passed += [(None, k.arg) for k in node.keywords if _is_ports(k.value, aliases)]
            for position, keyword in passed:
                callee = local.get(func_node.id) if isinstance(func_node, ast.Name) else None
                key = _callee(callee, position, keyword)
                if key is None:
                    used |= declared
                else:
                    callees.add(key)
    return used, callees


def _direct_uses() -> Iterator[tuple[str, str, tuple[set[str], set[str]]]]:
    """(Protocol name, user, its own reads and its callees) for every function or class taking
    a port set."""
    for module in MODULES.values():
        scope = dict(vars(module))
        for obj in vars(module).values():
            if getattr(obj, "__module__", None) != module.__name__:
                continue
            if inspect.isfunction(obj):
                node = _parsed(obj)
                if node is None:
                    continue
                for param in _params(node):
                    name = _annotation(param)
                    if name in PORT_SETS:
                        declared = members(PORT_SETS[name])
                        found = reads([node], {param.arg}, scope, declared)
                        yield name, f"{module.__name__}.{obj.__qualname__}", found
            elif inspect.isclass(obj) and inspect.isfunction(vars(obj).get("__init__")):
                init = _parsed(vars(obj)["__init__"])
                if init is None:
                    continue
                for param in _params(init):
                    name = _annotation(param)
                    if name in PORT_SETS:
                        methods = [
                            n
                            for f in vars(obj).values()
                            if inspect.isfunction(f) and (n := _parsed(f)) is not None
                        ]
                        declared = members(PORT_SETS[name])
                        found = reads(methods, {param.arg}, scope, declared)
                        yield name, f"{module.__name__}.{obj.__qualname__}", found


def uses() -> list[tuple[str, str, set[str]]]:
    """(Protocol name, user, every port the user touches, through its callees too)."""
    direct = list(_direct_uses())
    touched = {user: set(own) for _, user, (own, _) in direct}
    touched["Wiring"] = set(BAG)
    changed = True
    while changed:  # the lifecycle's verbs call one another: to a fixed point
        changed = False
        for _, user, (_, callees) in direct:
            for callee in callees:
                more = touched.get(callee, set(BAG)) - touched[user]
                if more:
                    touched[user] |= more
                    changed = True
    return [(name, user, touched[user]) for name, user, _ in direct]


def test_the_reading_sees_the_direct_reads() -> None:
    found = {user: ports for _, user, ports in uses()}
    assert found["iotsched.services.definitions.control.pause_task"] == {"record_clock", "tasks"}
    assert found["iotsched.services.execution.reads.InstanceReads"] == {"instances"}
    assert found["iotsched.services.execution.hold.VisibilityHold"] == {"clock", "queue"}


@pytest.mark.parametrize("name", sorted(PORT_SETS))
def test_a_port_set_names_no_port_its_users_never_touch(name: str) -> None:
    users = [(user, ports) for used, user, ports in uses() if used == name]
    if not users:
        # only a base of others: each of those is checked
        assert any(name in {b.__name__ for b in p.__mro__[1:]} for p in PORT_SETS.values())
        return
    touched_by_some = set().union(*(ports for _, ports in users))
    assert members(PORT_SETS[name]) - touched_by_some == set(), [u for u, _ in users]
