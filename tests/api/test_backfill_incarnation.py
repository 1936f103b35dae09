"""A task created again under a deleted task's id, through the CLI: a backfill names the
instances it claimed by their ids, marked with its incarnation (`~v<n>`), in the API's answer and
the CLI's alike (whose pacing reads them back); `tasks history` and `instances` show the
incarnation's versions and instances only."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from click.testing import CliRunner

from iotsched.cli.main import cli
from iotsched.core.instance_record import incarnation_of
from tests.api.conftest import DEVICE_SCAN, Client
from tests.support import TEST_BUCKETS, AwsResources

DAILY = {**DEVICE_SCAN, "id": "x", "trigger": {"cron": "0 6 * * *"}}


def on_the_cli(aws_resources: AwsResources) -> Callable[..., Any]:
    """`iotsched ARGS --json` on the moto server's deployment, its answer decoded."""
    runner = CliRunner(
        env={
            "IOTSCHED_TABLE": aws_resources.table,
            "IOTSCHED_SHARD_QUEUE_URL": aws_resources.shard_queue_url,
            "IOTSCHED_ALERT_TOPIC_ARN": aws_resources.alert_topic_arn,
            "AWS_ENDPOINT_URL": aws_resources.endpoint_url,
            "IOTSCHED_INDEX_BUCKETS": TEST_BUCKETS,
        }
    )

    def run(*args: str) -> Any:
        done = runner.invoke(cli, [*args, "--json"])
        assert done.exit_code == 0, done.output
        return json.loads(done.output)

    return run


@pytest.mark.moto
def test_a_backfill_names_the_ids_of_its_tasks_incarnation(
    moto_api: Client, aws_resources: AwsResources
) -> None:
    assert moto_api.put("/tasks/x", {**DAILY, "tenant": "acme"}).status == 200
    first = moto_api.post("/tasks/x/backfills", {"from": "2026-11-20", "to": "2026-11-20"})
    assert first.body["results"] == {"x@2026-11-21T06:00Z": "claimed"}, first.body
    assert moto_api.call("DELETE", "/tasks/x", query={"force": "true"}).status == 200
    assert moto_api.put("/tasks/x", {**DAILY, "tenant": "globex"}).status == 200

    again = moto_api.post("/tasks/x/backfills", {"from": "2026-11-20", "to": "2026-11-20"})
    cli_json = on_the_cli(aws_resources)
    done = cli_json("backfill", "x", "--from", "2026-11-21", "--to", "2026-11-21")
    named = {**again.body["results"], **done["results"]}
    assert set(named.values()) == {"claimed"}, named
    listed = {i["instance_id"] for i in moto_api.get("/instances", task_id="x").body}
    assert set(named) == listed and len(listed) == 2, (named, listed)
    assert all(incarnation_of(i) > 1 for i in listed), listed


@pytest.mark.moto
def test_the_clis_history_and_instances_are_the_incarnations(
    moto_api: Client, aws_resources: AwsResources
) -> None:
    assert moto_api.put("/tasks/x", {**DAILY, "tenant": "acme"}).status == 200
    assert moto_api.put("/tasks/x", {**DAILY, "tenant": "acme", "timeout_s": 90}).status == 200
    old = moto_api.post("/tasks/x/runs", {"request_id": "r1"}).body["instance"]["instance_id"]
    assert moto_api.call("DELETE", "/tasks/x", query={"force": "true"}).status == 200
    assert moto_api.put("/tasks/x", {**DAILY, "tenant": "globex"}).status == 200
    new = moto_api.post("/tasks/x/runs", {"request_id": "r1"}).body["instance"]["instance_id"]

    cli_json = on_the_cli(aws_resources)
    assert [v["version"] for v in cli_json("tasks", "history", "x")] == [3]
    assert [i["instance_id"] for i in cli_json("instances", "x")] == [new]
    assert new != old and incarnation_of(new) == 3
    assert cli_json("shards", old)["instance"]["tenant"] == "acme"  # the operator's, by id
