"""Build CoreLayer: the iotsched package and its Lambda dependencies, into <artifacts>/python.

Run by `make build-CoreLayer` (infra/sam.mk), which `sam build` calls for the layer's
`BuildMethod: makefile` with ARTIFACTS_DIR set. Two pip runs:

1. the project itself from a clean copy of pyproject.toml + src/ (so the source tree is not
   touched by an in-tree setuptools build), with --no-deps: its optional extras (CLI, local
   runtime, dev tools) never reach the layer, and neither do the packages only they import
   (`NOT_IN_LAYER`: the local runtime and its emulator, the CLI, the console, the examples);
2. the core dependencies from pyproject's [project].dependencies, minus what the Lambda runtime
   already ships (boto3), as binary wheels for the Lambda platform (--platform/--python-version),
   so the build works on any host: pydantic-core is compiled and must match the Lambda CPU.

Needs Python >= 3.11 (tomllib) and pip with access to the package index.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Provided by the python3.12 Lambda runtime; shipping them would only grow the layer.
RUNTIME_PROVIDED = frozenset({"boto3", "botocore", "s3transfer"})

# Lambda architecture -> manylinux wheel platforms (pip accepts several --platform).
PLATFORMS = {
    "x86_64": ("manylinux_2_28_x86_64", "manylinux2014_x86_64"),
    "arm64": ("manylinux_2_28_aarch64", "manylinux2014_aarch64"),
}

#: Parts of the iotsched package no function imports (tests/unit/test_cold_imports.py keeps
#: them off every function's import path): the operator's tools, shipped by the wheel only.
NOT_IN_LAYER = ("local", "cli", "console", "examples", "scaffold")

_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def canonical_name(requirement: str) -> str:
    """PEP 503 normalised distribution name of a requirement string."""
    match = _NAME.match(requirement)
    if match is None:
        raise ValueError(f"not a requirement: {requirement!r}")
    return re.sub(r"[-_.]+", "-", match.group(1)).lower()


def layer_requirements(pyproject: dict[str, object]) -> list[str]:
    """The requirements to install in the layer: core dependencies only, minus the runtime's."""
    project = pyproject.get("project")
    if not isinstance(project, dict):
        raise ValueError("pyproject.toml has no [project] table")
    deps = project.get("dependencies", [])
    if not isinstance(deps, list):
        raise ValueError("[project].dependencies must be a list")
    return [str(d) for d in deps if canonical_name(str(d)) not in RUNTIME_PROVIDED]


# No bytecode: it would be compiled by the build host's Python, not the runtime's.
# No conflict warnings: --target installs are checked against the build interpreter's own
# site-packages, which have nothing to do with the layer.
_COMMON = ("--quiet", "--no-compile", "--no-warn-conflicts")


def _pip(*args: str) -> None:
    cmd = [sys.executable, "-m", "pip", "--disable-pip-version-check", *args]
    sys.stdout.write(f"+ {' '.join(cmd)}\n")
    sys.stdout.flush()
    # CI and the build hosts here run as root; pip's warning about it is noise for a --target.
    subprocess.run(cmd, check=True, env={**os.environ, "PIP_ROOT_USER_ACTION": "ignore"})


def install_project(target: Path) -> None:
    """Install the iotsched package, without `NOT_IN_LAYER` and without dependencies, in `target`."""
    with tempfile.TemporaryDirectory(prefix="iotsched-layer-") as tmp:
        stage = Path(tmp) / "project"
        stage.mkdir()
        shutil.copy2(ROOT / "pyproject.toml", stage)
        shutil.copytree(
            ROOT / "src",
            stage / "src",
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"),
        )
        for part in NOT_IN_LAYER:
            shutil.rmtree(stage / "src" / "iotsched" / part)
        # Files pyproject may name (readme, license); absent ones are the project's problem.
        for pattern in ("README*", "LICENSE*", "NOTICE*"):
            for extra in ROOT.glob(pattern):
                if extra.is_file():
                    shutil.copy2(extra, stage)
        _pip("install", *_COMMON, "--no-deps", "--target", str(target), str(stage))
    _drop_scripts(target)


def build(artifacts_dir: Path, arch: str, python_version: str) -> None:
    target = artifacts_dir / "python"
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    install_project(target)
    requirements = layer_requirements(pyproject)
    if requirements:
        platform_args = [arg for p in PLATFORMS[arch] for arg in ("--platform", p)]
        _pip(
            "install", *_COMMON, "--target", str(target),
            "--implementation", "cp", "--python-version", python_version,
            "--only-binary=:all:", *platform_args, *requirements,
        )  # fmt: skip
    _drop_scripts(target)


def _drop_scripts(target: Path) -> None:
    # Console scripts (the CLI, jp.py) are useless in a layer and point at the build host's python.
    shutil.rmtree(target / "bin", ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("artifacts_dir", type=Path, help="SAM's ARTIFACTS_DIR for the layer")
    parser.add_argument("--arch", choices=sorted(PLATFORMS), required=True)
    parser.add_argument("--python-version", required=True, help="Lambda runtime version, e.g. 3.12")
    args = parser.parse_args(argv)
    build(args.artifacts_dir.resolve(), args.arch, args.python_version)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
