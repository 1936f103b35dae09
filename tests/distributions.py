"""Installed distributions made up for a test: `<name>-<version>.dist-info` (METADATA and
`entry_points.txt`) and the modules beside them, in a directory put first on `sys.path`, where
`importlib.metadata` finds them as it finds pip's. Nothing is installed into the shared venv;
a subprocess sees them through `PYTHONPATH` (`pythonpath`)."""

from __future__ import annotations

import os
import sys
import textwrap
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from iotsched.core.plugins import rescan
from iotsched.handlers import HANDLERS_GROUP, PLANNERS_GROUP


class Distributions:
    """Made-up distributions under `root` (on `sys.path` while `installed` runs)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def add(
        self,
        name: str,
        version: str = "1.0",
        *,
        handlers: Mapping[str, str] | None = None,
        planners: Mapping[str, str] | None = None,
        modules: Mapping[str, str] | None = None,
    ) -> None:
        """Distribution `name` `version` listing `handlers` and `planners` (name ->
        `module:function`), and `modules` (dotted name -> source) beside it."""
        info = self.root / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n", encoding="utf-8"
        )
        groups = {HANDLERS_GROUP: handlers or {}, PLANNERS_GROUP: planners or {}}
        text = "".join(
            f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in entries.items()) + "\n"
            for group, entries in groups.items()
            if entries
        )
        (info / "entry_points.txt").write_text(text, encoding="utf-8")
        for dotted, source in (modules or {}).items():
            *packages, last = dotted.split(".")
            where = self.root
            for package in packages:
                where = where / package
                where.mkdir(exist_ok=True)
                (where / "__init__.py").touch()
            (where / f"{last}.py").write_text(textwrap.dedent(source), encoding="utf-8")
        rescan()

    def pythonpath(self) -> str:
        """`PYTHONPATH` for a subprocess that must see these distributions."""
        return os.pathsep.join([str(self.root), os.environ.get("PYTHONPATH", "")]).rstrip(
            os.pathsep
        )


@contextmanager
def installed(root: Path) -> Iterator[Distributions]:
    """Distributions under `root`, seen by this process until the block ends (then forgotten:
    the scans, and the modules imported from `root`)."""
    root.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(root))
    rescan()
    try:
        yield Distributions(root)
    finally:
        sys.path.remove(str(root))
        for name, module in list(sys.modules.items()):
            if str(getattr(module, "__file__", None) or "").startswith(str(root)):
                del sys.modules[name]
        rescan()
