"""docs/testing.md's example project, written out of the page and run with pytest in a child
interpreter, as a user's repository runs it: the fixtures come from the installed plugin (the
`pytest11` entry point), under `filterwarnings = error`."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "testing.md"

#: `<!-- file: path -->` then a fenced block: the file the page shows.
FILE_BLOCK = re.compile(r"<!-- file: (?P<path>\S+) -->\n```\w*\n(?P<body>.*?)\n```", re.DOTALL)

#: The example project as the page lays it out (a block that loses its marker fails here).
EXPECTED = {
    "acme_jobs/billing.py",
    "tests/tasks.yaml",
    "tests/conftest.py",
    "tests/test_billing_close.py",
    "tests/test_billing_task.py",
}


def example_files() -> dict[str, str]:
    text = DOC.read_text(encoding="utf-8")
    return {m["path"]: m["body"] + "\n" for m in FILE_BLOCK.finditer(text)}


def test_the_page_shows_the_whole_example_project() -> None:
    files = example_files()
    assert set(files) == EXPECTED
    # every python block of the page is one of the project's files
    assert text_blocks("python") == sum(1 for p in files if p.endswith(".py"))


def text_blocks(language: str) -> int:
    return DOC.read_text(encoding="utf-8").count(f"```{language}\n")


def test_the_example_project_passes_its_tests(tmp_path: Path) -> None:
    for name, body in example_files().items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body, encoding="utf-8")
    (tmp_path / "acme_jobs" / "__init__.py").write_text("", encoding="utf-8")
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\npythonpath = .\nfilterwarnings =\n    error\n", encoding="utf-8"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"\b9 passed\b", done.stdout), done.stdout
