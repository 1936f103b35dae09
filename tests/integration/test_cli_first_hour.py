"""The installed `iotsched` as a new user meets it: no AWS credentials or config, an emulator
endpoint, task files with mistakes in them. Each error is one line naming what is wrong.

The CLI runs in a subprocess with an empty HOME and no AWS variable but the endpoint, against
the session's moto server holding the resources `iotsched local up` names (`iotsched-Table`,
`iotsched-ShardQueue`, `iotsched-AlertTopic`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from iotsched.adapters.aws import AwsClients
from tests.support import (
    create_alert_topic,
    create_shard_queue,
    create_table,
    free_port,
    reset_moto,
)

pytestmark = pytest.mark.moto

HOURLY = "tasks:\n  - id: hourly\n    handler: noop\n    trigger: {rate: 1h}\n    timeout_s: 30\n"


def iotsched_argv() -> list[str]:
    """The installed console script beside this interpreter, else the module."""
    script = Path(sys.executable).with_name("iotsched")
    return [str(script)] if script.exists() else [sys.executable, "-m", "iotsched.cli"]


def bare_env(home: Path, **extra: str) -> dict[str, str]:
    """A new user's environment: PATH, an empty HOME, a UTF-8 locale, a wide terminal."""
    home.mkdir(exist_ok=True)
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "COLUMNS": "250",
        **extra,
    }


def iotsched(
    *args: str, env: dict[str, str], cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*iotsched_argv(), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
        check=False,
    )


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    """The error of a failed command, asserting it is one line without a traceback."""
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.fixture
def local_names(moto_server: str, moto_clients: AwsClients) -> str:
    """The moto server holding what `iotsched local up` provisions, by its names; the endpoint."""
    reset_moto(moto_server)
    sqs = moto_clients.sqs()
    create_table(moto_clients.dynamodb(), "iotsched-Table")
    create_shard_queue(sqs, "iotsched-ShardQueue")
    create_alert_topic(moto_clients.sns(), sqs, "iotsched-AlertTopic")
    return moto_server


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """An empty home directory: no ~/.aws."""
    return tmp_path / "home"


def test_the_cli_works_against_an_emulator_without_aws_credentials(
    local_names: str, home: Path, tmp_path: Path
) -> None:
    env = bare_env(home, AWS_ENDPOINT_URL=local_names)
    tasks = tmp_path / "tasks.yaml"
    tasks.write_text(HOURLY)
    applied = iotsched("tasks", "apply", str(tasks), "--json", env=env)
    assert applied.returncode == 0, applied.stderr
    assert json.loads(applied.stdout)["created"] == ["hourly"]
    listed = iotsched("tasks", "list", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    assert [t["id"] for t in json.loads(listed.stdout)] == ["hourly"]
    ran = iotsched("run", "hourly", "--json", env=env)
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["status"] == "running"


def test_localstack_names_the_endpoint_through_localstack_client(
    local_names: str, home: Path
) -> None:
    # The embedded emulator stands in on LocalStack's port (wherever LOCALSTACK_HOST says).
    env = bare_env(home, LOCALSTACK_HOST=local_names.removeprefix("http://"))
    listed = iotsched("--localstack", "tasks", "list", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == []
    nobody = bare_env(home, LOCALSTACK_HOST=f"127.0.0.1:{free_port()}")
    unreachable = one_line_error(iotsched("--localstack", "tasks", "list", env=nobody))
    assert "cannot reach the AWS endpoint at http://127.0.0.1:" in unreachable
    both = iotsched("--localstack", "--endpoint-url", local_names, "tasks", "list", env=env)
    assert both.returncode == 2 and "not both" in both.stderr


def test_each_missing_piece_has_its_own_error(local_names: str, home: Path) -> None:
    # no endpoint, a region, no credentials: the credentials are named, not the deployment
    no_credentials = one_line_error(
        iotsched("tasks", "list", env=bare_env(home, AWS_REGION="eu-west-1"))
    )
    assert "no AWS credentials found" in no_credentials
    assert "AWS_PROFILE" in no_credentials and "AWS_ENDPOINT_URL" in no_credentials
    # no endpoint, no region: the region is named (never a silent us-east-1)
    no_region = one_line_error(iotsched("tasks", "list", env=bare_env(home)))
    assert "no AWS region" in no_region and "--region" in no_region
    # an endpoint where nothing listens
    nobody = f"http://127.0.0.1:{free_port()}"
    unreachable = one_line_error(
        iotsched("tasks", "list", env=bare_env(home, AWS_ENDPOINT_URL=nobody))
    )
    assert f"cannot reach the AWS endpoint at {nobody}" in unreachable
    assert "iotsched local up" in unreachable
    # an emulator that answers but holds no deployment of that stack
    elsewhere = one_line_error(
        iotsched(
            "--stack", "other", "tasks", "list", env=bare_env(home, AWS_ENDPOINT_URL=local_names)
        )
    )
    assert f"no iotsched deployment at {local_names}" in elsewhere
    assert "no table 'other-Table' in us-east-1" in elsewhere
    assert len({no_credentials, no_region, unreachable, elsewhere}) == 4


BIG = "x" * 500_000


@pytest.mark.parametrize(
    ("name", "content", "expected"),
    [
        pytest.param(
            "latin1.yaml",
            "tasks:\n  - id: caf\xe9\n    handler: noop\n".encode("latin-1"),
            ["latin1.yaml: not UTF-8: byte 0xe9 at byte offset 18 (line 2)"],
            id="not-utf8",
        ),
        pytest.param(
            "syntax.yaml",
            b"tasks:\n  - id: a\n    handler: noop\n   trigger: {rate: 1h}\n",
            ["syntax.yaml:4:4: not valid YAML: expected <block end>"],
            id="yaml-syntax",
        ),
        pytest.param(
            "brackets.yaml",
            b'tasks:\n  - id: "scan#1"\n    handler: noop\n    trigger: {cron: "[x] * * * *"}\n',
            [
                "task 'scan#1': id: String should match pattern '^[a-z0-9][a-z0-9._-]{0,79}$'",
                "task 'scan#1': trigger.cron: invalid cron '[x] * * * *'",
            ],
            id="brackets",
        ),
        pytest.param(
            "big.yaml",
            f"{HOURLY}  - id: big\n    handler: noop\n    trigger: {{rate: 1h}}\n"
            f"    params: {{blob: {BIG}}}\n".encode(),
            ["task 'big': params: too large to store", "exceeds", "DynamoDB's 400 KB item limit"],
            id="over-400KB",
        ),
    ],
)
def test_a_bad_task_file_is_named_in_one_line_exits_2_and_writes_nothing(
    local_names: str, home: Path, tmp_path: Path, name: str, content: bytes, expected: list[str]
) -> None:
    env = bare_env(home, AWS_ENDPOINT_URL=local_names)
    path = tmp_path / name
    path.write_bytes(content)
    result = iotsched("tasks", "apply", str(path), env=env)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    # one line per problem, then at most the summary: no caret blocks, nothing wrapped
    assert all(line.startswith(("error: ", "Error: ")) for line in lines), result.stderr
    assert len(lines) <= 3, result.stderr
    for fragment in expected:
        assert fragment in result.stderr
    listed = iotsched("tasks", "list", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == []


def test_user_text_in_output_and_tables_keeps_its_brackets(
    local_names: str, home: Path, tmp_path: Path
) -> None:
    env = bare_env(home, AWS_ENDPOINT_URL=local_names)
    tasks = tmp_path / "tasks.yaml"
    tasks.write_text(HOURLY + '    description: "scan [all] groups"\n')
    assert iotsched("tasks", "apply", str(tasks), env=env).returncode == 0
    shown = iotsched("tasks", "show", "hourly", env=env)
    assert shown.returncode == 0, shown.stderr
    assert "hourly (version 1, active): scan [all] groups" in shown.stdout
    ran = json.loads(iotsched("run", "hourly", "--json", env=env).stdout)
    reason = "[ops] maintenance [red]window[/]"
    cancelled = iotsched("cancel", ran["instance_id"], "--reason", reason, env=env)
    assert cancelled.returncode == 0, cancelled.stderr
    assert f"{ran['instance_id']}: cancelled ({reason})" in cancelled.stdout
    table = iotsched("instances", "hourly", env=env)
    assert table.returncode == 0, table.stderr
    assert f"cancelled ({reason})" in table.stdout
