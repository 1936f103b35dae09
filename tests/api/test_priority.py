"""The `priority` of runs, submissions and backfills through the API: taken as asked (a
backfill's is low unless asked), stored on the instance, refused with a 400 when unknown."""

from __future__ import annotations

from typing import Any

import pytest

from iotsched.core.task_definition import Priority
from tests.api.conftest import Client


def test_a_run_takes_the_priority_asked_else_the_tasks(
    api: Client, device_scan: dict[str, Any]
) -> None:
    high = api.post("/tasks/device-scan/runs", {"request_id": "r-high", "priority": "high"})
    assert high.status == 200, high.body
    plain = api.post("/tasks/device-scan/runs", {"request_id": "r-plain"})
    assert (high.body["instance"]["priority"], plain.body["instance"]["priority"]) == (
        "high",
        "normal",
    )
    for answer, expected in ((high, Priority.HIGH), (plain, Priority.NORMAL)):
        stored = api.services.instances.get_instance(answer.body["instance"]["instance_id"])
        assert stored is not None and stored.priority is expected


def test_a_backfill_is_low_unless_asked(api: Client, device_scan: dict[str, Any]) -> None:
    body = {"from": "2026-11-01", "to": "2026-11-01"}
    assert api.post("/tasks/device-scan/backfills", body).status == 200
    body = {"from": "2026-11-02", "to": "2026-11-02", "priority": "normal"}
    assert api.post("/tasks/device-scan/backfills", body).status == 200
    by_date = {
        i.business_date.isoformat(): i.priority
        for i in api.services.instances.list_instances(task_id="device-scan")
    }
    assert by_date == {"2026-11-01": Priority.LOW, "2026-11-02": Priority.NORMAL}


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/tasks/device-scan/runs", {"priority": "urgent"}),
        ("/tasks/device-scan/submissions", {"delay": "1h", "priority": "urgent"}),
        ("/tasks/device-scan/backfills", {"from": "2026-11-01", "to": "2026-11-01", "priority": 1}),
    ],
)
def test_an_unknown_priority_is_refused_before_anything_is_written(
    api: Client, device_scan: dict[str, Any], path: str, body: dict[str, Any]
) -> None:
    answer = api.post(path, body)
    assert answer.status == 400, answer.body
    assert [p["field"] for p in answer.problems] == ["body.priority"]
    assert api.services.instances.list_instances(task_id="device-scan") == []
