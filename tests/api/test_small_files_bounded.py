"""Issue item "small files that exhaust memory or time", on the API: the bounds `tasks apply`
holds a file to hold a request body, each a 400 naming its limit, nothing written."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.api.conftest import DEVICE_SCAN, Client

BUCKETS = {"strategy": "custom", "planner": "hash_buckets", "params": {"buckets": 10_001}}


def _tasks(count: int) -> dict[str, Any]:
    return {"tasks": [{**DEVICE_SCAN, "id": f"t{n}"} for n in range(count)]}


@pytest.mark.parametrize(
    ("method", "path", "body", "field", "limit"),
    [
        pytest.param(
            "PUT",
            "/tasks/device-scan",
            {**DEVICE_SCAN, "sharding": BUCKETS},
            "task 'device-scan': sharding.params.buckets",
            "Input should be less than or equal to 10000",
            id="planner-parameter",
        ),
        pytest.param(
            "POST",
            "/tasks",
            _tasks(501),
            "tasks",
            "a task file holds at most 500 tasks, this one 501: split it",
            id="tasks-per-file",
        ),
        pytest.param(
            "POST",
            "/tasks",
            json.dumps({"tasks": [{**DEVICE_SCAN, "description": "x" * (1024 * 1024)}]}),
            "body",
            "larger than 1,048,576 bytes (1 MiB), the most a request body takes",
            id="body-size",
        ),
        pytest.param(
            "POST",
            "/tasks",
            '{"tasks": ' + "[" * 100_000 + "]" * 100_000 + "}",
            "body",
            "nests deeper than 64 levels, the most a document may",
            id="body-depth",
        ),
    ],
)
def test_small_files_that_exhaust_memory_or_time_are_400_naming_the_limit(
    api: Client, method: str, path: str, body: Any, field: str, limit: str
) -> None:
    headers = {"Content-Type": "application/json"}
    answer = api.call(method, path, body, headers=headers)
    assert answer.status == 400, answer.body
    assert any(p["field"] == field and limit in p["message"] for p in answer.problems), (
        answer.problems
    )
    assert api.get("/tasks").body == []
