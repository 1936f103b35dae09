"""One emulator: the demo and the tests start moto through one module.

`iotsched.local.emulator` is the only module that starts a moto server; each user imports it
(the demo through `LocalRuntime`). The benchmarks' own tests hold bench/ to the same module.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EMULATOR = "iotsched.local.emulator"
#: Each way moto is started, and the file that starts it.
USERS = {
    "the local runtime (demo, local up, chaos run)": "src/iotsched/local/runtime.py",
    "the tests": "tests/conftest.py",
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
    for user, path in USERS.items():
        assert EMULATOR in _imported_modules(ROOT / path), f"{user} ({path})"


def test_the_demo_starts_the_local_runtime() -> None:
    path = "src/iotsched/demo/run.py"
    assert "iotsched.local.runtime.LocalRuntime" in _imported_modules(ROOT / path), path


def test_only_the_emulator_module_starts_a_moto_server() -> None:
    starters = {
        str(path.relative_to(ROOT))
        for top in ("src", "functions", "tests")
        for path in (ROOT / top).rglob("*.py")
        if path.name != "test_one_emulator.py"
        and (
            "ThreadedMotoServer" in path.read_text("utf-8")
            or "moto.server" in path.read_text("utf-8")
            or "moto.moto_server" in path.read_text("utf-8")
        )
    }
    assert starters == {"src/iotsched/local/emulator.py"}


def test_the_old_server_module_is_gone() -> None:
    assert not (ROOT / "src/iotsched/local/server.py").exists()
