"""The iotsched package as CoreLayer ships it: the functions' code, not the operator's tools.

The project step of infra/layer/build.py runs for real (pip, no dependencies); each function's
`app` is then imported against that package alone (the dependencies from this environment, the
editable install of src/ out of the way), as Lambda imports it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
FUNCTIONS = sorted(d.name for d in (ROOT / "functions").iterdir() if (d / "app.py").is_file())


@pytest.fixture(scope="module")
def build() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "iotsched_layer_build_contents", ROOT / "infra/layer/build.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def layer(build: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("layer") / "python"
    target.mkdir()
    build.install_project(target)
    return target


def test_the_layer_has_no_local_runtime_cli_or_console(build: ModuleType, layer: Path) -> None:
    package = layer / "iotsched"
    assert (package / "core").is_dir() and (package / "services").is_dir()
    assert "local" in build.NOT_IN_LAYER
    for part in build.NOT_IN_LAYER:
        assert not (package / part).exists(), part
    assert not list(layer.rglob("emulator.py"))


@pytest.mark.parametrize("function", FUNCTIONS)
def test_each_function_imports_from_the_layer_alone(layer: Path, function: str) -> None:
    # -S: no site processing, so the editable install's finder (src/) is not installed; the
    # dependencies come from this environment's site-packages, after the layer.
    probe = "import json, app, iotsched; print(json.dumps(iotsched.__file__))"
    done = subprocess.run(
        [sys.executable, "-S", "-c", probe],
        cwd=ROOT / "functions" / function,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(layer), sysconfig.get_paths()["purelib"]]),
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_REGION": "us-east-1",
            "POWERTOOLS_SERVICE_NAME": "iotsched",
            "POWERTOOLS_METRICS_NAMESPACE": "iotsched-test",
        },
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert Path(json.loads(done.stdout.splitlines()[-1])).is_relative_to(layer)
