"""Params too large for where a firing puts them are a 400 naming the limit, with the message
the CLI prints (the checks are the use-cases'), and nothing written: a task whose shard
messages would pass SQS's limit, a run or a submission whose params would pass the instance's
item or its messages."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from iotsched.services.operations.on_demand import (
    ManualRunError,
    run_now,
    submit,
)
from tests.api.conftest import DEVICE_SCAN, Client

SQS_LIMIT = "SQS's 256 KiB message limit"
ITEM_LIMIT = "DynamoDB's 400 KB item limit"

#: About 200 KB of listed shards, stored with every instance of the task.
WIDE: dict[str, Any] = {
    "id": "wide",
    "handler": "noop",
    "trigger": {"rate": "1h"},
    "sharding": {"strategy": "static", "shards": [{"n": n, "pad": "p" * 1000} for n in range(200)]},
    "params": {"a": "a" * 100_000},
}


@pytest.fixture(params=["memory", pytest.param("moto", marks=pytest.mark.moto)])
def client(request: pytest.FixtureRequest) -> Client:
    found: Client = request.getfixturevalue("api" if request.param == "memory" else "moto_api")
    return found


def test_a_task_whose_messages_would_pass_sqs_limit_is_400(client: Client) -> None:
    answer = client.put("/tasks/device-scan", {**DEVICE_SCAN, "params": {"blob": "x" * 300_000}})
    assert answer.status == 400, answer.body
    (problem,) = answer.problems
    assert problem["field"] == "task 'device-scan': params"
    assert problem["message"].startswith("too large to send: a shard message takes ")
    assert SQS_LIMIT in problem["message"]
    assert client.get("/tasks").body == []


def cli_message(refuse: Callable[[], object]) -> str:
    """What the CLI prints after `error: ` for the same request (the service's refusal)."""
    with pytest.raises(ManualRunError) as refused:
        refuse()
    return str(refused.value)


@pytest.mark.parametrize(
    ("task", "params", "limit"),
    [
        pytest.param(WIDE, {"b": "b" * 110_000}, ITEM_LIMIT, id="item"),
        pytest.param(
            {**DEVICE_SCAN, "params": {"a": "a" * 150_000}},
            {"b": "b" * 120_000},
            SQS_LIMIT,
            id="message",
        ),
    ],
)
def test_runs_and_submissions_with_params_too_large_are_400_and_write_nothing(
    client: Client, task: dict[str, Any], params: dict[str, Any], limit: str
) -> None:
    task_id = task["id"]
    assert client.put(f"/tasks/{task_id}", task).status == 200
    svc = client.services
    at = svc.clock.now() + timedelta(hours=1)
    for answer, refuse in (
        (
            client.post(f"/tasks/{task_id}/runs", {"params": params, "request_id": "r-1"}),
            lambda: run_now(task_id, svc, params=params, request_id="r-1"),
        ),
        (
            client.post(f"/tasks/{task_id}/submissions", {"at": at.isoformat(), "params": params}),
            lambda: submit(task_id, svc, at=at, params=params),
        ),
    ):
        message = cli_message(refuse)
        assert limit in message
        assert answer.status == 400, answer.body
        assert answer.body["message"] == message
        assert answer.problems == [{"field": "body", "message": message}]
    assert client.get("/instances").body == []
    # The request id was not bound: the same id with params that fit is served.
    ran = client.post(f"/tasks/{task_id}/runs", {"params": {"b": "b"}, "request_id": "r-1"})
    assert ran.status == 200, ran.body
    assert ran.body["instance"]["instance_id"].endswith("~manual-r-1")
