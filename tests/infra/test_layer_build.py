"""The CoreLayer build (infra/layer/build.py) installs the core dependencies and nothing else.

The build itself downloads wheels and runs under `sam build`; these tests check the choice of
what goes in, against the real pyproject.toml and against made-up ones.
"""

from __future__ import annotations

import importlib.util
import re
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = ROOT / "infra" / "layer" / "build.py"


@pytest.fixture(scope="module")
def build() -> ModuleType:
    spec = importlib.util.spec_from_file_location("iotsched_layer_build", BUILD_SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _names(build: ModuleType, requirements: list[str]) -> set[str]:
    return {build.canonical_name(r) for r in requirements}


def test_real_project_layer_gets_core_deps_without_boto3(build: ModuleType) -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    names = _names(build, build.layer_requirements(pyproject))
    assert {"aws-lambda-powertools", "pydantic"} <= names
    assert names & {"croniter", "cronsim"}, "the cron library must ship with the functions"
    assert "boto3" not in names
    extras = pyproject["project"].get("optional-dependencies", {})
    extra_names = {build.canonical_name(r) for reqs in extras.values() for r in reqs}
    core_names = {build.canonical_name(r) for r in pyproject["project"]["dependencies"]}
    assert not (names & (extra_names - core_names)), "CLI/local/dev extras leaked into the layer"


def test_requirements_keep_specifiers_and_drop_runtime_packages(build: ModuleType) -> None:
    pyproject = {
        "project": {
            "dependencies": [
                "aws-lambda-powertools[parser]>=3.20,<4",
                "Boto3>=1.35",
                "botocore",
                "croniter>=6 ; python_version >= '3.11'",
                "pydantic>=2.7,<3",
            ],
            "optional-dependencies": {"cli": ["click>=8.1"]},
        }
    }
    assert build.layer_requirements(pyproject) == [
        "aws-lambda-powertools[parser]>=3.20,<4",
        "croniter>=6 ; python_version >= '3.11'",
        "pydantic>=2.7,<3",
    ]


def test_missing_project_table_is_an_error(build: ModuleType) -> None:
    with pytest.raises(ValueError, match=r"\[project\]"):
        build.layer_requirements({"tool": {}})


@pytest.mark.parametrize(
    ("requirement", "name"),
    [
        ("aws_lambda_powertools>=3", "aws-lambda-powertools"),
        ("Typing.Extensions", "typing-extensions"),
        ("  pydantic[email] ~= 2.7", "pydantic"),
    ],
)
def test_canonical_name(build: ModuleType, requirement: str, name: str) -> None:
    assert build.canonical_name(requirement) == name


def test_sam_mk_architecture_has_wheel_platforms(build: ModuleType) -> None:
    text = (ROOT / "infra" / "sam.mk").read_text(encoding="utf-8")
    match = re.search(r"^LAYER_ARCH\s*:?=\s*(\S+)", text, re.M)
    assert match
    assert match.group(1) in build.PLATFORMS
