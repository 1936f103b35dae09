"""Named calendars over the API: `POST /tasks` with `calendars:` writes them before its tasks,
refuses a task naming an unknown one (400, nothing written), and `GET /calendars` lists them."""

from __future__ import annotations

from tests.api.conftest import DEVICE_SCAN, Client

HOLIDAYS = {"name": "holidays", "description": "public holidays", "dates": ["2026-12-25"]}
SCAN = {**DEVICE_SCAN, "exclude": {"calendars": ["holidays"]}}


def test_calendars_are_applied_with_a_task_file_and_listed(api: Client) -> None:
    assert api.get("/calendars").body == []
    refused = api.post("/tasks", {"tasks": [SCAN]})
    assert refused.status == 400
    assert "unknown calendar 'holidays'" in str(refused.body)
    assert api.get("/tasks").body == []

    applied = api.post("/tasks", {"calendars": [HOLIDAYS], "tasks": [SCAN]})

    assert applied.status == 200, applied.body
    assert (applied.body["created"], applied.body["calendars"]) == (["device-scan"], ["holidays"])
    assert api.get("/calendars").body == [HOLIDAYS]
    shown = api.get("/tasks/device-scan").body
    assert shown["excluded_dates"] == {"2026-12-25": "calendar:holidays"}
