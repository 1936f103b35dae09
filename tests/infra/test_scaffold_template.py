"""The SAM template `iotsched init` writes (the user's: their package as a layer, iotsched
nested) passes cfn-lint and `sam validate --lint`, with the pinned tools of `make tools`
(.venv-tools, as `make template-check` uses them for iotsched's own template)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from iotsched.scaffold import plan, write

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / ".venv-tools" / "bin"


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("scaffold") / "acme-jobs"
    write(plan(directory))
    return directory


def tool(name: str) -> str:
    path = TOOLS / name
    assert path.is_file(), f"{path} is missing: run `make tools` (infra/sam.mk)"
    return str(path)


def run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        cwd=cwd,
        env={**os.environ, "SAM_CLI_TELEMETRY": "0", "AWS_DEFAULT_REGION": "us-east-1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_projects_template_passes_cfn_lint(project: Path) -> None:
    linted = run([tool("cfn-lint"), "template.yaml"], project)
    assert linted.returncode == 0, linted.stdout + linted.stderr


def test_the_projects_template_passes_sam_validate_lint(project: Path) -> None:
    validated = run(
        [tool("sam"), "validate", "--lint", "--template-file", "template.yaml"], project
    )
    assert validated.returncode == 0, validated.stdout + validated.stderr
    assert "is a valid SAM Template" in validated.stdout + validated.stderr
