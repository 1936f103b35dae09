"""What the console reads beside each task: the trigger in words, the next fires, the newest
instance's outcome."""

from __future__ import annotations

from typing import Any

from tests.api.conftest import DEVICE_SCAN, Client

INSTANCE = "device-scan@2026-11-29T12:00Z"


def test_tasks_carry_words_next_fires_and_the_last_outcome(api: Client) -> None:
    daily = {
        **DEVICE_SCAN,
        "id": "close",
        "trigger": {"cron": "5 0 * * *", "timezone": "Asia/Shanghai"},
    }
    assert api.post("/tasks", {"tasks": [DEVICE_SCAN, daily]}).status == 200
    listed = {t["id"]: t for t in api.get("/tasks").body}
    scan, close = listed["device-scan"], listed["close"]
    assert scan["trigger_text"] == "every hour"
    assert close["trigger_text"] == "every day at 00:05 (Asia/Shanghai)"
    # the clock is at T0 = 2026-11-29T12:00Z: the next hours, and 00:05 Shanghai = 16:05 UTC
    assert scan["next_fires"][:3] == [
        "2026-11-29T13:00:00.000Z",
        "2026-11-29T14:00:00.000Z",
        "2026-11-29T15:00:00.000Z",
    ]
    assert len(close["next_fires"]) == 5
    assert all(f.endswith("T16:05:00.000Z") for f in close["next_fires"])
    assert scan["last_instance"] is None

    api.post("/tasks/device-scan/runs", {"business_date": "2026-11-28"})
    last: dict[str, Any] = api.get("/tasks/device-scan").body["last_instance"]
    assert last == {
        "instance_id": INSTANCE,
        "status": "running",
        "trigger_kind": "manual",
        "business_date": "2026-11-28",
        "finished_at": None,
        "failed_shards": 0,
    }
    paused = api.post("/tasks/device-scan/pause").body
    assert paused["paused"] is True
    assert paused["next_fires"] == []  # a paused task fires nothing
    assert paused["last_instance"]["instance_id"] == INSTANCE
