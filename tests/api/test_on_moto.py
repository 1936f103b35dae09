"""The API on DynamoDB, SQS and SNS (moto server): the store's conditional semantics, and the
Lambda shell (`functions/api/app.py`) built from the environment as on AWS."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

import boto3
import pytest

from functions.api import app as api_function
from iotsched.api.proxy import rest_event
from tests.api.conftest import DEVICE_SCAN, Client
from tests.support import AwsResources

pytestmark = pytest.mark.moto

INSTANCE = "device-scan@2026-11-29T12:00Z"


def test_run_list_shards_and_cancel_on_dynamodb(moto_api: Client) -> None:
    assert moto_api.post("/tasks", {"tasks": [DEVICE_SCAN]}).body["created"] == ["device-scan"]
    run = moto_api.post("/tasks/device-scan/runs")
    assert run.status == 200
    assert run.body["outcome"] == "claimed"
    assert moto_api.post("/tasks/device-scan/runs").body["outcome"] == "exists"

    running = moto_api.get("/instances", status="running")  # the by_status index
    assert [i["instance_id"] for i in running.body] == [INSTANCE]
    shards = moto_api.get(f"/instances/{INSTANCE}/shards").body
    assert [s["status"] for s in shards["shards"]] == ["pending"] * 3

    cancelled = moto_api.post(f"/instances/{INSTANCE}/cancel", {"reason": "test"})
    assert cancelled.status == 200 and cancelled.body["status"] == "cancelled"
    again = moto_api.post(f"/instances/{INSTANCE}/cancel")
    assert again.status == 409
    assert moto_api.get("/instances/device-scan@2026-11-29T13:00Z").status == 404


def test_a_bad_task_writes_nothing_on_dynamodb(moto_api: Client) -> None:
    bad = {"tasks": [DEVICE_SCAN, {**DEVICE_SCAN, "id": "other", "trigger": {"cron": "bad"}}]}
    answer = moto_api.post("/tasks", bad)
    assert answer.status == 400
    assert [p["field"] for p in answer.problems] == ["task 'other': trigger.cron"]
    assert moto_api.get("/tasks").body == []


def test_a_task_or_run_too_large_for_one_item_is_400(moto_api: Client) -> None:
    """DynamoDB items are at most 400 KB; the request's params are what made them too large."""
    huge = moto_api.put("/tasks/device-scan", {**DEVICE_SCAN, "params": {"blob": "x" * 420_000}})
    assert huge.status == 400, huge.body
    assert "too large to store" in huge.problems[0]["message"]
    assert moto_api.get("/tasks").body == []

    # (a task's own params fit a shard message, at most 248 KiB: see tests/api/test_params_size)
    large = {**DEVICE_SCAN, "params": {"blob": "x" * 200_000}}
    assert moto_api.put("/tasks/device-scan", large).status == 200
    run = moto_api.post("/tasks/device-scan/runs", {"params": {"more": "y" * 210_000}})
    assert run.status == 400, run.body
    assert "too large to store" in run.body["message"]
    assert moto_api.get("/instances").body == []


def test_rerun_and_alerts_on_dynamodb(moto_api: Client) -> None:
    groups = {**DEVICE_SCAN, "sharding": {"strategy": "groups"}}  # no device directory here
    moto_api.put("/tasks/device-scan", groups)
    assert moto_api.post("/tasks/device-scan/runs").body["outcome"] == "failed"
    alerts = moto_api.get("/alerts").body
    assert [(a["type"], a["instance_id"]) for a in alerts] == [("instance_failed", INSTANCE)]
    assert alerts[0]["raised_at"]  # stamped when recorded

    moto_api.put("/tasks/device-scan", DEVICE_SCAN)
    rerun = moto_api.post(f"/instances/{INSTANCE}/rerun")
    assert rerun.status == 200, rerun.body
    assert rerun.body["instance_id"] == f"{INSTANCE}~run2"
    assert moto_api.post(f"/instances/{INSTANCE}/rerun").status == 409


@dataclass
class FakeLambdaContext:
    function_name: str = "iotsched-ApiFunction"
    memory_limit_in_mb: int = 512
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:iotsched-api"
    aws_request_id: str = "req-1"


@pytest.fixture
def lambda_env(aws_resources: AwsResources, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The environment template.yaml gives the function, aimed at the moto server."""
    settings = aws_resources.settings
    monkeypatch.setenv("IOTSCHED_TABLE", settings.table)
    monkeypatch.setenv("IOTSCHED_SHARD_QUEUE_URL", settings.shard_queue_url)
    monkeypatch.setenv("IOTSCHED_ALERT_TOPIC_ARN", settings.alert_topic_arn)
    monkeypatch.setenv("AWS_ENDPOINT_URL", aws_resources.endpoint_url)
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", "iotsched")
    api_function.container.clear()
    yield api_function
    api_function.container.clear()


def operator_role(endpoint_url: str, name: str, tags: dict[str, str]) -> str:
    """A role on the moto server with `tags`; the ARN of one of its sessions."""
    iam = boto3.client("iam", endpoint_url=endpoint_url, region_name="us-east-1")
    iam.create_role(
        RoleName=name,
        AssumeRolePolicyDocument='{"Version":"2012-10-17","Statement":[]}',
        Tags=[{"Key": k, "Value": v} for k, v in tags.items()],
    )
    return f"arn:aws:sts::123456789012:assumed-role/{name}/session"


def test_the_lambda_handler_serves_proxy_events(
    lambda_env: Any, aws_resources: AwsResources, monkeypatch: pytest.MonkeyPatch
) -> None:
    suffix = uuid.uuid4().hex[:8]
    signer = operator_role(
        aws_resources.endpoint_url, f"ops-{suffix}", {"iotsched:operator": "true"}
    )
    tenant = operator_role(
        aws_resources.endpoint_url, f"acme-{suffix}", {"iotsched:tenants": "acme"}
    )

    def invoke(
        method: str, path: str, body: Any = None, arn: str | None = signer
    ) -> tuple[int, Any]:
        event = rest_event(method, path, body=body)
        event["requestContext"]["identity"]["userArn"] = arn
        response = lambda_env.lambda_handler(event, FakeLambdaContext())
        return response["statusCode"], json.loads(response["body"])

    # The caller is the signed principal, mapped by its IAM tags: none is refused.
    assert invoke("GET", "/tasks", arn=None)[0] == 403
    assert invoke("GET", "/tasks", arn=tenant) == (200, [])

    assert invoke("PUT", "/tasks/device-scan", DEVICE_SCAN)[0] == 200
    status, listed = invoke("GET", "/tasks")
    assert status == 200 and [t["id"] for t in listed] == ["device-scan"]
    status, run = invoke("POST", "/tasks/device-scan/runs", {"request_id": "lambda-1"})
    assert status == 200 and run["outcome"] == "claimed"
    instance_id = run["instance"]["instance_id"]
    status, page = invoke("GET", f"/instances/{instance_id}/shards")
    assert status == 200 and page["total"] == 3
    assert invoke("GET", "/tasks/nowhere")[0] == 404
    assert invoke("GET", "/tasks", arn=tenant) == (200, [])  # device-scan has no tenant
    # Built once per container, reused by later invocations.
    built = lambda_env.container.wiring()

    def build_again(settings: Any) -> Any:
        raise AssertionError("the wiring was built again")

    monkeypatch.setattr("iotsched.lambdas.container.build", build_again)
    assert invoke("GET", "/tasks")[0] == 200
    assert lambda_env.container.wiring() is built
