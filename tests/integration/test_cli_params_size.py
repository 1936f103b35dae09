"""Params too large for where a firing puts them, through the installed CLI against moto: bad
input (exit 2, one line naming the limit), never "AWS request failed", and nothing written.

(`--params` is one argument: Linux takes at most 128 KiB in one, so the runs below add at most
120 KB to the task's own params.)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.test_cli_first_hour import (  # noqa: F401 - fixtures
    bare_env,
    home,
    iotsched,
    local_names,
    one_line_error,
)

pytestmark = pytest.mark.moto

SQS_LIMIT = "SQS's 256 KiB message limit"
ITEM_LIMIT = "DynamoDB's 400 KB item limit"


def task_file(tmp_path: Path, **task: Any) -> str:
    path = tmp_path / f"{task['id']}.yaml"
    base = {"handler": "noop", "trigger": {"rate": "1h"}, "timeout_s": 30}
    path.write_text(yaml.safe_dump({"tasks": [{**base, **task}]}))
    return str(path)


def test_apply_refuses_a_task_whose_shard_messages_would_pass_sqs_limit(
    local_names: str,  # noqa: F811
    home: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    env = bare_env(home, AWS_ENDPOINT_URL=local_names)
    path = task_file(tmp_path, id="big", params={"blob": "x" * 300_000})
    result = iotsched("tasks", "apply", path, env=env)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    problem, summary = result.stderr.strip().splitlines()  # the problem, then the summary
    assert "task 'big': params: too large to send" in problem and SQS_LIMIT in problem
    assert summary.endswith("1 problem(s); nothing was written")
    listed = iotsched("tasks", "list", "--json", env=env)
    assert listed.returncode == 0 and json.loads(listed.stdout) == []


@pytest.mark.parametrize(
    ("task", "more", "limit"),
    [
        pytest.param(
            {
                "id": "wide",  # about 200 KB of listed shards, stored with every instance
                "sharding": {
                    "strategy": "static",
                    "shards": [{"n": n, "pad": "p" * 1000} for n in range(200)],
                },
                "params": {"a": "a" * 100_000},
            },
            {"b": "b" * 110_000},
            ITEM_LIMIT,
            id="item",
        ),
        pytest.param(
            {"id": "heavy", "params": {"a": "a" * 150_000}},
            {"b": "b" * 120_000},
            SQS_LIMIT,
            id="message",
        ),
    ],
)
def test_run_and_submit_refuse_params_too_large_as_bad_input(
    local_names: str,  # noqa: F811
    home: Path,  # noqa: F811
    tmp_path: Path,
    task: dict[str, Any],
    more: dict[str, Any],
    limit: str,
) -> None:
    env = bare_env(home, AWS_ENDPOINT_URL=local_names)
    applied = iotsched("tasks", "apply", task_file(tmp_path, **task), env=env)
    assert applied.returncode == 0, applied.stderr
    params = json.dumps(more)
    for args in (
        ("run", task["id"], "--params", params),
        ("submit", task["id"], "--delay", "1h", "--params", params),
    ):
        result = iotsched(*args, env=env)
        assert result.returncode == 2, result.stderr
        error = one_line_error(result)
        assert "params: too large to" in error and limit in error, error
        assert "AWS request failed" not in error
    listed = iotsched("instances", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == []
