"""Entry points of the installed distributions, by group: the names a group offers (`scan`:
metadata only, nothing imported, once per process and group) and the object behind one name
(`load`: imported on its first use; every way it can fail is a `PluginError` naming the entry
point, its package and the cause). Standard library only: the core finds planners here.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from importlib import metadata


@dataclass(frozen=True)
class Origin:
    """The distribution (package) an entry point comes from."""

    package: str
    version: str

    def __str__(self) -> str:
        return f"{self.package} {self.version}"


@dataclass(frozen=True)
class PluginRef:
    """One entry point: its group, name, `module:attribute` and package (None: unknown)."""

    group: str
    name: str
    value: str
    origin: Origin | None

    @property
    def module(self) -> str:
        return self.value.partition(":")[0].strip()

    @property
    def attr(self) -> str:
        return self.value.partition(":")[2].strip()

    def where(self) -> str:
        """`package 1.2 (module:function)`, for messages."""
        return f"{self.origin or 'an unknown package'} ({self.value})"


class PluginError(LookupError):
    """An entry point that cannot be used: `name` in `kind` form (`handler`, `planner`),
    `origins` the packages involved, `cause` what went wrong. Its message names all three."""

    def __init__(self, kind: str, name: str, origins: tuple[Origin | None, ...], cause: str):
        where = ", ".join(str(o) if o else "an unknown package" for o in origins)
        super().__init__(f"{kind} {name!r} from {where}: {cause}")
        self.kind = kind
        self.name = name
        self.origins = origins
        self.cause = cause

    @property
    def origin(self) -> Origin | None:
        """The one package involved (None: unknown, or more than one)."""
        return self.origins[0] if len(self.origins) == 1 else None


def _origin(entry: metadata.EntryPoint) -> Origin | None:
    dist = entry.dist
    if dist is None:
        return None
    return Origin(package=str(dist.metadata["Name"] or dist.name), version=str(dist.version))


@functools.cache
def scan(group: str) -> Mapping[str, tuple[PluginRef, ...]]:
    """Every name the group offers, with each definition of it (more than one: defined twice),
    without importing anything. Made once per process and group."""
    from importlib import metadata  # on the first scan, not at a function's import

    found: dict[str, list[PluginRef]] = {}
    for entry in metadata.entry_points(group=group):
        ref = PluginRef(group=group, name=entry.name, value=entry.value, origin=_origin(entry))
        if ref not in found.setdefault(entry.name, []):
            found[entry.name].append(ref)
    return {name: tuple(refs) for name, refs in sorted(found.items())}


def rescan() -> None:
    """Forget the scans and the import system's directory caches (tests that change
    `sys.path`; a process never needs it)."""
    scan.cache_clear()
    importlib.invalidate_caches()


def single(kind: str, refs: tuple[PluginRef, ...]) -> PluginRef:
    """The one definition of a name, or a PluginError listing the packages that define it."""
    if len(refs) > 1:
        listed = "; ".join(ref.where() for ref in refs)
        raise PluginError(
            kind,
            refs[0].name,
            tuple(ref.origin for ref in refs),
            f"defined twice: {listed}; uninstall one of the packages or rename its entry point",
        )
    return refs[0]


def load(kind: str, ref: PluginRef) -> Any:
    """Import the entry point's module and return its attribute, which must be callable.

    Raises:
        PluginError: the module is missing, its import raised, the attribute is missing or is
            not callable; the message names the entry point, its package and the cause.
    """

    def fail(cause: str) -> PluginError:
        return PluginError(kind, ref.name, (ref.origin,), f"{ref.value}: {cause}")

    module_name, attr = ref.module, ref.attr
    if not module_name or not attr:
        raise fail("an entry point is 'module:function'")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing and (module_name == missing or module_name.startswith(missing + ".")):
            raise fail(f"module {module_name!r} is not installed") from exc
        raise fail(f"importing {module_name!r} failed: ModuleNotFoundError: {exc}") from exc
    except Exception as exc:  # the package's own bug: reported, never a crash of the caller
        raise fail(f"importing {module_name!r} raised {type(exc).__name__}: {exc}") from exc
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise fail(f"module {module_name!r} has no attribute {attr!r}") from None
    if not callable(obj):
        raise fail(f"{attr!r} is not callable (it is of type {type(obj).__name__})")
    return obj
