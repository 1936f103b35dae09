"""Tenant isolation on the real local runtime (`iotsched local up --manual-clock`, its worker
processes), as two tenants reach it through the port's tenants header. The API only: the CLI
sends no tenants header (on the local port it is the operator; its history and instances of a
task created again are tests/api/test_backfill_incarnation.py's).

Acme owns `a-keep` (an ended instance with shards and logs, and a submission still open) and
`x`, a `tenant_report` run by hand, by request id and by backfill; globex owns `b-own`. Globex's
every read and action on acme's objects answers as for a missing one (404), a write naming
acme is refused (403, or 400 for params and bounds), and nothing is written: the operator's
reads (tasks, versions, instances, audit, the data bucket) are the same before and after. Then
acme deletes `x` and globex creates its own: its history, audit, instances, request ids and
slots hold nothing of acme's, and its report lands under its own prefix only.
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

import boto3
import pytest

from iotsched.api.identity import LOCAL_TENANTS_HEADER
from iotsched.core.instance_record import incarnation_of
from tests.support import PATIENCE_S, TEST_BUCKETS, free_port, local_up_env, local_up_logged

pytestmark = [pytest.mark.slow, pytest.mark.moto]

A, B = "acme", "globex"
#: What acme's params and runs carry: none of it may reach globex.
A_SECRET, A_RUN_SECRET = "acme-dsn-s3cr3t", "acme-run-t0ken"
#: A business date both tenants backfill: its 06:00 slot is claimed by each incarnation of `x`.
DAY = "2026-11-20"
FINAL = {"succeeded", "failed", "timed_out", "cancelled", "skipped", "aborted"}


def keep_task() -> dict[str, Any]:
    """Acme's task that stays: two shards that log, its params holding a secret."""
    return {
        "id": "a-keep",
        "tenant": A,
        "handler": "noop",
        "trigger": {"rate": "1h"},
        "sharding": {"strategy": "static", "shards": [{"n": 0}, {"n": 1}]},
        "params": {"log": 2, "dsn": A_SECRET},
        "retry": {"max_attempts": 1},
        "timeout_s": 10,
    }


def report_task(tenant: str, **extra: Any) -> dict[str, Any]:
    """`x`: the built-in tenant report of `tenant` over one device range, merged into one
    object, daily at 06:00 UTC."""
    return {
        "id": "x",
        "tenant": tenant,
        "handler": "tenant_report",
        "reduce": "tenant_report_merge",
        "trigger": {"cron": "0 6 * * *"},
        "sharding": {
            "strategy": "static",
            "shards": [{"first_id": "dev-000000", "end_id": "dev-001000"}],
        },
        "retry": {"max_attempts": 1},
        "timeout_s": 10,
        **extra,
    }


def own_task() -> dict[str, Any]:
    return {
        "id": "b-own",
        "tenant": B,
        "handler": "noop",
        "trigger": {"rate": "1h"},
        "retry": {"max_attempts": 1},
        "timeout_s": 10,
    }


@dataclass(frozen=True)
class Answer:
    status: int
    body: Any


@dataclass(frozen=True)
class Up:
    """A running `local up`: its API, as the operator or as the tenants a request names."""

    url: str
    emulator: str

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        tenant: str | None = None,
        query: dict[str, str] | None = None,
    ) -> Answer:
        url = f"{self.url}/api{path}" + (f"?{urlencode(query)}" if query else "")
        headers = {"Accept": "application/json"}
        if tenant is not None:
            headers[LOCAL_TENANTS_HEADER] = tenant
        data = None
        if method != "GET":
            headers["Content-Type"] = "application/json"
            data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(url, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=60) as answer:
                status, raw = answer.status, answer.read()
        except urllib.error.HTTPError as refused:
            status, raw = refused.code, refused.read()
        return Answer(status, json.loads(raw) if raw else None)

    def ok(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        answer = self.call(method, path, body, **kw)
        assert answer.status == 200, (method, path, answer)
        return answer.body

    def ended(self, *instance_ids: str) -> dict[str, str]:
        """Wait until every instance is final (the operator's reads); their statuses."""
        deadline = time.monotonic() + PATIENCE_S
        statuses: dict[str, str] = {}
        while time.monotonic() < deadline:
            statuses = {
                i: self.ok("GET", f"/instances/{quote(i, safe='')}")["status"] for i in instance_ids
            }
            if set(statuses.values()) <= FINAL:
                break
            time.sleep(0.3)
        return statuses

    def objects(self) -> dict[str, str]:
        """The data bucket's objects (the attempts' logs aside): key to ETag."""
        s3 = boto3.client("s3", endpoint_url=self.emulator, region_name="us-east-1")
        bucket = next(b["Name"] for b in s3.list_buckets()["Buckets"] if "data" in b["Name"])
        listed = s3.list_objects_v2(Bucket=bucket).get("Contents", [])
        return {o["Key"]: o["ETag"] for o in listed if not o["Key"].startswith("logs/")}


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    aws_port, port = free_port(), free_port()
    env = local_up_env()
    log = tmp_path_factory.mktemp("isolation") / "local-up.log"
    # The test deployments' index buckets (tests.support): each is a query of every list.
    buckets = ("--param", f"IndexBuckets={TEST_BUCKETS}")
    with local_up_logged(log, aws_port=aws_port, port=port, env=env, args=buckets):
        yield Up(f"http://127.0.0.1:{port}", f"http://127.0.0.1:{aws_port}")


@dataclass(frozen=True)
class World:
    """What acme and globex hold once set up."""

    ran: str  # acme's ended instance of a-keep (shards, logs)
    waiting: str  # acme's submission of a-keep, still scheduled
    x_by_request: str  # acme's x, run with request id r1
    x_at_slot: str  # acme's x, run at the current minute's slot
    x_backfilled: str  # acme's x, backfilled at DAY's slot
    b_ran: str  # globex's own run, request id r1 too


@pytest.fixture(scope="module")
def world(up: Up) -> World:
    up.ok("PUT", "/tasks/a-keep", keep_task(), tenant=A)
    ran = up.ok("POST", "/tasks/a-keep/runs", {"request_id": "r1"}, tenant=A)
    waiting = up.ok(
        "POST", "/tasks/a-keep/submissions", {"delay": "2h", "request_id": "later"}, tenant=A
    )
    up.ok("PUT", "/tasks/x", report_task(A, params={"dsn": A_SECRET}), tenant=A)
    up.ok("PUT", "/tasks/x", report_task(A, params={"dsn": A_SECRET, "period": "daily"}), tenant=A)
    by_request = up.ok(
        "POST", "/tasks/x/runs", {"request_id": "r1", "params": {"t": A_RUN_SECRET}}, tenant=A
    )
    at_slot = up.ok("POST", "/tasks/x/runs", {}, tenant=A)
    backfill = up.ok("POST", "/tasks/x/backfills", {"from": DAY, "to": DAY}, tenant=A)
    assert list(backfill["results"].values()) == ["claimed"], backfill
    backfilled = next(iter(backfill["results"]))
    up.ok("PUT", "/tasks/b-own", own_task(), tenant=B)
    b_ran = up.ok("POST", "/tasks/b-own/runs", {"request_id": "r1"}, tenant=B)
    world = World(
        ran=ran["instance"]["instance_id"],
        waiting=waiting["instance_id"],
        x_by_request=by_request["instance"]["instance_id"],
        x_at_slot=at_slot["instance"]["instance_id"],
        x_backfilled=backfilled,
        b_ran=b_ran["instance"]["instance_id"],
    )
    ended = [world.ran, world.x_by_request, world.x_at_slot, world.x_backfilled, world.b_ran]
    assert set(up.ended(*ended).values()) == {"succeeded"}
    assert up.ok("GET", f"/instances/{quote(world.waiting, safe='')}")["status"] == "scheduled"
    return world


def snapshot(up: Up) -> dict[str, Any]:
    """Everything the operator reads of the tasks, their history, the instances and the
    data bucket: what an action refused must leave as it was."""
    tasks = up.ok("GET", "/tasks")
    return {
        "tasks": tasks,
        "shown": {t["id"]: up.ok("GET", f"/tasks/{t['id']}") for t in tasks},
        "versions": {t["id"]: up.ok("GET", f"/tasks/{t['id']}/versions") for t in tasks},
        "instances": {
            t["id"]: up.ok("GET", "/instances", query={"task_id": t["id"], "limit": "200"})
            for t in tasks
        },
        "audit": up.ok("GET", "/audit", query={"limit": "1000"}),
        "objects": up.objects(),
    }


#: Globex's reads and actions on one task and instance: (name, method, path, body, query).
ACTIONS: list[tuple[str, str, str, Any, dict[str, str] | None]] = [
    ("getTask", "GET", "/tasks/{task}", None, None),
    ("listTaskVersions", "GET", "/tasks/{task}/versions", None, None),
    ("listAuditOfTask", "GET", "/audit", None, {"task": "{task}"}),
    ("getInstance", "GET", "/instances/{instance}", None, None),
    ("listShards", "GET", "/instances/{instance}/shards", None, None),
    ("getShardLogs", "GET", "/instances/{instance}/shards/0/logs", None, None),
    ("rollbackTask", "POST", "/tasks/{task}/rollback", {"to": 1}, None),
    ("pauseTask", "POST", "/tasks/{task}/pause", {"note": "mine now"}, None),
    ("resumeTask", "POST", "/tasks/{task}/resume", None, None),
    ("runTask", "POST", "/tasks/{task}/runs", {"request_id": "r1"}, None),
    ("runTaskAtSlot", "POST", "/tasks/{task}/runs", None, None),
    ("submitRun", "POST", "/tasks/{task}/submissions", {"delay": "2h"}, None),
    ("backfillTask", "POST", "/tasks/{task}/backfills", {"from": DAY, "to": DAY}, None),
    ("cancelInstance", "POST", "/instances/{open}/cancel", {"reason": "mine now"}, None),
    ("rerunInstance", "POST", "/instances/{instance}/rerun", None, None),
    ("deleteTask", "DELETE", "/tasks/{task}", None, {"force": "true"}),
]


def send(
    up: Up,
    action: tuple[str, str, str, Any, dict[str, str] | None],
    task: str,
    ended: str,
    open_: str,
) -> Answer:
    _, method, path, body, query = action
    ids = {"task": task, "instance": quote(ended, safe=""), "open": quote(open_, safe="")}
    filled = {k: v.format(task=task) for k, v in (query or {}).items()} or None
    return up.call(method, path.format(**ids), body, tenant=B, query=filled)


def test_globex_on_acmes_objects_answers_as_for_missing_ones_and_writes_nothing(
    up: Up, world: World
) -> None:
    before = snapshot(up)
    ghost, ghost_instance = "ghost", world.ran.replace("a-keep", "ghost")
    for action in ACTIONS:
        answer = send(up, action, "a-keep", world.ran, world.waiting)
        missing = send(up, action, ghost, ghost_instance, ghost_instance)
        assert (answer.status, missing.status) == (404, 404), (action[0], answer, missing)
        message = str(missing.body["message"])
        for theirs, mine in ((ghost_instance, world.ran), (ghost, "a-keep")):
            message = message.replace(theirs, mine)
        expected = {**missing.body, "message": message}
        if action[0] == "cancelInstance":
            expected["message"] = expected["message"].replace(world.ran, world.waiting)
        assert answer.body == expected, action[0]
    # Creating or updating acme's id answers as a read of it does; writing acme is refused.
    as_read = up.call("GET", "/tasks/a-keep", tenant=B)
    for method, path, body in (
        ("PUT", "/tasks/a-keep", {**keep_task(), "tenant": B}),
        ("POST", "/tasks", {"tasks": [{**keep_task(), "tenant": B}]}),
    ):
        answer = up.call(method, path, body, tenant=B)
        assert (answer.status, answer.body) == (404, as_read.body), (method, path)
    for method, path, body in (
        ("PUT", "/tasks/b-new", {**own_task(), "id": "b-new", "tenant": A}),
        ("POST", "/tasks", {"tasks": [{**own_task(), "id": "b-new", "tenant": A}]}),
        ("PUT", "/tasks/b-own", {**own_task(), "tenant": A}),  # moving its own to acme
        ("PUT", "/tasks/a-keep", keep_task()),  # acme's own, as acme's
    ):
        answer = up.call(method, path, body, tenant=B)
        assert (answer.status, answer.body["error"]) == (403, "forbidden"), (path, answer)
    # Its own task pointed at acme's devices or reports: refused at apply and at each run.
    pointed = [
        {**own_task(), "id": "b-new", "params": {"tenant": A}},
        report_task(B, id="b-new", sharding={"strategy": "static", "shards": [{"tenant": A}]}),
    ]
    for task in pointed:
        answer = up.call("PUT", "/tasks/b-new", task, tenant=B)
        assert answer.status == 400 and A in answer.body["message"], answer
    for path, body in (
        ("/tasks/b-own/runs", {"params": {"tenant": A}}),
        ("/tasks/b-own/submissions", {"delay": "2h", "params": {"tenant": A}}),
    ):
        answer = up.call("POST", path, body, tenant=B)
        assert answer.status == 400 and A in answer.body["message"], (path, answer)
    assert snapshot(up) == before  # nothing was written, by any of it


def test_globexs_lists_and_views_hold_nothing_of_acmes(up: Up, world: World) -> None:
    seen: dict[str, Any] = {}
    for path, query in (
        ("/tasks", None),
        ("/tasks", {"tenant": A}),
        ("/instances", None),
        ("/instances", {"tenant": A}),
        ("/instances", {"task_id": "a-keep"}),
        ("/audit", None),
        ("/alerts", None),
        ("/overview", {"hours": "1"}),
        ("/tenants", None),
        ("/calendars", None),
        ("/handlers", None),
    ):
        answer = up.ok("GET", path, tenant=B, query=query)
        if query is None:
            seen[path] = answer
        text = json.dumps(answer)
        for word in (A, "a-keep", world.x_by_request, A_SECRET, A_RUN_SECRET):
            assert word not in text, (path, query, word)
    assert [t["id"] for t in seen["/tasks"]] == ["b-own"]
    assert [i["instance_id"] for i in seen["/instances"]] == [world.b_ran]
    assert [t["name"] for t in seen["/tenants"]] == [B]
    # The operator sees both, and acme its own.
    assert {"a-keep", "b-own"} <= {t["id"] for t in up.ok("GET", "/tasks")}
    held = {t["id"] for t in up.ok("GET", "/tasks", tenant=A)}
    assert "a-keep" in held and "b-own" not in held


@pytest.fixture(scope="module")
def reused(up: Up, world: World) -> dict[str, Any]:
    """Acme deletes `x` (v1, v2); globex creates its own `x` (v3: incarnation 3), runs it
    with acme's request id, at the same slot, and backfills the same business date."""
    assert up.call("DELETE", "/tasks/x", tenant=A, query={"force": "true"}).status == 200
    objects = up.objects()
    up.ok("PUT", "/tasks/x", report_task(B, params={"dsn": "globex-own"}), tenant=B)
    by_request = up.call("POST", "/tasks/x/runs", {"request_id": "r1"}, tenant=B)
    at_slot = up.call("POST", "/tasks/x/runs", {}, tenant=B)
    backfill = up.call("POST", "/tasks/x/backfills", {"from": DAY, "to": DAY}, tenant=B)
    return {
        "objects_before": objects,
        "by_request": by_request,
        "at_slot": at_slot,
        "backfill": backfill,
    }


def test_a_task_id_taken_again_shows_the_new_tenant_nothing_of_the_old(
    up: Up, world: World, reused: dict[str, Any]
) -> None:
    acmes = {world.x_by_request, world.x_at_slot, world.x_backfilled}
    # Acme's claims block none of globex's slots, and acme's request id binds nothing.
    for name in ("by_request", "at_slot"):
        answer = reused[name]
        assert answer.status == 200, (name, answer)
        assert answer.body["outcome"] == "claimed", (name, answer.body)
        instance = answer.body["instance"]
        assert instance["tenant"] == B and instance["instance_id"] not in acmes
        assert incarnation_of(instance["instance_id"]) == 3, instance["instance_id"]
    mine = reused["by_request"].body["instance"]["instance_id"]
    # (acme's run's minute, unless a minute turned between the two runs)
    assert re.fullmatch(r"x@\d{4}-\d\d-\d\dT\d\d:\d\dZ~v3~manual-r1", mine), mine
    again = up.ok("POST", "/tasks/x/runs", {"request_id": "r1"}, tenant=B)  # its own retry
    assert (again["outcome"], again["instance"]["instance_id"]) == ("exists", mine)
    backfill = reused["backfill"]
    assert backfill.status == 200, backfill
    assert list(backfill.body["results"].values()) == ["claimed"], backfill.body
    backfilled = next(iter(backfill.body["results"]))  # named by its instance id
    assert backfilled == f"{world.x_backfilled}~v3", backfill.body
    ours = {mine, reused["at_slot"].body["instance"]["instance_id"], backfilled}
    assert set(up.ended(*ours).values()) == {"succeeded"}

    # Its history: its versions only, none of acme's params; acme's versions not its to restore.
    versions = up.ok("GET", "/tasks/x/versions", tenant=B)
    assert [v["version"] for v in versions] == [3], versions
    assert A_SECRET not in json.dumps(versions)
    for to in (1, 2):
        unknown = up.call("POST", "/tasks/x/rollback", {"to": 99}, tenant=B)
        refused = up.call("POST", "/tasks/x/rollback", {"to": to}, tenant=B)
        assert refused.status == unknown.status == 404, (refused, unknown)
        assert refused.body["message"] == unknown.body["message"].replace("99", str(to))

    # Its audit trail: its records only; the operator's holds both tenants'.
    audit = up.ok("GET", "/audit", tenant=B, query={"task": "x"})
    assert {r["tenant"] for r in audit} == {B}, audit
    assert A_SECRET not in json.dumps(audit) and A_RUN_SECRET not in json.dumps(audit)
    every = up.ok("GET", "/audit", query={"task": "x"})
    assert sorted(r["verb"] for r in every if r["tenant"] == A) == [
        "apply",
        "apply",
        "backfill",
        "delete",
        "run",
        "run",
    ]
    # Acme still reads its own records of `x`, in the unfiltered trail, and none of globex's.
    acme_audit = up.ok("GET", "/audit", tenant=A)
    assert {r["tenant"] for r in acme_audit if r["subject"] == "x"} == {A}

    # Its instances: its own; acme's ids answer it as missing ones, and stay acme's.
    listed = up.ok("GET", "/instances", tenant=B, query={"task_id": "x"})
    assert {i["instance_id"] for i in listed} == ours
    assert {i["instance_id"] for i in up.ok("GET", "/instances", query={"task_id": "x"})} == ours
    assert up.ok("GET", "/tasks/x", tenant=B)["last_instance"]["instance_id"] in ours
    ghost = world.x_by_request.replace("x@", "ghost@")
    missing = up.call("GET", f"/instances/{quote(ghost, safe='')}", tenant=B)
    for instance_id in acmes:
        path = f"/instances/{quote(instance_id, safe='')}"
        seen = up.call("GET", path, tenant=B)
        assert seen.status == 404, (instance_id, seen)
        assert seen.body["message"] == missing.body["message"].replace(ghost, instance_id)
        assert up.call("GET", f"{path}/shards", tenant=B).status == 404
        assert up.ok("GET", path)["tenant"] == A  # the operator reads them by id
    # And acme, who held `x`, sees nothing of globex's.
    assert up.call("GET", "/tasks/x", tenant=A).status == 404
    assert up.ok("GET", "/instances", tenant=A, query={"task_id": "x"}) == []


def test_a_tenants_report_is_written_under_its_own_prefix_only(
    up: Up, world: World, reused: dict[str, Any]
) -> None:
    ours = [
        reused["by_request"].body["instance"]["instance_id"],
        reused["at_slot"].body["instance"]["instance_id"],
        next(iter(reused["backfill"].body["results"])),
    ]
    assert set(up.ended(*ours).values()) == {"succeeded"}
    before, after = reused["objects_before"], up.objects()
    assert before and all(key.startswith(f"reports/{A}/") for key in before), before
    written = {key: tag for key, tag in after.items() if key not in before}
    assert written and all(key.startswith(f"reports/{B}/") for key in written), written
    assert {key: after.get(key) for key in before} == before  # acme's reports untouched
    s3 = boto3.client("s3", endpoint_url=up.emulator, region_name="us-east-1")
    bucket = next(b["Name"] for b in s3.list_buckets()["Buckets"] if "data" in b["Name"])
    for key in written:
        report = json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
        assert (report["tenant"], report["task"]) == (B, "x"), report
