"""A backfill names the instances it claimed by their ids: for a task created again under a
deleted task's id, ids marked with its incarnation (`~v<n>`), through the API and the CLI alike
(whose pacing reads them back)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from iotsched.cli.main import cli
from iotsched.core.instance_record import incarnation_of
from tests.api.conftest import DEVICE_SCAN, Client
from tests.support import TEST_BUCKETS, AwsResources

DAILY = {**DEVICE_SCAN, "id": "x", "trigger": {"cron": "0 6 * * *"}}


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
    runner = CliRunner(
        env={
            "IOTSCHED_TABLE": aws_resources.table,
            "IOTSCHED_SHARD_QUEUE_URL": aws_resources.shard_queue_url,
            "IOTSCHED_ALERT_TOPIC_ARN": aws_resources.alert_topic_arn,
            "AWS_ENDPOINT_URL": aws_resources.endpoint_url,
            "IOTSCHED_INDEX_BUCKETS": TEST_BUCKETS,
        }
    )
    done = runner.invoke(
        cli, ["backfill", "x", "--from", "2026-11-21", "--to", "2026-11-21", "--json"]
    )
    assert done.exit_code == 0, done.output
    named = {**again.body["results"], **json.loads(done.output)["results"]}
    assert set(named.values()) == {"claimed"}, named
    listed = {i["instance_id"] for i in moto_api.get("/instances", task_id="x").body}
    assert set(named) == listed and len(listed) == 2, (named, listed)
    assert all(incarnation_of(i) > 1 for i in listed), listed
