"""Tenant-scoped access: every route of the API, called by tenant B on tenant A's ids, answers
exactly as for a missing id (lists leave A's records out); the operator gets the normal answer.

The routes come from the resolver's own OpenAPI document, so a new route without a case here
fails `test_every_route_has_a_case`.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from iotsched.api.app import create_app
from iotsched.api.identity import IamIdentity
from iotsched.api.openapi import openapi_document
from iotsched.api.proxy import rest_event
from iotsched.services.wiring import Wiring
from tests.api.conftest import DEVICE_SCAN, Answer, Client

ACCOUNT = "123456789012"  # the account `rest_event` puts in the request context


def role_arn(role: str) -> str:
    return f"arn:aws:sts::{ACCOUNT}:assumed-role/{role}/session-1"


OPERATOR = role_arn("iotsched-operator")
TENANT_A = role_arn("acme-ops")
TENANT_B = role_arn("globex-ops")
NOBODY = role_arn("untagged")

ROLE_TAGS: dict[str, dict[str, str]] = {
    "iotsched-operator": {"iotsched:operator": "true"},
    "acme-ops": {"iotsched:tenants": "acme"},
    "globex-ops": {"iotsched:tenants": "globex initech"},
    "untagged": {"team": "x"},
}


@dataclass
class FakeTags:
    """IAM's tags, counting the reads."""

    roles: Mapping[str, Mapping[str, str]] = field(default_factory=lambda: ROLE_TAGS)
    users: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    reads: int = 0

    def role_tags(self, role_name: str) -> Mapping[str, str] | None:
        self.reads += 1
        return self.roles.get(role_name)

    def user_tags(self, user_name: str) -> Mapping[str, str] | None:
        self.reads += 1
        return self.users.get(user_name)


@dataclass
class Signed:
    """A client whose every request API Gateway signed for `arn`."""

    client: Client
    arn: str

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
    ) -> Answer:
        event = rest_event(method, path, body=body, query=query, headers=headers)
        event["requestContext"]["identity"]["userArn"] = self.arn or None
        response = self.client.app.resolve(event, None)
        raw = response.get("body")
        out = {k: ", ".join(v) for k, v in (response.get("multiValueHeaders") or {}).items()}
        return Answer(int(response["statusCode"]), json.loads(raw) if raw else None, out)


def task(task_id: str, tenant: str | None) -> dict[str, Any]:
    body = {**copy.deepcopy(DEVICE_SCAN), "id": task_id}
    if tenant is not None:
        body["tenant"] = tenant
    return body


A_TASK, B_TASK, NO_TENANT_TASK, MISSING_TASK = "acme-scan", "globex-scan", "shared-scan", "ghost"


@dataclass(frozen=True)
class World:
    services: Wiring
    tags: FakeTags
    client: Client
    a_instance: str
    b_instance: str
    missing_instance: str

    def as_(self, arn: str) -> Signed:
        return Signed(self.client, arn)


@pytest.fixture
def world(memory_services: Wiring) -> World:
    """Tasks of acme, globex and none, each with a run and a failed run's alert."""
    tags = FakeTags()
    ticks = iter(range(1_000_000))
    identify = IamIdentity(tags, monotonic=lambda: float(next(ticks)))
    client = Client(create_app(lambda: memory_services, identify=identify), memory_services)
    ops = Signed(client, OPERATOR)
    runs = {}
    for task_id, tenant in ((A_TASK, "acme"), (B_TASK, "globex"), (NO_TENANT_TASK, None)):
        assert ops.call("PUT", f"/tasks/{task_id}", task(task_id, tenant)).status == 200
        run = ops.call("POST", f"/tasks/{task_id}/runs", {"request_id": "r1"})
        assert run.status == 200, run.body
        runs[task_id] = run.body["instance"]["instance_id"]
        # A `groups` run fails without a device directory: an alert of the task's tenant.
        groups = {**task(task_id, tenant), "sharding": {"strategy": "groups"}}
        assert ops.call("PUT", f"/tasks/{task_id}", groups).status == 200
        failed = ops.call("POST", f"/tasks/{task_id}/runs", {"request_id": "r2"})
        assert failed.body["outcome"] == "failed", failed.body
        assert ops.call("PUT", f"/tasks/{task_id}", task(task_id, tenant)).status == 200
    return World(
        memory_services,
        tags,
        client,
        a_instance=runs[A_TASK],
        b_instance=runs[B_TASK],
        missing_instance=runs[A_TASK].replace(A_TASK, MISSING_TASK),
    )


@dataclass(frozen=True)
class Case:
    """One route: the request on a task and instance id, and what the operator gets."""

    method: str
    path: str  # with {task} and {instance}
    body: Callable[[str, str | None], Any] = lambda task_id, tenant: None
    query: dict[str, str] | None = None
    listing: str | None = None  # the field a list answer names its records by
    # The records of a list answer (the overview's are in several of its lists).
    records: Callable[[Any], list[dict[str, Any]]] = lambda body: list(body)
    # Creates a missing task: on another tenant's id it is the 404 a read of the id answers
    # (task ids are one namespace: a taken id cannot be created, and says no more).
    creates: bool = False
    operator_status: int = 200
    # Every admitted caller's, whatever tenants it holds: code, not a tenant's data.
    shared: bool = False

    def send(self, who: Signed, task_id: str, instance_id: str, tenant: str | None) -> Answer:
        path = self.path.format(task=task_id, instance=instance_id)
        query = {k: v.format(task=task_id) for k, v in (self.query or {}).items()} or None
        return who.call(self.method, path, self.body(task_id, tenant), query=query)


# By operation id, in the order they run (destructive ones last).
CASES: dict[str, Case] = {
    "listTasks": Case("GET", "/tasks", listing="id"),
    "getTask": Case("GET", "/tasks/{task}"),
    "listInstances": Case("GET", "/instances", query={"task_id": "{task}"}, listing="task_id"),
    "getInstance": Case("GET", "/instances/{instance}"),
    "listShards": Case("GET", "/instances/{instance}/shards"),
    "getShardLogs": Case("GET", "/instances/{instance}/shards/0/logs"),
    "listAlerts": Case("GET", "/alerts", listing="task_id"),
    "listCalendars": Case("GET", "/calendars", listing="name"),
    "listHandlers": Case("GET", "/handlers", listing="name"),
    "getHandler": Case("GET", "/handlers/noop", shared=True),
    "listTenants": Case("GET", "/tenants", listing="name"),
    "listTaskVersions": Case("GET", "/tasks/{task}/versions"),
    "listAudit": Case("GET", "/audit", listing="subject"),
    "getOverview": Case(
        "GET",
        "/overview",
        listing="task_id",
        records=lambda body: [
            *body["durations"],
            *body["failing"],
            *body["missed_runs"]["alerts"],
        ],
    ),
    "rollbackTask": Case("POST", "/tasks/{task}/rollback", body=lambda t, _: {"to": 1}),
    "applyTasks": Case(
        "POST", "/tasks", body=lambda t, tenant: {"tasks": [task(t, tenant)]}, creates=True
    ),
    "putTask": Case("PUT", "/tasks/{task}", body=task, creates=True),
    "pauseTask": Case("POST", "/tasks/{task}/pause", body=lambda t, _: {"note": "mine now"}),
    "resumeTask": Case("POST", "/tasks/{task}/resume"),
    "runTask": Case("POST", "/tasks/{task}/runs", body=lambda t, _: {"request_id": "r9"}),
    "submitRun": Case("POST", "/tasks/{task}/submissions", body=lambda t, _: {"delay": "2h"}),
    "backfillTask": Case(
        "POST",
        "/tasks/{task}/backfills",
        body=lambda t, _: {"from": "2026-11-27", "to": "2026-11-27"},
    ),
    "cancelInstance": Case("POST", "/instances/{instance}/cancel"),
    "rerunInstance": Case("POST", "/instances/{instance}/rerun"),
    "deleteTask": Case("DELETE", "/tasks/{task}", query={"force": "true"}),
}


def operations() -> set[tuple[str, str, str]]:
    """(operation id, method, path) of every route, from the resolver's own document."""
    return {
        (op["operationId"], method.upper(), path)
        for path, ops in openapi_document()["paths"].items()
        for method, op in ops.items()
    }


def as_template(path: str) -> str:
    path = path.replace("{task_id}", "{task}").replace("{instance_id}", "{instance}")
    path = path.replace("{name}", "noop")  # the handler case names a built-in
    return path.replace("{shard}", "0")  # the cases name shard 0


def test_every_route_has_a_case() -> None:
    routes = {(op, method, as_template(path)) for op, method, path in operations()}
    cases = {(op, case.method, case.path) for op, case in CASES.items()}
    assert routes == cases, "a route without a tenant-scope case (or a case without a route)"


def test_another_tenants_ids_answer_as_missing_ones(world: World) -> None:
    b = world.as_(TENANT_B)
    before = world.as_(OPERATOR).call("GET", f"/tasks/{A_TASK}").body
    a_instances = world.as_(OPERATOR).call("GET", "/instances", query={"task_id": A_TASK}).body
    for op, case in CASES.items():
        answer = case.send(b, A_TASK, world.a_instance, "globex")
        if case.listing is not None:
            assert answer.status == 200, (op, answer.body)
            names = {item[case.listing] for item in case.records(answer.body)}
            assert A_TASK not in names and NO_TENANT_TASK not in names, (op, names)
            continue
        if case.shared:
            assert answer.status == 200, (op, answer.body)
            assert answer.body == case.send(world.as_(OPERATOR), A_TASK, "", None).body, op
            continue
        if case.creates:
            assert answer.status == 404, (op, answer.body)
            assert answer.body == b.call("GET", f"/tasks/{A_TASK}").body, op
            continue
        missing = case.send(b, MISSING_TASK, world.missing_instance, "globex")
        assert (answer.status, missing.status) == (404, 404), (op, answer.body, missing.body)
        assert answer.body == {
            **missing.body,
            "message": missing.body["message"]
            .replace(world.missing_instance, world.a_instance)
            .replace(MISSING_TASK, A_TASK),
        }, op
    # B's attempts changed nothing of A's.
    ops = world.as_(OPERATOR)
    assert ops.call("GET", f"/tasks/{A_TASK}").body == before
    assert ops.call("GET", "/instances", query={"task_id": A_TASK}).body == a_instances


def test_a_tenants_lists_show_its_own_records(world: World) -> None:
    b = world.as_(TENANT_B)
    assert [t["id"] for t in b.call("GET", "/tasks").body] == [B_TASK]
    assert {i["tenant"] for i in b.call("GET", "/instances").body} == {"globex"}
    assert {a["task_id"] for a in b.call("GET", "/alerts").body} == {B_TASK}
    assert b.call("GET", "/tasks", query={"tenant": "acme"}).body == []
    assert b.call("GET", f"/instances/{world.b_instance}").status == 200


def test_the_operator_gets_every_routes_normal_answer(world: World) -> None:
    ops = world.as_(OPERATOR)
    for op, case in CASES.items():
        answer = case.send(ops, A_TASK, world.a_instance, "acme")
        assert answer.status == case.operator_status, (op, answer.body)
        if case.listing in ("id", "task_id"):
            assert A_TASK in {item[case.listing] for item in case.records(answer.body)}, op
    listed = {t["id"] for t in ops.call("GET", "/tasks").body}
    assert listed == {B_TASK, NO_TENANT_TASK}  # acme-scan was deleted last
    assert [t["id"] for t in ops.call("GET", "/tasks", query={"tenant": "globex"}).body] == [B_TASK]


def test_a_task_without_a_tenant_is_the_operators(world: World) -> None:
    for arn in (TENANT_A, TENANT_B):
        who = world.as_(arn)
        assert who.call("GET", f"/tasks/{NO_TENANT_TASK}").status == 404
        refused = who.call("PUT", "/tasks/new-task", task("new-task", None))
        assert refused.status == 403, refused.body
        assert refused.body["error"] == "forbidden"
    assert world.as_(OPERATOR).call("GET", f"/tasks/{NO_TENANT_TASK}").status == 200


def test_writing_a_tenant_the_caller_does_not_hold_is_refused(world: World) -> None:
    b = world.as_(TENANT_B)
    for send in (
        lambda: b.call("PUT", "/tasks/new-task", task("new-task", "acme")),
        lambda: b.call("POST", "/tasks", {"tasks": [task("new-task", "acme")]}),
        lambda: b.call(
            "POST", "/tasks", {"tasks": [task("new-task", "globex"), task("other", "acme")]}
        ),
        # moving its own task to another tenant
        lambda: b.call("PUT", f"/tasks/{B_TASK}", task(B_TASK, "acme")),
        # calendars are every tenant's: only operators write them
        lambda: b.call(
            "POST",
            "/tasks",
            {"tasks": [], "calendars": [{"name": "holidays", "dates": ["2026-12-25"]}]},
        ),
    ):
        refused = send()
        assert refused.status == 403, refused.body
        assert refused.body["error"] == "forbidden"
    ops = world.as_(OPERATOR)
    assert ops.call("GET", "/tasks/new-task").status == 404  # nothing half-written
    assert ops.call("GET", f"/tasks/{B_TASK}").body["tenant"] == "globex"
    assert ops.call("GET", "/calendars").body == []
    # Its own tenants are fine (a caller may hold several).
    assert b.call("PUT", "/tasks/new-task", task("new-task", "initech")).status == 200
    assert b.call("POST", "/tasks", {"tasks": [task("other", "globex")]}).status == 200


@pytest.mark.parametrize("arn", [NOBODY, role_arn("no-such-role"), None])
def test_a_caller_holding_no_tenant_is_refused_everything(world: World, arn: str | None) -> None:
    who = world.as_(arn) if arn else Signed(world.client, "")
    for op, case in CASES.items():
        answer = case.send(who, A_TASK, world.a_instance, "acme")
        assert answer.status == 403, (op, answer.body)
        assert answer.body["error"] == "forbidden"
    assert world.as_(OPERATOR).call("GET", f"/tasks/{A_TASK}").body["paused"] is False


def test_forged_headers_are_ignored(world: World) -> None:
    b = world.as_(TENANT_B)
    forged = {
        "X-Iotsched-Tenants": "acme",
        "X-Iotsched-Local-Tenants": "acme",
        "X-Iotsched-Operator": "true",
        "iotsched:tenants": "acme",
        "X-Amz-User-Arn": OPERATOR,
        "X-Forwarded-User": OPERATOR,
    }
    answer = b.call("GET", f"/tasks/{A_TASK}", headers=forged)
    assert answer.status == 404
    listed = b.call("GET", "/tasks", headers=forged).body
    assert [t["id"] for t in listed] == [B_TASK]
    nobody = world.as_(NOBODY)
    assert nobody.call("GET", "/tasks", headers=forged).status == 403


class CountingStore:
    """A store whose every method call is counted, by name."""

    def __init__(self, inner: Any, calls: list[str]) -> None:
        self._inner = inner
        self._calls = calls

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._inner, name)
        if not callable(value):
            return value

        def counted(*args: Any, **kwargs: Any) -> Any:
            self._calls.append(name)
            return value(*args, **kwargs)

        return counted


def test_another_tenants_id_costs_what_a_missing_one_does(world: World) -> None:
    """The same store requests, in the same order: nothing tells the two apart."""
    calls: list[str] = []
    svc = dataclasses.replace(
        world.services,
        tasks=cast("Any", CountingStore(world.services.tasks, calls)),
        instances=cast("Any", CountingStore(world.services.instances, calls)),
    )
    identify = IamIdentity(FakeTags(), monotonic=lambda: 0.0)
    b = Signed(Client(create_app(lambda: svc, identify=identify), svc), TENANT_B)
    for op, case in CASES.items():
        if case.listing is not None or case.creates or case.shared:
            continue
        calls.clear()
        assert case.send(b, A_TASK, world.a_instance, "globex").status == 404, op
        for_a = list(calls)
        calls.clear()
        assert case.send(b, MISSING_TASK, world.missing_instance, "globex").status == 404, op
        assert for_a == calls and len(calls) == 1, (op, for_a, calls)


def test_a_parent_of_another_tenant_is_an_unknown_parent(world: World) -> None:
    b = world.as_(TENANT_B)

    def child(parent: str, task_id: str = "child") -> dict[str, Any]:
        return {**task(task_id, "globex"), "trigger": {"after": [parent]}}

    theirs = b.call("PUT", "/tasks/child", child(A_TASK))
    missing = b.call("PUT", "/tasks/child", child(MISSING_TASK))
    assert (theirs.status, missing.status) == (400, 400), (theirs.body, missing.body)
    assert theirs.body == {
        **missing.body,
        "message": missing.body["message"].replace(MISSING_TASK, A_TASK),
        "problems": [
            {**p, "message": p["message"].replace(MISSING_TASK, A_TASK)} for p in missing.problems
        ],
    }
    assert world.as_(OPERATOR).call("GET", "/tasks/child").status == 404
    assert b.call("PUT", "/tasks/child", child(B_TASK)).status == 200  # its own
    assert (
        world.as_(OPERATOR).call("PUT", "/tasks/op-child", child(A_TASK, "op-child")).status == 200
    )  # operators link any tenants


def test_quotas_are_the_operators_and_max_tasks_answers_409(world: World) -> None:
    quotas = {"name": "globex", "quotas": {"max_tasks": 1000}}
    b = world.as_(TENANT_B)
    refused = b.call("POST", "/tasks", {"tenants": [quotas], "tasks": [task("x", "globex")]})
    assert refused.status == 403 and refused.body["error"] == "forbidden", refused.body
    assert "quotas" in refused.body["message"]
    ops = world.as_(OPERATOR)
    assert ops.call("GET", "/tasks/x").status == 404  # nothing written
    # globex holds one task already: a quota of 2 lets one more in, not two.
    capped = {"tenants": [{"name": "globex", "quotas": {"max_tasks": 2}}]}
    over = ops.call(
        "POST", "/tasks", {**capped, "tasks": [task("x", "globex"), task("y", "globex")]}
    )
    assert over.status == 409 and over.body["error"] == "conflict", over.body
    assert "max_tasks (2)" in over.body["message"]
    assert ops.call("GET", "/tasks/x").status == 404
    assert ops.call("POST", "/tasks", {**capped, "tasks": [task("x", "globex")]}).status == 200
    # The tenant's own caller, with no quotas in its file, meets the stored quota.
    again = b.call("PUT", "/tasks/y", task("y", "globex"))
    assert again.status == 409 and again.body["error"] == "conflict", again.body


def test_a_caller_lists_only_the_tenants_it_holds(world: World) -> None:
    ops = world.as_(OPERATOR)
    capped = {"tenants": [{"name": "acme", "quotas": {"max_concurrent_shards": 3}}]}
    assert ops.call("POST", "/tasks", {**capped, "tasks": [task(A_TASK, "acme")]}).status == 200
    assert [t["name"] for t in ops.call("GET", "/tenants").body] == ["acme", "globex"]
    (acme,) = world.as_(TENANT_A).call("GET", "/tenants").body
    assert acme["name"] == "acme" and A_TASK in acme["tasks"]
    assert acme["quotas"] == {"max_concurrent_shards": 3} and acme["task_count"] is None
    assert [t["name"] for t in world.as_(TENANT_B).call("GET", "/tenants").body] == ["globex"]
