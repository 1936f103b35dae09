"""`--tenant` on the CLI's list verbs, and the tenant column, on the moto server's table."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from click.testing import CliRunner

from iotsched import bootstrap
from iotsched.api.app import create_app
from iotsched.cli.main import cli
from iotsched.clock import ManualClock
from tests.api.conftest import DEVICE_SCAN, Client
from tests.support import AwsResources

#: Index partitions of this deployment: each list reads every one, page after page, so a few
#: keep the test quick while its pages still merge across partitions.
BUCKETS = 4


def task(task_id: str, tenant: str | None, **changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {**DEVICE_SCAN, "id": task_id, **changes}
    if tenant:
        body["tenant"] = tenant
    return body


@pytest.mark.moto
def test_list_verbs_filter_by_tenant(aws_resources: AwsResources, clock: ManualClock) -> None:
    settings = replace(aws_resources.settings, index_buckets=BUCKETS)
    services = bootstrap.build(settings, clock=clock, clients=aws_resources.clients())
    moto_api = Client(create_app(lambda: services), services)
    groups = {"sharding": {"strategy": "groups"}}  # fails without a device directory: an alert
    for task_id, tenant in (("a-1", "acme"), ("a-2", "acme"), ("g-1", "globex"), ("n-1", None)):
        assert moto_api.put(f"/tasks/{task_id}", task(task_id, tenant, **groups)).status == 200
        assert moto_api.post(f"/tasks/{task_id}/runs").body["outcome"] == "failed"
        assert moto_api.put(f"/tasks/{task_id}", task(task_id, tenant)).status == 200
        assert moto_api.post(f"/tasks/{task_id}/runs", {"request_id": "x"}).status == 200
    runner = CliRunner(
        env={
            "IOTSCHED_TABLE": aws_resources.table,
            "IOTSCHED_SHARD_QUEUE_URL": aws_resources.shard_queue_url,
            "IOTSCHED_ALERT_TOPIC_ARN": aws_resources.alert_topic_arn,
            "AWS_ENDPOINT_URL": aws_resources.endpoint_url,
            "IOTSCHED_INDEX_BUCKETS": str(BUCKETS),
        }
    )

    def run(*args: str) -> Any:
        result = runner.invoke(cli, [*args, "--json"])
        assert result.exit_code == 0, result.output
        return json.loads(result.output)

    assert [t["id"] for t in run("tasks", "list", "--tenant", "acme")] == ["a-1", "a-2"]
    assert [t["id"] for t in run("tasks", "list", "--tenant", "-")] == ["n-1"]
    # A page fills past other tenants' tasks: a short page still means the end.
    assert [t["id"] for t in run("tasks", "list", "--tenant", "globex", "--limit", "1")] == ["g-1"]
    assert [t["id"] for t in run("tasks", "list", "--tenant", "acme", "--after", "a-1")] == ["a-2"]
    acme = run("instances", "--tenant", "acme", "--limit", "3")
    assert len(acme) == 3 and {i["tenant"] for i in acme} == {"acme"}
    assert {i["task_id"] for i in run("instances", "--tenant", "globex")} == {"g-1"}
    assert len(run("instances")) == 8
    alerts = run("alerts", "--tenant", "acme")
    assert sorted(a["task_id"] for a in alerts) == ["a-1", "a-2"]
    assert [a["task_id"] for a in run("alerts", "--tenant", "-")] == ["n-1"]
    table = runner.invoke(cli, ["instances", "--tenant", "globex"])
    assert table.exit_code == 0 and "tenant" in table.output and "globex" in table.output
