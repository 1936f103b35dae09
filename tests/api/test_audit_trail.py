"""Every change verb of the API writes exactly one audit record naming the signed caller, the
verb, the task and instances, and the difference it made; on the in-memory services and on
the moto server's table. A state-changing route added without a case here fails the walk."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest

from iotsched.api.app import create_app
from iotsched.api.identity import IamIdentity
from iotsched.api.proxy import rest_event
from iotsched.clock import ManualClock
from iotsched.core.audit import AuditRecord, AuditState
from tests.api.conftest import DEVICE_SCAN, Client
from tests.support import T0

ARN = "arn:aws:sts::123456789012:assumed-role/ops/alice"
DAILY = {"id": "daily", "handler": "noop", "trigger": {"cron": "0 3 * * *", "timezone": "UTC"}}
HOLIDAYS = {"calendars": [{"name": "holidays", "dates": ["2026-12-25"]}], "tasks": [DAILY]}


@dataclass
class Signed:
    """Requests signed by `ARN`, as API Gateway passes them on under AWS_IAM."""

    api: Client

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        event = rest_event(method, path, body=body)
        event["requestContext"]["identity"]["userArn"] = ARN
        response = self.api.app.resolve(event, None)
        raw = response.get("body")
        return int(response["statusCode"]), json.loads(raw) if raw else None


def records(api: Client) -> list[AuditRecord]:
    """Every record so far (the clock starts at T0 and moves a second a case)."""
    return api.services.tasks.list_audit(since=T0, until=T0 + timedelta(hours=1))


@dataclass(frozen=True)
class Case:
    """One change through the API: its operation, request, and the record it must write."""

    operation: str
    method: str
    path: Callable[[dict[str, Any]], str]
    body: Any
    verb: str
    subject: str
    check: Callable[[AuditRecord, dict[str, Any], Any], None]


def _instances(rec: AuditRecord, seen: dict[str, Any], answer: Any) -> None:
    assert rec.instance_ids, rec


def _run(rec: AuditRecord, seen: dict[str, Any], answer: Any) -> None:
    seen["run"] = answer["instance"]["instance_id"]
    assert rec.instance_ids == [seen["run"]] and rec.diff == {"params": [None, {"n": 1}]}


CASES = [
    Case(
        "putTask",
        "PUT",
        lambda s: "/tasks/device-scan",
        DEVICE_SCAN,
        "apply",
        "device-scan",
        lambda r, s, a: (
            (r.version == 1 and r.diff["handler"] == [None, "noop"]) or pytest.fail(str(r))
        ),
    ),
    Case(
        "putTask",
        "PUT",
        lambda s: "/tasks/device-scan",
        {**DEVICE_SCAN, "description": "v2"},
        "apply",
        "device-scan",
        lambda r, s, a: (
            (r.version == 2 and r.diff == {"description": ["", "v2"]}) or pytest.fail(str(r.diff))
        ),
    ),
    Case(
        "applyTasks",
        "POST",
        lambda s: "/tasks",
        HOLIDAYS,
        "calendars",
        "calendar:holidays",
        lambda r, s, a: r.diff == {"dates": [None, ["2026-12-25"]]} or pytest.fail(str(r.diff)),
    ),
    Case(
        "pauseTask",
        "POST",
        lambda s: "/tasks/device-scan/pause",
        {"note": "recalled"},
        "pause",
        "device-scan",
        lambda r, s, a: (
            (r.note == "recalled" and r.diff["paused"] == [False, True]) or pytest.fail(str(r))
        ),
    ),
    Case(
        "resumeTask",
        "POST",
        lambda s: "/tasks/device-scan/resume",
        None,
        "resume",
        "device-scan",
        lambda r, s, a: (
            r.diff == {"paused": [True, False], "pause_note": ["recalled", None]}
            or pytest.fail(str(r.diff))
        ),
    ),
    Case(
        "runTask",
        "POST",
        lambda s: "/tasks/device-scan/runs",
        {"params": {"n": 1}},
        "run",
        "device-scan",
        _run,
    ),
    Case(
        "cancelInstance",
        "POST",
        lambda s: f"/instances/{s['run']}/cancel",
        {"reason": "wrong params"},
        "cancel",
        "device-scan",
        lambda r, s, a: (
            (r.instance_ids == [s["run"]] and r.note == "wrong params") or pytest.fail(str(r))
        ),
    ),
    Case(
        "rerunInstance",
        "POST",
        lambda s: f"/instances/{s['run']}/rerun",
        None,
        "rerun",
        "device-scan",
        lambda r, s, a: r.instance_ids == [a["instance_id"]] or pytest.fail(str(r)),
    ),
    Case(
        "submitRun",
        "POST",
        lambda s: "/tasks/device-scan/submissions",
        {"delay": "2h"},
        "submit",
        "device-scan",
        lambda r, s, a: r.instance_ids == [a["instance_id"]] or pytest.fail(str(r)),
    ),
    Case(
        "backfillTask",
        "POST",
        lambda s: "/tasks/daily/backfills",
        {"from": "2026-11-25", "to": "2026-11-26"},
        "backfill",
        "daily",
        lambda r, s, a: len(r.instance_ids) == 2 or pytest.fail(str(r)),
    ),
    Case(
        "rollbackTask",
        "POST",
        lambda s: "/tasks/device-scan/rollback",
        {"to": 1},
        "rollback",
        "device-scan",
        lambda r, s, a: (
            (r.version == 3 and r.diff == {"description": ["v2", ""]}) or pytest.fail(str(r.diff))
        ),
    ),
    Case(
        "deleteTask",
        "DELETE",
        lambda s: "/tasks/daily?force=true",
        None,
        "delete",
        "daily",
        lambda r, s, a: r.diff == {"version": [1, None]} or pytest.fail(str(r.diff)),
    ),
]


class OperatorTags:
    """IAM's tags: the `ops` role is an operator."""

    def role_tags(self, role_name: str) -> Mapping[str, str] | None:
        return {"iotsched:operator": "true"} if role_name == "ops" else None

    def user_tags(self, user_name: str) -> Mapping[str, str] | None:
        return None


def walk(unsigned: Client) -> None:
    """`unsigned`'s services behind the API as the Lambda serves it: callers by their IAM tags."""
    identify = IamIdentity(OperatorTags(), monotonic=time.monotonic)
    api = Client(create_app(lambda: unsigned.services, identify=identify), unsigned.services)
    signed = Signed(api)
    seen: dict[str, Any] = {}
    clock = api.services.clock
    assert isinstance(clock, ManualClock)
    for case in CASES:
        clock.advance(timedelta(seconds=1))  # records of one instant list in no set order
        before = {r.audit_id for r in records(api)}
        method, path = case.method, case.path(seen)
        if "?" in path:
            path, query = path.split("?")
            event = rest_event(method, path, query=dict([query.split("=")]))
            event["requestContext"]["identity"]["userArn"] = ARN
            response = api.app.resolve(event, None)
            status, answer = int(response["statusCode"]), json.loads(response["body"])
        else:
            status, answer = signed.call(method, path, case.body)
        assert status == 200, (case.operation, answer)
        new = [r for r in records(api) if r.audit_id not in before]
        if case.operation == "applyTasks":  # a calendar and a task: one record each
            assert sorted(r.subject for r in new) == ["calendar:holidays", "daily"], new
            new = [r for r in new if r.subject == case.subject]
        assert len(new) == 1, (case.operation, new)
        (rec,) = new
        assert (rec.actor, rec.verb.value, rec.subject) == (ARN, case.verb, case.subject)
        assert rec.state is AuditState.DONE, rec
        case.check(rec, seen, answer)
    # the API lists them by task, oldest first
    response = unsigned.app.resolve(
        rest_event("GET", "/audit", query={"task": "device-scan", "since": "2026-11-29"}), None
    )
    listed = json.loads(response["body"])
    assert [r["verb"] for r in listed] == [
        "apply",
        "apply",
        "pause",
        "resume",
        "run",
        "cancel",
        "rerun",
        "submit",
        "rollback",
    ]
    assert {r["actor"] for r in listed} == {ARN}
    # and the task's versions: who and what changed
    response = unsigned.app.resolve(rest_event("GET", "/tasks/device-scan/versions"), None)
    versions = json.loads(response["body"])
    assert [(v["version"], v["verb"], v["current"]) for v in versions] == [
        (1, "apply", False),
        (2, "apply", False),
        (3, "rollback", True),
    ]
    assert versions[2]["diff"] == {"description": ["v2", ""]}


def test_every_change_verb_writes_one_record_in_memory(api: Client) -> None:
    walk(api)


@pytest.mark.moto
def test_every_change_verb_writes_one_record_on_dynamodb(moto_api: Client) -> None:
    walk(moto_api)


def test_every_state_changing_route_has_its_case() -> None:
    """A route that changes state (any method but GET) without a case above fails here."""
    from iotsched.api.openapi import openapi_document

    document = openapi_document()
    changing = {
        op["operationId"]
        for ops in document["paths"].values()
        for method, op in ops.items()
        if method != "get"
    }
    assert changing == {c.operation for c in CASES}


def test_bad_audit_and_version_requests_answer_400_404_409(api: Client) -> None:
    assert api.get("/audit", since="yesterday").status == 400
    assert api.get("/audit", since="2026-11-29", until="2026-11-28").status == 400
    assert api.get("/audit", since="2020-01-01").status == 400  # over 366 days
    assert api.get("/tasks/nobody/versions").status == 404
    assert api.post("/tasks/nobody/rollback", {"to": 1}).status == 404
    assert api.put("/tasks/device-scan", DEVICE_SCAN).status == 200
    missing = api.post("/tasks/device-scan/rollback", {"to": 9})
    assert (missing.status, missing.body["message"]) == (404, "task device-scan has no version 9")
    assert api.post("/tasks/device-scan/rollback", {"to": 0}).status == 400
    assert api.post("/tasks/device-scan/rollback", {"version": 1}).status == 400
    # nothing of these was recorded: only the apply
    listed = api.get("/audit", since="2026-11-29")
    assert [r["verb"] for r in listed.body] == ["apply"]


def test_an_apply_over_a_newer_version_is_a_409(
    api: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert api.put("/tasks/device-scan", DEVICE_SCAN).status == 200
    stale = api.services.tasks.get_task("device-scan")
    # another apply lands between this one's read and its write
    assert api.put("/tasks/device-scan", {**DEVICE_SCAN, "description": "theirs"}).status == 200
    real_get = api.services.tasks.get_task
    monkeypatch.setattr(api.services.tasks, "get_task", lambda task_id: stale)
    answer = api.put("/tasks/device-scan", {**DEVICE_SCAN, "description": "mine"})
    monkeypatch.undo()
    assert answer.status == 409, answer.body
    assert "changed meanwhile" in answer.body["message"]
    stored = real_get("device-scan")
    assert stored is not None and stored.definition.description == "theirs"


def test_change_records_are_stamped_by_the_wall_clock_while_the_schedule_runs_on_its_own(
    memory_services: Any,
) -> None:
    # The local runtime under `--manual-clock`: the schedule is years ahead, the history is
    # stamped as the CLI stamps it (wall time), so records of both ways stay in order.
    import dataclasses
    from datetime import UTC, datetime

    wall = ManualClock(datetime(2026, 12, 7, 9, 30, tzinfo=UTC))
    services = dataclasses.replace(memory_services, wall_clock=wall)
    services.clock.set(datetime(2031, 3, 1, 12, 0, tzinfo=UTC))
    api = Client(create_app(lambda: services), services)
    signed = Signed(api)
    assert signed.call("PUT", "/tasks/daily", DAILY)[0] == 200
    changed = {**DAILY, "params": {"n": 2}}
    assert signed.call("PUT", "/tasks/daily", changed)[0] == 200
    assert signed.call("POST", "/tasks/daily/pause", {"note": "why"})[0] == 200
    assert signed.call("POST", "/tasks/daily/resume")[0] == 200
    assert signed.call("POST", "/tasks/daily/runs", {})[0] in (200, 201)
    assert signed.call("POST", "/tasks/daily/rollback", {"to": 1})[0] == 200
    stamped = services.tasks.list_audit(
        since=wall.now() - timedelta(minutes=1), until=wall.now() + timedelta(minutes=1)
    )
    assert sorted(r.verb.value for r in stamped) == sorted(
        ["apply", "apply", "pause", "resume", "run", "rollback"]
    )
    assert {v.at for v in services.tasks.task_versions("daily")} == {wall.now()}
    task = services.tasks.get_task("daily")
    assert task is not None and task.next_fire is not None
    assert task.next_fire > services.clock.now()  # the schedule's clock, not the wall's
    # The listing's default window ends at the wall clock's now, not the schedule's.
    listed = api.get("/audit", task="daily").body
    assert len(listed) == 6
