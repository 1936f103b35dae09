"""DELETE /tasks/{task_id}: 409 while instances are open, `force` cancels them, 404 after."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.conftest import Client

INSTANCE = "device-scan@2026-11-29T12:00Z"


def test_delete_is_refused_while_an_instance_is_open_then_forced(
    api: Client, device_scan: dict[str, Any]
) -> None:
    assert api.post("/tasks/device-scan/runs").body["outcome"] == "claimed"

    refused = api.call("DELETE", "/tasks/device-scan")
    assert refused.status == 409
    assert refused.body["error"] == "conflict"
    assert f"1 open instance(s) ({INSTANCE})" in refused.body["message"]
    assert api.get("/tasks/device-scan").status == 200

    forced = api.call("DELETE", "/tasks/device-scan", query={"force": "true"})
    assert forced.status == 200, forced.body
    assert forced.body == {"task_id": "device-scan", "version": 1, "cancelled": [INSTANCE]}
    assert api.get("/tasks/device-scan").status == 404
    assert api.get("/tasks").body == []
    # the history stays
    assert api.get(f"/instances/{INSTANCE}").body["status"] == "cancelled"
    gone = api.call("DELETE", "/tasks/device-scan")
    assert gone.status == 404
    assert gone.body["message"] == "no task 'device-scan'"


def test_delete_a_parent_is_409_and_a_bad_id_is_400(
    api: Client, device_scan: dict[str, Any]
) -> None:
    child = {"id": "child", "handler": "noop", "trigger": {"after": ["device-scan"]}}
    assert api.put("/tasks/child", child).status == 200
    refused = api.call("DELETE", "/tasks/device-scan", query={"force": "true"})
    assert refused.status == 409
    assert "parent of child" in refused.body["message"]
    bad = api.call("DELETE", "/tasks/not%20an%20id")
    assert bad.status in (400, 404)
    assert api.call("DELETE", "/tasks/child").status == 200
    assert api.call("DELETE", "/tasks/device-scan").status == 200


@pytest.mark.moto
def test_delete_on_dynamodb(moto_api: Client) -> None:
    from tests.api.conftest import DEVICE_SCAN

    assert moto_api.put("/tasks/device-scan", DEVICE_SCAN).status == 200
    assert moto_api.post("/tasks/device-scan/runs").status == 200
    assert moto_api.call("DELETE", "/tasks/device-scan").status == 409
    forced = moto_api.call("DELETE", "/tasks/device-scan", query={"force": "true"})
    assert forced.status == 200 and forced.body["cancelled"] == [INSTANCE]
    assert moto_api.get("/tasks/device-scan").status == 404
    assert moto_api.get(f"/instances/{INSTANCE}").body["status"] == "cancelled"
