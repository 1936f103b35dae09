"""An aborted instance as operators see it: the API's listing by status and its view, and
`iotsched instances --status aborted` (its table says why), on the moto server's table."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from iotsched.cli.main import cli
from iotsched.core.instance_record import InstanceStatus
from iotsched.core.task_fleet_safety import Abort
from iotsched.services.wiring import Wiring
from tests.api.conftest import Client
from tests.support import T0, AwsResources, instance

REASON = "3 of 10 ended shards failed (30%): at or above 20% after at least 10"


def aborted_instance(services: Wiring) -> str:
    record = instance("fleet", shards=20, status=InstanceStatus.RUNNING).model_copy(
        update={"abort": Abort(failure_percent=20, min_executed=10)}
    )
    assert services.instances.claim_instance(record) is None
    assert services.instances.end_instance(
        record.instance_id, status=InstanceStatus.ABORTED, reason=REASON, finished_at=T0
    )
    return record.instance_id


@pytest.mark.moto
def test_an_aborted_instance_is_listed_by_its_status(
    moto_api: Client, aws_resources: AwsResources
) -> None:
    iid = aborted_instance(moto_api.services)
    listed = moto_api.get("/instances", status="aborted")
    assert listed.status == 200
    assert [(i["instance_id"], i["status"], i["reason"]) for i in listed.body] == [
        (iid, "aborted", REASON)
    ]
    assert moto_api.get("/instances", status="failed").body == []
    assert moto_api.get(f"/instances/{iid}").body["status"] == "aborted"
    runner = CliRunner(
        env={
            "IOTSCHED_TABLE": aws_resources.table,
            "IOTSCHED_SHARD_QUEUE_URL": aws_resources.shard_queue_url,
            "IOTSCHED_ALERT_TOPIC_ARN": aws_resources.alert_topic_arn,
            "AWS_ENDPOINT_URL": aws_resources.endpoint_url,
            "COLUMNS": "250",
        }
    )
    as_json = runner.invoke(cli, ["instances", "fleet", "--status", "aborted", "--json"])
    assert as_json.exit_code == 0, as_json.output
    assert [i["status"] for i in json.loads(as_json.output)] == ["aborted"]
    table = runner.invoke(cli, ["instances", "--status", "aborted"])
    assert table.exit_code == 0, table.output
    assert f"aborted ({REASON})" in table.output
