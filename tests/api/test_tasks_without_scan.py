"""Tasks are listed from their sparse index entries, never by a table scan: GET /tasks and
`iotsched tasks list` on the moto server with every Scan refused, page after page."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.client import BaseClient
from click.testing import CliRunner

from iotsched.cli.main import cli
from tests.api.conftest import DEVICE_SCAN, Client
from tests.support import AwsResources

pytestmark = pytest.mark.moto

IDS = [f"task-{n:02d}" for n in range(7)]


class ScanCalled(AssertionError):
    pass


@pytest.fixture
def no_scan(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every botocore client in this process refuses Scan; the operations called are listed."""
    called: list[str] = []
    original = BaseClient._make_api_call

    def guarded(self: BaseClient, operation: str, params: dict[str, Any]) -> Any:
        called.append(operation)
        if operation == "Scan":
            raise ScanCalled(f"a table scan: {params}")
        return original(self, operation, params)

    monkeypatch.setattr(BaseClient, "_make_api_call", guarded)
    yield called


def test_get_tasks_pages_through_every_task_without_a_scan(
    moto_api: Client, no_scan: list[str]
) -> None:
    for task_id in reversed(IDS):
        assert moto_api.put(f"/tasks/{task_id}", {**DEVICE_SCAN, "id": task_id}).status == 200
    assert [t["id"] for t in moto_api.get("/tasks").body] == IDS
    pages = []
    after: str | None = None
    for _ in range(10):  # a cursor that does not move fails, never loops
        query = {"limit": "3", **({"after": after} if after else {})}
        page = [t["id"] for t in moto_api.get("/tasks", **query).body]
        pages.append(page)
        if len(page) < 3:
            break
        after = page[-1]
    assert pages == [IDS[0:3], IDS[3:6], IDS[6:7]]
    assert moto_api.get("/tasks", limit="0").status == 400
    assert moto_api.get("/tasks", after="not a task id!").status == 400
    assert "Query" in no_scan and "Scan" not in no_scan


def test_cli_tasks_list_without_a_scan(
    aws_resources: AwsResources, tmp_path: Path, no_scan: list[str]
) -> None:
    path = tmp_path / "tasks.yaml"
    lines = ["tasks:"]
    for task_id in reversed(IDS):
        lines += [f"  - id: {task_id}", "    handler: noop", "    trigger: {rate: 1h}"]
    path.write_text("\n".join(lines) + "\n")
    runner = CliRunner(
        env={
            "IOTSCHED_TABLE": aws_resources.table,
            "IOTSCHED_SHARD_QUEUE_URL": aws_resources.shard_queue_url,
            "IOTSCHED_ALERT_TOPIC_ARN": aws_resources.alert_topic_arn,
            "AWS_ENDPOINT_URL": aws_resources.endpoint_url,
        }
    )
    applied = runner.invoke(cli, ["tasks", "apply", str(path)])
    assert applied.exit_code == 0, applied.output
    listed = runner.invoke(cli, ["tasks", "list", "--json"])
    assert listed.exit_code == 0, listed.output
    assert [t["id"] for t in json.loads(listed.output)] == IDS
    page = runner.invoke(cli, ["tasks", "list", "--json", "--after", IDS[1], "--limit", "2"])
    assert page.exit_code == 0, page.output
    assert [t["id"] for t in json.loads(page.output)] == IDS[2:4]
    assert "Scan" not in no_scan
