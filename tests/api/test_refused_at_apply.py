"""Issue item "accepted at apply, failing at every firing", on the API: the same refusals as
`tasks apply`, and a body giving a key twice is refused as a YAML file doing so is (JSON would
keep the last value, silently)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.api.conftest import DEVICE_SCAN, Client


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        (
            {"instance_timeout_s": 10**12},
            "instance_timeout_s",
            "Input should be less than or equal to 2592000",
        ),
        (
            {
                "sharding": {
                    "strategy": "custom",
                    "planner": "hash_buckets",
                    "params": {"buckets": -1},
                }
            },
            "sharding.params.buckets",
            "Input should be greater than or equal to 1",
        ),
        (
            {"trigger": {"at": "0001-01-01T00:00:00Z"}},
            "trigger.at",
            "0001-01-01T00:00:00+00:00 is not between 2000-01-01T00:00Z and 3000-01-01T00:00Z, "
            "the instants a task may name",
        ),
        ({"max_runs": 10**30}, "max_runs", "Input should be less than or equal to 1000000000"),
    ],
)
def test_accepted_at_apply_failing_at_every_firing_is_400(
    api: Client, fields: dict[str, Any], field: str, message: str
) -> None:
    answer = api.put("/tasks/device-scan", {**DEVICE_SCAN, **fields})
    assert answer.status == 400, answer.body
    assert answer.problems == [{"field": f"task 'device-scan': {field}", "message": message}]
    assert api.get("/tasks").body == []


def test_a_body_giving_a_key_twice_is_400(api: Client) -> None:
    body = json.dumps(DEVICE_SCAN)[:-1] + ', "timeout_s": 20, "timeout_s": 30}'
    answer = api.call(
        "PUT", "/tasks/device-scan", body, headers={"Content-Type": "application/json"}
    )
    assert answer.status == 400, answer.body
    assert answer.problems == [{"field": "body", "message": "found duplicate key 'timeout_s'"}]
    assert api.get("/tasks").body == []
