"""The core is pure (STYLE.md rule 1): no AWS SDK, no environment, no wall clock."""

from __future__ import annotations

import ast
import pkgutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import iotsched.core

CORE_DIR = Path(iotsched.core.__file__).parent
CORE_MODULES = sorted(
    f"iotsched.core.{m.name}" for m in pkgutil.iter_modules([str(CORE_DIR)]) if not m.ispkg
)
CORE_FILES = sorted(CORE_DIR.rglob("*.py"))
FORBIDDEN_IMPORTS = ("boto3", "botocore", "aws_lambda_powertools", "moto", "click", "rich", "yaml")


def test_the_core_has_the_modules_this_test_expects() -> None:
    assert {
        "iotsched.core.task_definition",
        "iotsched.core.instance_record",
        "iotsched.core.triggers",
        "iotsched.core.decisions",
    } <= set(CORE_MODULES)


def test_core_imports_without_the_aws_sdk() -> None:
    """Import every core module in a fresh interpreter where the SDKs cannot be imported."""
    script = textwrap.dedent(
        f"""
        import importlib, sys
        for name in {FORBIDDEN_IMPORTS!r}:
            sys.modules[name] = None  # `import name` now raises ImportError
        for module in {CORE_MODULES!r}:
            importlib.import_module(module)
        leaked = sorted(
            m for m in sys.modules
            if m.split(".")[0] == "iotsched"
            and not (m == "iotsched" or m.startswith("iotsched.core"))
        )
        assert not leaked, f"the core pulled in outer rings: {{leaked}}"
        print("ok", len({CORE_MODULES!r}))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"ok {len(CORE_MODULES)}"


def test_the_poisoned_import_check_can_fail() -> None:
    """The same mechanism rejects a module that does import boto3 (the test has teeth)."""
    script = "import sys; sys.modules['boto3'] = None; import iotsched.adapters.dynamodb"
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode != 0
    assert "ImportError" in done.stderr or "ModuleNotFoundError" in done.stderr


def impurities(source: str) -> list[str]:
    """Reads of the wall clock or the environment, and forbidden imports, in `source`."""
    found: list[str] = []
    clock_calls = {"now", "utcnow", "today", "time", "time_ns", "monotonic", "perf_counter"}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute):
            owner = node.value
            owner_name = owner.id if isinstance(owner, ast.Name) else None
            if owner_name == "os" and node.attr in {"environ", "getenv", "environb"}:
                found.append(f"line {node.lineno}: os.{node.attr}")
            if owner_name in {"datetime", "date", "time"} and node.attr in clock_calls:
                found.append(f"line {node.lineno}: {owner_name}.{node.attr}")
        elif isinstance(node, ast.ImportFrom) and node.module:
            root = node.module.split(".")[0]
            names = {alias.name for alias in node.names}
            if root in FORBIDDEN_IMPORTS:
                found.append(f"line {node.lineno}: from {node.module} import")
            if node.module == "os" and names & {"environ", "getenv"}:
                found.append(f"line {node.lineno}: from os import {sorted(names)}")
            if node.module == "time" and names & clock_calls:
                found.append(f"line {node.lineno}: from time import {sorted(names)}")
            if node.module.startswith("iotsched.") and not node.module.startswith("iotsched.core"):
                found.append(f"line {node.lineno}: from {node.module} import")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in FORBIDDEN_IMPORTS:
                    found.append(f"line {node.lineno}: import {alias.name}")
    return found


@pytest.mark.parametrize("path", CORE_FILES, ids=lambda p: p.name)
def test_core_reads_no_clock_and_no_environment(path: Path) -> None:
    assert impurities(path.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize(
    "source",
    [
        "import os\nx = os.environ['A']",
        "import os\nx = os.getenv('A')",
        "from os import environ",
        "from datetime import datetime\nx = datetime.now()",
        "from datetime import datetime\nx = datetime.utcnow()",
        "from datetime import date\nx = date.today()",
        "import time\nx = time.time()",
        "from time import monotonic",
        "import boto3",
        "from botocore.exceptions import ClientError",
        "from iotsched.ports import Clock",
    ],
)
def test_the_purity_scan_catches(source: str) -> None:
    assert impurities(source)
