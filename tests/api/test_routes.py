"""Each route of the management API on the in-memory services: answers, and errors as 400/404/409."""

from __future__ import annotations

import contextlib
from datetime import timedelta
from typing import Any

import pytest

from iotsched.clock import ManualClock
from iotsched.core.instance_record import InstanceStatus
from iotsched.services.definitions.task_file import (
    TaskFileError,
    parse_task_file,
)
from iotsched.services.execution.batch import run_shard
from iotsched.services.execution.outcomes import (
    Delivery,
    RetryShardError,
)
from tests.api.conftest import DEVICE_SCAN, Client
from tests.support import T0

INSTANCE = "device-scan@2026-11-29T12:00Z"


def task(**changes: Any) -> dict[str, Any]:
    return {**DEVICE_SCAN, **changes}


def parse_problems(data: Any, api: Client) -> list[str]:
    """What `iotsched tasks apply` prints for `data`."""
    with pytest.raises(TaskFileError) as caught:
        parse_task_file(data, handlers=api.services.handlers)
    return caught.value.problems


def run_one_shard(api: Client, index: int) -> None:
    """Hand shard `index`'s message to a worker, as the event source mapping would."""
    queue = api.services.queue
    message = next(m for m in queue.sent if m.shard == index)  # type: ignore[attr-defined]
    # A failed attempt with attempts left raises, so that the message comes back.
    with contextlib.suppress(RetryShardError):
        run_shard(
            Delivery(body=message.model_dump_json(), receipt_handle=f"rh-{index}"),
            api.services,
            worker="worker-1",
        )


# -- tasks --------------------------------------------------------------------------------------


def test_apply_a_task_file_then_list_and_show(api: Client) -> None:
    first = api.post("/tasks", {"tasks": [DEVICE_SCAN, task(id="archive", trigger={"rate": "1d"})]})
    assert first.status == 200
    assert first.body == {
        "dry_run": False,
        "valid": ["device-scan", "archive"],
        "created": ["device-scan", "archive"],
        "updated": [],
        "unchanged": [],
        "calendars": [],
    }
    again = api.post("/tasks", {"tasks": [DEVICE_SCAN]})
    assert again.body["unchanged"] == ["device-scan"]

    listed = api.get("/tasks")
    assert listed.status == 200
    assert [t["id"] for t in listed.body] == ["archive", "device-scan"]
    assert listed.body[1]["next_fire"] == "2026-11-29T13:00:00.000Z"

    shown = api.get("/tasks/device-scan")
    assert shown.status == 200
    assert shown.body["version"] == 1
    assert shown.body["definition"]["sharding"]["shards"] == 3
    assert shown.body["definition"]["retry"] == {"max_attempts": 2, "backoff_s": 0}


def test_dry_run_validates_and_writes_nothing(api: Client) -> None:
    answer = api.call("POST", "/tasks", {"tasks": [DEVICE_SCAN]}, query={"dry_run": "true"})
    assert answer.status == 200
    assert answer.body["valid"] == ["device-scan"] and answer.body["created"] == []
    assert api.get("/tasks").body == []


def test_a_bad_task_file_is_400_with_the_cli_messages_and_writes_nothing(api: Client) -> None:
    bad = {
        "tasks": [
            DEVICE_SCAN,
            task(id="nightly", trigger={"cron": "0 10 * * ? *"}),
            task(id="typo", handler="inspect_ofline", shards=4),
        ]
    }
    answer = api.post("/tasks", bad)
    assert answer.status == 400
    assert answer.body["error"] == "bad_request"
    fields = [p["field"] for p in answer.problems]
    assert fields == ["task 'nightly': trigger.cron", "task 'typo': shards"]
    # The same lines `iotsched tasks apply` prints, split into field and message.
    lines = [f"{p['field']}: {p['message']}" for p in answer.problems]
    assert lines == parse_problems(bad, api)
    assert api.get("/tasks").body == []


def test_an_unknown_handler_is_reported_like_the_cli(api: Client) -> None:
    answer = api.post("/tasks", {"tasks": [task(handler="nope")]})
    assert answer.status == 400
    assert answer.problems == [
        {
            "field": "task 'device-scan': handler",
            "message": "unknown handler 'nope' (known: "
            + ", ".join(sorted(api.services.handlers))
            + ")",
        }
    ]


def test_a_body_that_is_no_task_file_is_400(api: Client) -> None:
    for body in ([DEVICE_SCAN], {"task": []}, "not json {"):
        answer = api.post("/tasks", body)
        assert answer.status == 400, body
        assert answer.problems, body
    assert api.post("/tasks", {"tasks": [DEVICE_SCAN, DEVICE_SCAN]}).problems == [
        {"field": "(file)", "message": "task id 'device-scan' appears twice"}
    ]


def test_put_creates_then_updates_a_task(api: Client) -> None:
    created = api.put("/tasks/device-scan", DEVICE_SCAN)
    assert created.status == 200
    assert created.body["change"] == "created"
    assert created.body["task"]["version"] == 1
    assert api.put("/tasks/device-scan", DEVICE_SCAN).body["change"] == "unchanged"
    updated = api.put(
        "/tasks/device-scan", task(trigger={"cron": "5 0 * * *", "timezone": "Europe/Berlin"})
    )
    assert updated.body["change"] == "updated"
    assert updated.body["task"]["version"] == 2
    assert updated.body["task"]["timezone"] == "Europe/Berlin"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (task(trigger={"cron": "61 * * * *"}), "task 'device-scan': trigger.cron"),
        (
            task(trigger={"cron": "* * * * *", "timezone": "Mars/Olympus"}),
            "task 'device-scan': trigger.timezone",
        ),
        (task(timeout_s=0), "task 'device-scan': timeout_s"),
        (task(colour="blue"), "task 'device-scan': colour"),
        (task(handler="nope"), "task 'device-scan': handler"),
        (task(trigger={"rate": "1h", "cron": "* * * * *"}), "task 'device-scan': trigger"),
        (
            task(window={"group_attribute": "maintenance_window"}),
            "task 'device-scan': window.group_attribute",
        ),
    ],
)
def test_put_reports_the_field_at_fault(api: Client, body: dict[str, Any], field: str) -> None:
    answer = api.put("/tasks/device-scan", body)
    assert answer.status == 400
    assert [p["field"] for p in answer.problems] == [field]
    assert [f"{p['field']}: {p['message']}" for p in answer.problems] == parse_problems(
        {"tasks": [body]}, api
    )
    assert api.get("/tasks/device-scan").status == 404


def test_values_past_the_schedulers_range_are_400(api: Client) -> None:
    # parse_rate overflows timedelta (OverflowError, not a TriggerError): still the input's fault.
    answer = api.put("/tasks/device-scan", task(trigger={"rate": "9999999999999999d"}))
    assert answer.status == 400, answer.body
    assert api.get("/tasks/device-scan").status == 404
    api.put("/tasks/device-scan", DEVICE_SCAN)
    too_late = api.post("/tasks/device-scan/submissions", {"delay": "9999999999999999d"})
    assert too_late.status == 400
    assert [p["field"] for p in too_late.problems] == ["body.delay"]


def test_put_needs_the_paths_id(api: Client) -> None:
    answer = api.put("/tasks/other", DEVICE_SCAN)
    assert answer.status == 400
    assert answer.problems == [{"field": "task 'device-scan': id", "message": "must be 'other'"}]


def test_an_after_trigger_needs_a_known_parent(api: Client) -> None:
    answer = api.put("/tasks/billing", task(id="billing", trigger={"after": ["nowhere"]}))
    assert answer.status == 400
    assert answer.problems == [
        {"field": "task 'billing': trigger.after", "message": "unknown parent 'nowhere'"}
    ]


def test_pause_and_resume_are_harmless_twice(api: Client, device_scan: dict[str, Any]) -> None:
    for _ in range(2):
        paused = api.post("/tasks/device-scan/pause")
        assert paused.status == 200 and paused.body["paused"] is True
    for _ in range(2):
        resumed = api.post("/tasks/device-scan/resume")
        assert resumed.status == 200 and resumed.body["paused"] is False


@pytest.mark.parametrize("verb", ["pause", "resume"])
def test_pausing_an_unknown_task_is_404(api: Client, verb: str) -> None:
    answer = api.post(f"/tasks/nowhere/{verb}")
    assert answer.status == 404
    assert answer.body == {"error": "not_found", "message": "no task 'nowhere'", "problems": []}


def test_an_id_that_cannot_be_a_task_is_400(api: Client) -> None:
    answer = api.get("/tasks/Not_A_Task")
    assert answer.status == 400
    assert [p["field"] for p in answer.problems] == ["path.task_id"]


# -- runs ---------------------------------------------------------------------------------------


def test_run_now_claims_the_current_minute_once(api: Client, device_scan: dict[str, Any]) -> None:
    first = api.post("/tasks/device-scan/runs")
    assert first.status == 200
    assert first.body["outcome"] == "claimed"
    instance = first.body["instance"]
    assert instance["instance_id"] == INSTANCE
    assert instance["trigger_kind"] == "manual"
    assert instance["status"] == "running"
    assert instance["shards"] == 3
    again = api.post("/tasks/device-scan/runs", {})
    assert again.body["outcome"] == "exists"
    assert again.body["instance"]["instance_id"] == INSTANCE


def test_a_request_id_makes_its_own_instance_once(api: Client, device_scan: dict[str, Any]) -> None:
    body = {"request_id": "ops-7", "business_date": "2026-11-01", "params": {"seconds": 0}}
    first = api.post("/tasks/device-scan/runs", body)
    assert first.body["outcome"] == "claimed"
    assert first.body["instance"]["instance_id"] == f"{INSTANCE}~manual-ops-7"
    assert first.body["instance"]["business_date"] == "2026-11-01"
    again = api.post("/tasks/device-scan/runs", body)
    assert again.body["outcome"] == "exists"
    assert again.body["instance"]["instance_id"] == first.body["instance"]["instance_id"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"request_id": "a b@c"}, "body.request_id"),
        ({"business_date": "2026-13-01"}, "body.business_date"),
        ({"business_date": "0001-01-01"}, "body.business_date"),
        ({"params": [1]}, "body.params"),
        ({"when": "now"}, "body.when"),
    ],
)
def test_a_bad_run_request_is_400(
    api: Client, device_scan: dict[str, Any], body: dict[str, Any], field: str
) -> None:
    answer = api.post("/tasks/device-scan/runs", body)
    assert answer.status == 400
    assert [p["field"] for p in answer.problems] == [field]


def test_running_an_unknown_task_is_404(api: Client) -> None:
    assert api.post("/tasks/nowhere/runs").status == 404


def test_submit_stores_a_scheduled_instance(api: Client, device_scan: dict[str, Any]) -> None:
    later = api.post("/tasks/device-scan/submissions", {"delay": "2h", "request_id": "s-1"})
    assert later.status == 200
    assert later.body["status"] == "scheduled"
    assert later.body["fire_at"] == "2026-11-29T14:00:00.000Z"
    assert later.body["instance_id"] == "device-scan@2026-11-29T14:00Z~submit-s-1"
    at = api.post("/tasks/device-scan/submissions", {"at": "2026-11-30T08:00:00+01:00"})
    assert at.body["fire_at"] == "2026-11-30T07:00:00.000Z"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "body"),
        ({"delay": "2h", "at": "2026-11-30T08:00:00Z"}, "body"),
        ({"delay": "soon"}, "body.delay"),
        ({"delay": "400d"}, "body.delay"),
        ({"at": "2031-01-01T00:00:00Z"}, "body.at"),
        ({"at": "2026-11-30T08:00:00"}, "body.at"),
    ],
)
def test_a_bad_submission_is_400(
    api: Client, device_scan: dict[str, Any], body: dict[str, Any], field: str
) -> None:
    answer = api.post("/tasks/device-scan/submissions", body)
    assert answer.status == 400, answer.body
    assert [p["field"] for p in answer.problems] == [field]


def test_backfill_dry_run_lists_slots_then_claims_them_once(
    api: Client, device_scan: dict[str, Any]
) -> None:
    body = {"from": "2026-11-01", "to": "2026-11-01", "dry_run": True}
    plan = api.post("/tasks/device-scan/backfills", body)
    assert plan.status == 200
    # hourly, business date previous_day: the 24 slots of 11-02 work on 11-01
    assert plan.body["slot_count"] == 24
    assert plan.body["slots"][0] == {
        "slot": "2026-11-02T00:00:00.000Z",
        "business_date": "2026-11-01",
        "data_interval_start": "2026-11-01T00:00:00.000Z",
        "data_interval_end": "2026-11-02T00:00:00.000Z",
    }
    assert plan.body["slots"][-1]["slot"] == "2026-11-02T23:00:00.000Z"
    assert {s["business_date"] for s in plan.body["slots"]} == {"2026-11-01"}
    assert plan.body["shards_per_instance"] == 3
    assert plan.body["results"] == {}
    assert api.get("/instances").body == []  # nothing written

    done = api.post("/tasks/device-scan/backfills", {**body, "dry_run": False})
    assert done.status == 200
    assert set(done.body["results"].values()) == {"claimed"}
    assert len(done.body["results"]) == 24
    again = api.post("/tasks/device-scan/backfills", {**body, "dry_run": False})
    assert set(again.body["results"].values()) == {"exists"}
    made = api.get("/instances", limit="100").body
    assert {i["trigger_kind"] for i in made} == {"backfill"}
    assert {i["business_date"] for i in made} == {"2026-11-01"}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"from": "2026-11-07", "to": "2026-11-01"}, "body"),
        ({"from": "2026-11-01", "to": "2026-12-31"}, "body.to"),  # 1464 slots: split it
        ({"from": "2026-11-01"}, "body.to"),
        ({"from": "yesterday", "to": "2026-11-01"}, "body.from"),
        ({"from": "0001-01-01", "to": "2026-11-02", "dry_run": True}, "body.from"),
    ],
)
def test_a_bad_backfill_is_400(
    api: Client, device_scan: dict[str, Any], body: dict[str, Any], field: str
) -> None:
    answer = api.post("/tasks/device-scan/backfills", body)
    assert answer.status == 400, answer.body
    assert [p["field"] for p in answer.problems] == [field]


# -- instances, shards, cancel ---------------------------------------------------------------------


def test_instances_by_task_and_status(api: Client, device_scan: dict[str, Any]) -> None:
    api.put("/tasks/archive", task(id="archive"))
    api.post("/tasks/device-scan/runs")
    api.post("/tasks/archive/runs")
    api.post("/instances/archive@2026-11-29T12:00Z/cancel")
    assert {i["task_id"] for i in api.get("/instances").body} == {"device-scan", "archive"}
    mine = api.get("/instances", task_id="device-scan").body
    assert [i["instance_id"] for i in mine] == [INSTANCE]
    cancelled = api.get("/instances", status="cancelled").body
    assert [i["instance_id"] for i in cancelled] == ["archive@2026-11-29T12:00Z"]
    assert api.get("/instances", task_id="archive", status="running").body == []
    one = api.get(f"/instances/{INSTANCE}")
    assert one.status == 200 and one.body["status"] == "running"


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"status": "done"}, "query.status"),
        ({"limit": "0"}, "query.limit"),
        ({"limit": "x"}, "query.limit"),
    ],
)
def test_bad_instance_queries_are_400(api: Client, query: dict[str, str], field: str) -> None:
    answer = api.get("/instances", **query)
    assert answer.status == 400
    assert [p["field"] for p in answer.problems] == [field]


def test_unknown_instances_are_404_and_malformed_ids_400(api: Client) -> None:
    for path in (f"/instances/{INSTANCE}", f"/instances/{INSTANCE}/shards"):
        assert api.get(path).status == 404
    assert api.post(f"/instances/{INSTANCE}/cancel").status == 404
    assert api.get("/instances/device-scan").status == 400


def test_shards_show_attempts_workers_and_outcomes(
    api: Client, device_scan: dict[str, Any], clock: ManualClock
) -> None:
    api.post("/tasks/device-scan/runs", {"params": {"fail": [1]}})
    run_one_shard(api, 0)
    run_one_shard(api, 1)  # fails; attempt 2 of 2 is left
    clock.advance(timedelta(seconds=1))
    page = api.get(f"/instances/{INSTANCE}/shards")
    assert page.status == 200
    assert page.body["total"] == 3 and page.body["next_start"] is None
    shards = page.body["shards"]
    assert [s["status"] for s in shards] == ["succeeded", "pending", "pending"]
    assert shards[0]["bounds"]["first_id"] == "dev-000000"
    assert shards[0]["attempts"][0]["worker"] == "worker-1"
    assert shards[0]["attempts"][0]["outcome"] == "succeeded"
    assert shards[1]["attempts"][0]["outcome"] == "failed"
    assert "noop asked to fail shard 1" in (shards[1]["attempts"][0]["error"] or "")
    assert shards[2]["attempts"] == []

    second = api.get(f"/instances/{INSTANCE}/shards", start="1", limit="1").body
    assert [s["index"] for s in second["shards"]] == [1]
    assert second["next_start"] == 2


def test_cancel_an_open_instance_then_409(api: Client, device_scan: dict[str, Any]) -> None:
    api.post("/tasks/device-scan/runs")
    cancelled = api.post(f"/instances/{INSTANCE}/cancel", {"reason": "wrong params"})
    assert cancelled.status == 200
    assert cancelled.body["status"] == InstanceStatus.CANCELLED.value
    assert cancelled.body["reason"] == "wrong params"
    shards = api.get(f"/instances/{INSTANCE}/shards").body["shards"]
    assert {s["status"] for s in shards} == {"cancelled"}
    again = api.post(f"/instances/{INSTANCE}/cancel")
    assert again.status == 409
    assert again.body["error"] == "conflict"
    assert "already ended (cancelled)" in again.body["message"]


def test_a_finished_instance_cannot_be_cancelled(api: Client, device_scan: dict[str, Any]) -> None:
    api.post("/tasks/device-scan/runs")
    for index in range(3):
        run_one_shard(api, index)
    assert api.get(f"/instances/{INSTANCE}").body["status"] == "succeeded"
    assert api.post(f"/instances/{INSTANCE}/cancel").status == 409


def test_rerun_the_failed_shards_of_an_ended_instance(
    api: Client, device_scan: dict[str, Any]
) -> None:
    api.post("/tasks/device-scan/runs", {"params": {"fail": [1]}})
    early = api.post(f"/instances/{INSTANCE}/rerun")
    assert early.status == 409  # the first run is still open
    for index in (0, 1, 2):
        run_one_shard(api, index)
    run_one_shard(api, 1)  # attempt 2 of 2 fails too: the shard and the instance end failed
    assert api.get(f"/instances/{INSTANCE}").body["status"] == "failed"

    rerun = api.post(f"/instances/{INSTANCE}/rerun", {"failed_only": True})
    assert rerun.status == 200, rerun.body
    assert rerun.body["instance_id"] == f"{INSTANCE}~run2"
    assert rerun.body["trigger_kind"] == "rerun"
    assert rerun.body["run"] == 2 and rerun.body["rerun_of"] == INSTANCE
    assert rerun.body["rerun_shards"] == [1]
    shards = api.get(f"/instances/{INSTANCE}~run2/shards").body["shards"]
    assert [s["status"] for s in shards] == ["not_rerun", "pending", "not_rerun"]
    assert api.post(f"/instances/{INSTANCE}~run2/rerun").status == 409  # run 2 is open


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"shard": 0, "failed_only": True}, 400),
        ({"shard": 7}, 400),
        ({"shard": -1}, 400),
        ({"failed_only": "yes"}, 400),
    ],
)
def test_a_bad_rerun_is_400(
    api: Client, device_scan: dict[str, Any], body: dict[str, Any], status: int
) -> None:
    api.post("/tasks/device-scan/runs")
    api.post(f"/instances/{INSTANCE}/cancel")
    answer = api.post(f"/instances/{INSTANCE}/rerun", body)
    assert answer.status == status, answer.body
    assert answer.body["error"] == "bad_request"


def test_rerunning_an_unknown_instance_is_404(api: Client) -> None:
    assert api.post(f"/instances/{INSTANCE}/rerun").status == 404


def test_recent_alerts_newest_first(api: Client) -> None:
    groups = {**DEVICE_SCAN, "sharding": {"strategy": "groups"}}  # no device directory here
    api.put("/tasks/device-scan", groups)
    failed = api.post("/tasks/device-scan/runs")
    assert failed.body["outcome"] == "failed"
    alerts = api.get("/alerts")
    assert alerts.status == 200
    assert [(a["type"], a["instance_id"]) for a in alerts.body] == [("instance_failed", INSTANCE)]
    assert api.get("/alerts", limit="0").status == 400


# -- routing ----------------------------------------------------------------------------------------


def test_unknown_routes_are_404_and_other_methods_405(api: Client) -> None:
    assert api.get("/nowhere").status == 404
    answer = api.call("PATCH", "/tasks/device-scan")
    assert answer.status == 405
    assert answer.headers["Allow"] == "DELETE, GET, PUT"
    assert api.call("PATCH", "/instances").headers["Allow"] == "GET"


@pytest.mark.parametrize(
    "content_type",
    ["application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "text/plain"],
)
@pytest.mark.filterwarnings("ignore:Received multipart/form-data:UserWarning")
def test_bodies_must_be_json(api: Client, content_type: str) -> None:
    for path in ("/tasks", "/tasks/device-scan/runs"):
        answer = api.call("POST", path, "tasks=1", headers={"Content-Type": content_type})
        assert answer.status == 415, (path, answer.body)
        assert answer.body["error"] == "unsupported_media_type"


def test_a_prefix_can_be_stripped_for_mounting(memory_services: Any) -> None:
    from iotsched.api.app import create_app

    mounted = Client(create_app(lambda: memory_services, strip_prefixes=["/api"]), memory_services)
    assert mounted.get("/api/tasks").status == 200
    assert mounted.get("/api/tasks/nowhere").status == 404


def test_the_clock_is_the_services_clock(
    api: Client, device_scan: dict[str, Any], clock: ManualClock
) -> None:
    clock.set(T0 + timedelta(hours=5, minutes=7))
    answer = api.post("/tasks/device-scan/runs")
    assert answer.body["instance"]["instance_id"] == "device-scan@2026-11-29T17:07Z"
