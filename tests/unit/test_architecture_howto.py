"""docs/architecture.md's "How to add a task handler" works as written: its handler module and
its unit test, taken from the document, run on the in-memory services."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path
from typing import Any

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"
MODULE = "iotsched.tasklib.count_ids"


def block(name: str) -> str:
    """The fenced Python block between `<!-- name -->` and `<!-- /name -->`, dedented."""
    text = DOC.read_text(encoding="utf-8")
    found = re.search(
        rf"<!-- {name} -->\s*```python\n(.*?)```\s*<!-- /{name} -->", text, flags=re.DOTALL
    )
    assert found, f"no block {name!r} in {DOC}"
    lines = found.group(1).splitlines()
    indent = min(len(line) - len(line.lstrip()) for line in lines if line.strip())
    return "\n".join(line[indent:] for line in lines) + "\n"


def test_the_handler_and_its_test_run_as_written(monkeypatch: pytest.MonkeyPatch) -> None:
    # The document's module, importable under the name step 1 gives it (not on disk: the
    # registry does not list it, and the document's test passes it in `handlers`).
    module = types.ModuleType(MODULE)
    exec(compile(block("howto-handler"), MODULE, "exec"), module.__dict__)
    monkeypatch.setitem(sys.modules, MODULE, module)
    namespace: dict[str, Any] = {}
    exec(compile(block("howto-handler-test"), str(DOC), "exec"), namespace)
    tests = [fn for name, fn in namespace.items() if name.startswith("test_")]
    assert len(tests) == 1
    tests[0]()
