"""A definitions verb builds only the stores: `iotsched tasks rollback --help`, and one rollback
against the local runtime's names on the embedded emulator, import no SQS, SNS or Device
Management System adapter and create no SQS or SNS client.

Each command runs in a new interpreter through a probe that records every botocore client
created and prints `sys.modules` after the verb.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from iotsched.adapters.aws import AwsClients
from iotsched.bootstrap import build_stores
from iotsched.services.definitions.apply import apply_task_file
from iotsched.settings import TableSettings
from iotsched.tasklib import registry
from tests.support import create_alert_topic, create_shard_queue, create_table, reset_moto

pytestmark = pytest.mark.moto

#: Modules a definitions verb must not import (or any module inside them).
MESSAGING_AND_DEVICES = (
    "iotsched.adapters.sqs",
    "iotsched.adapters.sns",
    "iotsched.adapters.dms_http",
    "iotsched.adapters.alerting",
    "mypy_boto3_sqs",
    "mypy_boto3_sns",
)

_PROBE = textwrap.dedent(
    """
    import json, sys
    import botocore.session

    created = []
    _create_client = botocore.session.Session.create_client

    def create_client(self, service_name, *args, **kwargs):
        created.append(service_name)
        return _create_client(self, service_name, *args, **kwargs)

    botocore.session.Session.create_client = create_client

    from iotsched.cli.main import cli

    try:
        cli(sys.argv[1:], prog_name="iotsched")
    except SystemExit as exc:
        code = exc.code
    else:
        code = 0
    print()
    print(json.dumps({"modules": sorted(sys.modules), "clients": created}))
    sys.exit(code)
    """
)


def probe(*args: str, env: dict[str, str]) -> tuple[int, str, dict[str, Any]]:
    """(exit status, the verb's output, what the process imported and created)."""
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    output, _, seen = done.stdout.rstrip("\n").rpartition("\n")
    assert seen.startswith("{"), done.stderr
    return done.returncode, output, json.loads(seen)


def loaded(modules: list[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))


def bare_env(home: Path, **extra: str) -> dict[str, str]:
    """A user's environment without any IOTSCHED_* setting: the CLI finds the deployment."""
    home.mkdir(exist_ok=True)
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "AWS_DEFAULT_REGION": "us-east-1",
        **extra,
    }


@pytest.fixture
def local_names(moto_server: str, moto_clients: AwsClients) -> str:
    """The emulator holding what `iotsched local up` provisions, by its names."""
    reset_moto(moto_server)
    sqs = moto_clients.sqs()
    create_table(moto_clients.dynamodb(), "iotsched-Table")
    create_shard_queue(sqs, "iotsched-ShardQueue")
    create_alert_topic(moto_clients.sns(), sqs, "iotsched-AlertTopic")
    return moto_server


def test_rollback_help_imports_no_messaging_or_device_adapter(tmp_path: Path) -> None:
    status, output, seen = probe("tasks", "rollback", "--help", env=bare_env(tmp_path / "h"))
    assert status == 0, output
    assert "--to" in output
    assert loaded(seen["modules"], MESSAGING_AND_DEVICES) == []
    assert loaded(seen["modules"], ("iotsched.bootstrap", "iotsched.adapters.dynamodb")) == []
    assert seen["clients"] == []


def test_a_rollback_builds_the_stores_alone(
    local_names: str, moto_clients: AwsClients, tmp_path: Path
) -> None:
    stores = build_stores(
        TableSettings(table="iotsched-Table", endpoint_url=local_names), clients=moto_clients
    )
    for mode in ("fast", "slow"):  # versions 1 and 2
        task = {"id": "scan", "handler": "noop", "trigger": {"rate": "1h"}, "params": {"m": mode}}
        apply_task_file(
            {"tasks": [task]},
            handlers=registry(),
            store=lambda: stores.tasks,
            now=lambda: datetime.now(UTC),
        )
    env = bare_env(tmp_path / "home", AWS_ENDPOINT_URL=local_names)

    status, output, seen = probe("tasks", "rollback", "scan", "--to", "1", "--json", env=env)

    assert status == 0, output
    assert json.loads(output) == {
        "task_id": "scan",
        "rolled_back_to": 1,
        "changed": True,
        "version": 3,
    }
    stored = stores.tasks.get_task("scan")
    assert stored is not None and stored.definition.params == {"m": "fast"}
    assert loaded(seen["modules"], MESSAGING_AND_DEVICES) == []
    assert "iotsched.adapters.dynamodb" in seen["modules"]  # the probe sees what was used
    # the stack looked up (none: the local runtime's names), then the table alone
    assert set(seen["clients"]) == {"cloudformation", "dynamodb"}

    # The probe has teeth: `tasks delete` takes the lifecycle (a forced delete ends instances,
    # and what follows an end may send shard messages), so it builds the whole wiring.
    status, output, seen = probe("tasks", "delete", "scan", "--json", env=env)
    assert status == 0, output
    assert {"iotsched.adapters.sqs", "iotsched.adapters.sns"} <= set(seen["modules"])
    assert {"sqs", "sns"} <= set(seen["clients"])
