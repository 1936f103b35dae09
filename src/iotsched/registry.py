"""The handlers by name: every entry point of the group `iotsched.handlers` in the installed
distributions (iotsched's own built-ins among them), and handlers given in-process (tests, the
testing kit, benchmarks).

Names come from the group's scan (`iotsched.core.plugins.scan`, once per process, importing
nothing); a handler's module is imported on the first lookup of its name, so a worker imports
the handlers its tasks use and no function imports any at its cold start
(tests/unit/test_cold_imports.py). A name that cannot be used (defined twice, its module
missing or failing to import, not callable, declared under another name) raises a
`PluginError` naming the handler, its package and the cause, when it is looked up.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from iotsched.context import Handler, ShardContext
from iotsched.core.plugins import Origin, PluginError, PluginRef, load, scan, single
from iotsched.core.value_types import params_problems
from iotsched.errors import FailShard
from iotsched.handlers import HANDLERS_GROUP, HandlerSpec, spec_of


@dataclass(frozen=True)
class LoadedHandler:
    """A handler ready to run: its spec (the function, its params model) and its package."""

    spec: HandlerSpec
    origin: Origin | None = None
    value: str | None = None  # `module:function` of its entry point (None: given in-process)

    def __call__(self, ctx: ShardContext) -> Mapping[str, Any] | None:
        return self.spec.call(ctx)


def spec_for(name: str, obj: Callable[..., Any]) -> HandlerSpec:
    """The spec of a handler as `Wiring.handlers` holds it: loaded from an entry point, a
    decorated function, or a plain `(ctx)` function."""
    if isinstance(obj, LoadedHandler):
        return obj.spec
    return spec_of(obj, name=name)


def origin_for(obj: object) -> Origin | None:
    """The package a handler came from, when it was loaded from an entry point."""
    return obj.origin if isinstance(obj, LoadedHandler) else None


class HandlerRegistry(Mapping[str, Handler]):
    """Handlers by name: `given` in-process (they win over an entry point of the same name),
    and, with `discover`, every entry point of the group. Looking a name up imports its module
    once; `KeyError` for an unknown name, `PluginError` for one that cannot be used."""

    def __init__(
        self,
        given: Mapping[str, Callable[..., Any]] | None = None,
        *,
        discover: bool = True,
        group: str = HANDLERS_GROUP,
    ) -> None:
        # Not copied: a caller may add handlers to its mapping afterwards (test harnesses).
        self._given: Mapping[str, Callable[..., Any]] = given if given is not None else {}
        self._discover = discover
        self._group = group
        self._loaded: dict[str, LoadedHandler] = {}
        self._lock = threading.Lock()

    def _refs(self) -> Mapping[str, tuple[PluginRef, ...]]:
        return scan(self._group) if self._discover else {}

    def _names(self) -> set[str]:
        return set(self._given) | set(self._refs())

    def __getitem__(self, name: str) -> LoadedHandler:
        if name in self._given:
            given = self._given[name]
            return (
                given if isinstance(given, LoadedHandler) else LoadedHandler(spec_for(name, given))
            )
        loaded = self._loaded.get(name)
        if loaded is not None:
            return loaded
        refs = self._refs().get(name)
        if refs is None:
            raise KeyError(name)
        loaded = _load(single("handler", refs))
        with self._lock:  # a race loads twice: the same handler either way
            self._loaded.setdefault(name, loaded)
        return self._loaded[name]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._names()  # without importing it

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._names()))

    def __len__(self) -> int:
        return len(self._names())

    def refs(self, name: str) -> tuple[PluginRef, ...]:
        """The entry points that define `name` (none: given in-process, or unknown)."""
        if name in self._given:
            return ()
        return self._refs().get(name, ())

    def origin(self, name: str) -> Origin | None:
        """The package of `name`'s entry point, without importing it (None: in-process, more
        than one, or unknown)."""
        refs = self.refs(name)
        return refs[0].origin if len(refs) == 1 else None

    def problem(self, name: str) -> PluginError | None:
        """Why `name` cannot be used (importing its module to know), or None."""
        try:
            self[name]
        except PluginError as exc:
            return exc
        return None


def _load(ref: PluginRef) -> LoadedHandler:
    """Import one entry point of the group and check what it declares."""
    fn = load("handler", ref)
    spec = spec_of(fn, name=ref.name)
    if spec.name != ref.name:
        raise PluginError(
            "handler",
            ref.name,
            (ref.origin,),
            f"{ref.value} is declared as @handler({spec.name!r}) but listed under the entry "
            f"point {ref.name!r}: the two names must be the same",
        )
    return LoadedHandler(spec=spec, origin=ref.origin, value=ref.value)


def handler_for(handlers: Mapping[str, Callable[..., Any]], name: str) -> LoadedHandler:
    """Handler `name` for an attempt to run, with its package if it has one.

    Raises:
        FailShard: no handler of that name is installed (a deployment problem: retrying
            cannot help).
        PluginError: it cannot be loaded (the worker fails the attempt for good, naming the
            package and the cause).
    """
    try:
        obj = handlers[name]
    except KeyError:
        raise FailShard(f"no handler named {name!r} is installed in this deployment") from None
    return obj if isinstance(obj, LoadedHandler) else LoadedHandler(spec_for(name, obj))


def check_params(spec: HandlerSpec, params: Mapping[str, Any]) -> None:
    """Check `params` against the handler's params model, if it has one.

    Raises:
        FailShard: naming each field that does not fit (the same params fail every attempt).
    """
    try:
        spec.parse_params(params)
    except ValidationError as exc:
        raise FailShard(
            f"handler {spec.name!r}: the task's params do not fit {type_name(spec)}: "
            + "; ".join(params_problems(exc))
        ) from None


def type_name(spec: HandlerSpec) -> str:
    """The name of the handler's params model (`CloseParams`)."""
    return spec.params.__name__ if spec.params is not None else "(none)"


def handlers_of(given: Mapping[str, Callable[..., Any]]) -> HandlerRegistry:
    """`given` as a registry of exactly those handlers (a registry is kept as it is)."""
    if isinstance(given, HandlerRegistry):
        return given
    return HandlerRegistry(given, discover=False)


class HandlerNotFoundError(LookupError):
    """No handler of that name is installed."""


def describe(registry: HandlerRegistry, name: str, *, schema: bool = False) -> dict[str, Any]:
    """What `iotsched handlers` and `GET /handlers` give of handler `name`: its package and
    version, `module:function`, its docstring's first line, whether it takes a params model
    (with `schema`: the model's JSON Schema), and `error`, why it cannot be loaded (None: it
    loads). Importing its module to know; never raises for a broken handler.

    Raises:
        KeyError: no handler of that name.
    """
    if name not in registry:
        raise KeyError(name)
    refs = registry.refs(name)
    origin = registry.origin(name)
    view: dict[str, Any] = {
        "name": name,
        "package": origin.package if origin else None,
        "version": origin.version if origin else None,
        "entry_point": refs[0].value if len(refs) == 1 else None,
        "summary": None,
        "params": None,
        "error": None,
    }
    try:
        loaded = registry[name]
    except PluginError as exc:
        view["error"] = str(exc)
    else:
        doc = (loaded.spec.fn.__doc__ or "").strip()
        first = doc.split("\n\n")[0]  # the first paragraph: a summary may wrap
        view["summary"] = " ".join(first.split()) or None
        view["params"] = loaded.spec.params.__name__ if loaded.spec.params else None
        if loaded.value is not None:
            view["entry_point"] = loaded.value
    if schema:
        try:
            view["params_schema"] = None if view["error"] else registry[name].spec.params_schema()
        except Exception as exc:  # a model whose schema cannot be generated: said, not raised
            view["params_schema"] = None
            view["error"] = f"params schema: {type(exc).__name__}: {exc}"
    return view
