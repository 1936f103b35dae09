"""Pause notes through the API and the CLI: the note shows on the task until a resume clears
it, on the in-memory services and on the moto server's table."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner

from iotsched.cli.main import cli
from tests.api.conftest import DEVICE_SCAN, Client
from tests.support import AwsResources

NOTE = "firmware 4.2 recalled [ops-113]"


def round_trip(api: Client) -> None:
    assert api.put("/tasks/device-scan", DEVICE_SCAN).status == 200
    paused = api.post("/tasks/device-scan/pause", {"note": NOTE})
    assert paused.status == 200, paused.body
    assert (paused.body["paused"], paused.body["pause_note"]) == (True, NOTE)
    assert api.get("/tasks/device-scan").body["pause_note"] == NOTE
    assert [t["pause_note"] for t in api.get("/tasks").body] == [NOTE]
    resumed = api.post("/tasks/device-scan/resume")
    assert (resumed.body["paused"], resumed.body["pause_note"]) == (False, None)
    assert api.get("/tasks/device-scan").body["pause_note"] is None
    # no body: a pause without a note
    bare = api.post("/tasks/device-scan/pause")
    assert bare.status == 200 and (bare.body["paused"], bare.body["pause_note"]) == (True, None)


def test_a_pause_note_round_trip_in_memory(api: Client) -> None:
    round_trip(api)


@pytest.mark.moto
def test_a_pause_note_round_trip_on_dynamodb(moto_api: Client) -> None:
    round_trip(moto_api)


@pytest.mark.parametrize(
    ("body", "field"),
    [({"note": "x" * 501}, "body.note"), ({"note": NOTE, "why": "?"}, "body.why")],
)
def test_a_bad_note_is_400_and_pauses_nothing(
    api: Client, device_scan: dict[str, Any], body: dict[str, Any], field: str
) -> None:
    answer = api.post("/tasks/device-scan/pause", body)
    assert answer.status == 400
    assert [p["field"] for p in answer.problems] == [field]
    assert api.get("/tasks/device-scan").body["paused"] is False


@pytest.mark.moto
def test_the_cli_pauses_with_a_note_shows_it_and_resume_clears_it(
    aws_resources: AwsResources, moto_api: Client
) -> None:
    assert moto_api.put("/tasks/device-scan", DEVICE_SCAN).status == 200
    runner = CliRunner(
        env={
            "IOTSCHED_TABLE": aws_resources.table,
            "IOTSCHED_SHARD_QUEUE_URL": aws_resources.shard_queue_url,
            "IOTSCHED_ALERT_TOPIC_ARN": aws_resources.alert_topic_arn,
            "AWS_ENDPOINT_URL": aws_resources.endpoint_url,
        }
    )

    def run(*args: str) -> str:
        result = runner.invoke(cli, list(args))
        assert result.exit_code == 0, result.output
        return result.output

    assert run("tasks", "pause", "device-scan", "--note", NOTE).startswith(
        f"device-scan: paused ({NOTE}); next fire"
    )
    shown = run("tasks", "show", "device-scan")
    assert f"paused: {NOTE}" in shown
    assert json.loads(run("tasks", "show", "device-scan", "--json"))["pause_note"] == NOTE
    listed = run("tasks", "list")
    assert "paused*" in listed and f"* device-scan: {NOTE}" in listed
    assert json.loads(run("tasks", "list", "--json"))[0]["pause_note"] == NOTE
    assert run("tasks", "resume", "device-scan").startswith("device-scan: resumed; next fire")
    assert json.loads(run("tasks", "show", "device-scan", "--json"))["pause_note"] is None
    assert f"paused: {NOTE}" not in run("tasks", "show", "device-scan")
    too_long = runner.invoke(cli, ["tasks", "pause", "device-scan", "--note", "x" * 501])
    assert too_long.exit_code != 0
    assert "at most 500 characters" in too_long.output
    assert json.loads(run("tasks", "show", "device-scan", "--json"))["paused"] is False
