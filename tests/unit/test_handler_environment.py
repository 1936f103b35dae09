"""A deployment's settings for its handlers (template HandlerEnvironment): parsed, checked, and
exported by the worker before any handler runs (docs/deploy-your-jobs.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from iotsched.settings import SettingsError, handler_environment

ROOT = Path(__file__).resolve().parents[2]


def parsed(raw: str) -> dict[str, str]:
    return handler_environment({"IOTSCHED_HANDLER_ENVIRONMENT": raw})


def test_unset_or_empty_gives_no_settings() -> None:
    assert handler_environment({}) == {}
    assert parsed("") == {}
    assert parsed("{}") == {}


def test_an_object_of_strings_is_the_settings() -> None:
    raw = '{\n  "ACME_DEVICE_API": "https://devices.example", "acme_mode": "strict"\n}'
    assert parsed(raw) == {"ACME_DEVICE_API": "https://devices.example", "acme_mode": "strict"}


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ('{"A": ', "is not JSON"),
        ('["ACME_URL"]', "must be a JSON object"),
        ('{"ACME_RETRIES": 3}', "'ACME_RETRIES' must be a string (quote it: \"3\")"),
        ('{"ACME_ON": true}', "'ACME_ON' must be a string"),
        ('{"1ACME": "x"}', "'1ACME' is not a variable name"),
        ('{"ACME-URL": "x"}', "'ACME-URL' is not a variable name"),
        ('{"IOTSCHED_TABLE": "other"}', "'IOTSCHED_TABLE' is reserved"),
        ('{"AWS_REGION": "eu-west-1"}', "'AWS_REGION' is reserved"),
        ('{"aws_access_key_id": "x"}', "'aws_access_key_id' is reserved"),
        ('{"POWERTOOLS_LOG_LEVEL": "DEBUG"}', "'POWERTOOLS_LOG_LEVEL' is reserved"),
        ('{"LAMBDA_TASK_ROOT": "/tmp"}', "'LAMBDA_TASK_ROOT' is reserved"),
        ('{"_HANDLER": "x.y"}', "not a variable name"),
        ('{"PYTHONPATH": "/tmp"}', "'PYTHONPATH' is reserved"),
        ('{"TZ": "Asia/Shanghai"}', "'TZ' is reserved"),
    ],
)
def test_a_malformed_value_is_refused_with_the_reason(raw: str, says: str) -> None:
    with pytest.raises(SettingsError) as caught:
        parsed(raw)
    assert "HandlerEnvironment" in str(caught.value)
    assert says in str(caught.value)


def _import_worker(raw: str) -> subprocess.CompletedProcess[str]:
    """`import app` in functions/worker (as Lambda's cold start does), then print a setting."""
    env = {
        **os.environ,
        "AWS_DEFAULT_REGION": "us-east-1",
        "POWERTOOLS_SERVICE_NAME": "iotsched",
        "IOTSCHED_HANDLER_ENVIRONMENT": raw,
    }
    probe = "import json, os, app; print(json.dumps(os.environ.get('ACME_DEVICE_API')))"
    return subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT / "functions" / "worker",
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_worker_exports_the_settings_as_it_starts() -> None:
    started = _import_worker('{"ACME_DEVICE_API": "https://devices.example"}')
    assert started.returncode == 0, started.stderr
    assert json.loads(started.stdout.splitlines()[-1]) == "https://devices.example"


def test_a_worker_with_malformed_settings_does_not_start() -> None:
    started = _import_worker('{"ACME_DEVICE_API": 1}')
    assert started.returncode != 0
    assert "'ACME_DEVICE_API' must be a string" in started.stderr
