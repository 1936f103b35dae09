"""One emulator: the benchmarks and the chaos run start moto through the product's module.

`iotsched.local.emulator` is the only module that starts a moto server (the product's own test
holds src/, functions/ and tests/ to it); bench/ imports it and starts none of its own. The
chaos run starts it through the local runtime, patched by the product's `moto_patches`.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EMULATOR = "iotsched.local.emulator"
#: Each way the benchmarks start (or patch) moto: the file, and the product module it uses.
USERS = {
    "the benchmarks": ("bench/common.py", EMULATOR),
    "the chaos run": ("bench/chaos/driver.py", "iotsched.local.moto_patches"),
}


def _imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_every_user_imports_the_one_emulator_module() -> None:
    for user, (path, module) in USERS.items():
        assert module in _imported_modules(ROOT / path), f"{user} ({path})"


def test_the_chaos_run_starts_the_local_runtime() -> None:
    path = "bench/chaos/driver.py"
    assert "iotsched.local.runtime.LocalRuntime" in _imported_modules(ROOT / path), path


def test_no_bench_module_starts_a_moto_server() -> None:
    starters = {
        str(path.relative_to(ROOT))
        for path in (ROOT / "bench").rglob("*.py")
        if path.name != "test_one_emulator.py"
        and (
            "ThreadedMotoServer" in path.read_text("utf-8")
            or "moto.server" in path.read_text("utf-8")
            or "moto.moto_server" in path.read_text("utf-8")
        )
    }
    assert starters == set()
