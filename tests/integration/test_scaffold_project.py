"""A new team's first hour, as the issue's done-criteria state it: `iotsched init` in a fresh
directory outside the iotsched tree, a handler written there, the package installed into this
Python environment, and its task applied and run on the local runtime (`make local`) until its
instance ends `succeeded` with the handler's result; and the project's own `make test`.

The shared venv is never changed (tests run side by side): the project is installed with
`pip install --target` into a directory of the test, which the processes get on PYTHONPATH
(entry points are read from the dist-info found on sys.path). pip builds it offline, with the
venv's setuptools (no build isolation, no index).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import PATIENCE_S, free_port, local_up_env

pytestmark = pytest.mark.moto

BIN = Path(sys.executable).parent

FIRMWARE_HANDLER = '''\
"""Which devices run firmware older than the fleet's minimum."""

from __future__ import annotations

from iotsched import ShardContext, handler
from pydantic import BaseModel, Field


class FirmwareParams(BaseModel):
    minimum: str = Field(pattern=r"^\\d+\\.\\d+$")
    fleet: dict[str, str]


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


@handler("jobs.firmware_check", params=FirmwareParams)
def firmware_check(ctx: ShardContext, params: FirmwareParams) -> dict[str, object]:
    behind = sorted(d for d, v in params.fleet.items() if _version(v) < _version(params.minimum))
    ctx.log("fleet checked", devices=len(params.fleet))
    return {"behind": behind, "checked": len(params.fleet)}
'''

FIRMWARE_TASK = """\
  - id: firmware-check
    handler: jobs.firmware_check
    trigger: {rate: 1h}
    params: {minimum: "2.4", fleet: {dev-1: "2.4", dev-2: "2.3", dev-3: "3.0"}}
    timeout_s: 60
"""


def project_env(**extra: str) -> dict[str, str]:
    """This environment's interpreter and CLI first on PATH, aimed at no deployment."""
    env = local_up_env()
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}"
    return {**env, "COLUMNS": "250", **extra}  # tables unwrapped


def run(
    argv: list[str], cwd: Path, env: dict[str, str], timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def new_project(tmp_path: Path) -> Path:
    """`iotsched init jobs`, run in an empty directory outside the iotsched tree."""
    work = tmp_path / "work"
    work.mkdir()
    made = run([str(BIN / "iotsched"), "init", "jobs"], cwd=work, env=project_env())
    assert made.returncode == 0, made.stderr
    return work / "jobs"


@pytest.mark.slow
def test_the_project_runs_a_handler_of_its_own_on_the_local_runtime(tmp_path: Path) -> None:
    project = new_project(tmp_path)
    # the team's handler: its module, its entry point, its task
    (project / "src" / "jobs" / "firmware.py").write_text(FIRMWARE_HANDLER)
    pyproject = project / "pyproject.toml"
    entry = '"jobs.hello" = "jobs.handlers:hello"\n'
    text = pyproject.read_text()
    assert entry in text
    pyproject.write_text(
        text.replace(entry, entry + '"jobs.firmware_check" = "jobs.firmware:firmware_check"\n')
    )
    tasks = project / "tasks.yaml"
    tasks.write_text(tasks.read_text() + "\n" + FIRMWARE_TASK)
    # installed into this environment, beside it (the shared venv stays as it is)
    site = tmp_path / "site"
    installed = run(
        [
            sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
            "--no-build-isolation", "--no-index", "--target", str(site), str(project),
        ],
        cwd=tmp_path,
        env=project_env(),
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr
    assert (site / "jobs" / "firmware.py").is_file()
    # `make local`: the runtime (found through template.yaml's nested iotsched), the apply,
    # the run, its log to the end, its shards
    env = project_env(
        PYTHONPATH=os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    )
    ports = [f"LOCAL_PORT={free_port()}", f"AWS_PORT={free_port()}"]
    local = run(
        ["make", "local", "TASK=firmware-check", f"PYTHON={sys.executable}", *ports],
        cwd=project,
        env=env,
        timeout=PATIENCE_S,
    )
    output = local.stdout + local.stderr
    assert local.returncode == 0, output
    assert "Traceback" not in output
    assert re.search(r"^created: (firmware-check, hello|hello, firmware-check)$", output, re.M)
    ended = re.search(r"^(firmware-check@\S+): (\w+) business date", output, re.M)
    assert ended, output
    assert ended.group(2) == "succeeded", output
    assert "fleet checked" in output  # its log, followed to the end
    assert '{"behind":["dev-2"],"checked":3}' in output  # its result, in the shards table


def test_the_projects_make_test_passes_in_a_fresh_directory(tmp_path: Path) -> None:
    project = new_project(tmp_path)
    tested = run(["make", "test", f"PYTHON={sys.executable}"], cwd=project, env=project_env())
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert re.search(r"^3 passed", tested.stdout, re.M), tested.stdout
    # the project's code is what a team keeps: linted and strictly typed as this one is
    linted = run(
        [str(BIN / "ruff"), "check", "."],
        cwd=project,
        env=project_env(),
    )
    assert linted.returncode == 0, linted.stdout
    typed = run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--cache-dir",
            str(tmp_path / "mypy"),
            "src",
            "tests",
        ],
        cwd=project,
        env=project_env(),
        timeout=300,
    )
    assert typed.returncode == 0, typed.stdout
