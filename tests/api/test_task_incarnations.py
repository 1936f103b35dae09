"""A task id's history does not outlive its tenant: tenant A applies, runs and deletes task `x`;
tenant B then applies its own `x`, and finds nothing of A's under it (versions, params, audit
records, instances, request ids, claims at the same slots), on the memory store and on moto's
table (the claims are conditional writes on the instance's key)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from iotsched.api.app import create_app
from iotsched.api.identity import IamIdentity
from iotsched.core.instance_record import incarnation_of
from iotsched.services.wiring import Wiring
from tests.api.conftest import Client
from tests.api.test_tenant_scope import (
    OPERATOR,
    TENANT_A,
    TENANT_B,
    FakeTags,
    Signed,
    task,
)

A_SECRET, A_RUN_SECRET = "acme-dsn-s3cr3t", "acme-run-token"


def signer(services: Wiring) -> Callable[[str], Signed]:
    ticks = iter(range(1_000_000))
    identify = IamIdentity(FakeTags(), monotonic=lambda: float(next(ticks)))
    client = Client(create_app(lambda: services, identify=identify), services)
    return lambda arn: Signed(client, arn)


def a_held_x_then_b_took_it(services: Wiring) -> tuple[Signed, Signed, Signed, dict[str, Any]]:
    """Acme's `x` (a secret in its params) applied twice, run with request id r1 and without
    one, then deleted with force; globex's `x` applied. Returns ops, A, B and A's instances."""
    as_ = signer(services)
    ops, a, b = as_(OPERATOR), as_(TENANT_A), as_(TENANT_B)
    mine = {**task("x", "acme"), "params": {"dsn": A_SECRET}}
    assert a.call("PUT", "/tasks/x", mine).status == 200
    assert a.call("PUT", "/tasks/x", {**mine, "timeout_s": 90}).status == 200
    by_request = a.call(
        "POST", "/tasks/x/runs", {"request_id": "r1", "params": {"t": A_RUN_SECRET}}
    )
    at_slot = a.call("POST", "/tasks/x/runs", {})
    assert (by_request.status, at_slot.status) == (200, 200), (by_request.body, at_slot.body)
    assert a.call("DELETE", "/tasks/x", query={"force": "true"}).status in (200, 204)
    theirs = {**task("x", "globex"), "params": {"dsn": "globex-own"}}
    assert b.call("PUT", "/tasks/x", theirs).status == 200
    instances = {
        "by_request": by_request.body["instance"]["instance_id"],
        "at_slot": at_slot.body["instance"]["instance_id"],
    }
    return ops, a, b, instances


@pytest.fixture(params=["memory", "moto"])
def services(request: pytest.FixtureRequest) -> Wiring:
    name = "memory_services" if request.param == "memory" else "moto_services"
    found: Wiring = request.getfixturevalue(name)
    return found


def test_a_task_ids_history_outlives_its_tenant_no_more(services: Wiring) -> None:
    ops, _a, b, a_instances = a_held_x_then_b_took_it(services)

    versions = b.call("GET", "/tasks/x/versions")
    assert versions.status == 200
    assert [v["version"] for v in versions.body] == [3], versions.body  # numbers go on
    assert A_SECRET not in json.dumps(versions.body)
    assert b.call("POST", "/tasks/x/rollback", {"to": 1}).status == 404  # not B's to restore

    audit = b.call("GET", "/audit", query={"task": "x"})
    assert audit.status == 200
    assert {r["tenant"] for r in audit.body} == {"globex"}, audit.body
    assert A_RUN_SECRET not in json.dumps(audit.body) and A_SECRET not in json.dumps(audit.body)
    every = ops.call("GET", "/audit", query={"task": "x"}).body  # the operator sees both
    assert {r["tenant"] for r in every} == {"acme", "globex"}
    assert sorted(r["verb"] for r in every if r["tenant"] == "acme") == [
        "apply",
        "apply",
        "delete",
        "run",
        "run",
    ]

    shown = b.call("GET", "/tasks/x")
    assert shown.status == 200 and shown.body["last_instance"] is None, shown.body
    assert b.call("GET", "/instances", query={"task_id": "x"}).body == []
    assert ops.call("GET", "/instances", query={"task_id": "x"}).body == []  # starts clean
    for instance_id in a_instances.values():  # A's stay A's: to B as missing ones
        assert b.call("GET", f"/instances/{instance_id}").status == 404
        assert ops.call("GET", f"/instances/{instance_id}").body["tenant"] == "acme"

    # A's request id binds nothing here, and A's claim at this minute's slot blocks nothing.
    again = b.call("POST", "/tasks/x/runs", {"request_id": "r1"})
    at_slot = b.call("POST", "/tasks/x/runs", {})
    for answer in (again, at_slot):
        assert answer.status == 200, answer.body
        assert answer.body["outcome"] != "exists", answer.body
        assert answer.body["instance"]["tenant"] == "globex"
        assert answer.body["instance"]["instance_id"] not in a_instances.values()
        assert incarnation_of(answer.body["instance"]["instance_id"]) == 3
    assert again.body["instance"]["instance_id"] == a_instances["by_request"].replace(
        "~manual-r1", "~v3~manual-r1"
    )
    retried = b.call("POST", "/tasks/x/runs", {"request_id": "r1"})  # B's own retry: the same
    assert retried.body["outcome"] == "exists"
    assert retried.body["instance"]["instance_id"] == again.body["instance"]["instance_id"]
    listed = b.call("GET", "/instances", query={"task_id": "x"}).body
    assert sorted(i["instance_id"] for i in listed) == sorted(
        answer.body["instance"]["instance_id"] for answer in (again, at_slot)
    )
    assert b.call("GET", "/tasks/x").body["last_instance"]["instance_id"] in {
        i["instance_id"] for i in listed
    }


def test_a_task_updated_keeps_its_incarnation_and_its_history(services: Wiring) -> None:
    as_ = signer(services)
    a = as_(TENANT_A)
    body = task("y", "acme")
    assert a.call("PUT", "/tasks/y", body).status == 200
    first = a.call("POST", "/tasks/y/runs", {"request_id": "r1"}).body["instance"]["instance_id"]
    assert a.call("PUT", "/tasks/y", {**body, "timeout_s": 90}).status == 200
    assert [v["version"] for v in a.call("GET", "/tasks/y/versions").body] == [1, 2]
    again = a.call("POST", "/tasks/y/runs", {"request_id": "r1"}).body
    assert (again["outcome"], again["instance"]["instance_id"]) == ("exists", first)
    assert incarnation_of(first) == 1 and "~v" not in first  # a first incarnation's ids as ever
    assert a.call("POST", "/tasks/y/rollback", {"to": 1}).status == 200


def test_a_rerun_of_a_request_run_of_a_task_created_again_is_reachable(services: Wiring) -> None:
    ops, _a, b, _ = a_held_x_then_b_took_it(services)
    run = b.call("POST", "/tasks/x/runs", {"request_id": "r9"}).body["instance"]["instance_id"]
    assert b.call("POST", f"/instances/{run}/cancel", {}).status == 200
    rerun = b.call("POST", f"/instances/{run}/rerun", {})
    assert rerun.status == 200, rerun.body
    rerun_id = rerun.body["instance_id"]
    assert rerun_id == run + "~run2" and incarnation_of(rerun_id) == 3
    assert b.call("GET", f"/instances/{rerun_id}").body["instance_id"] == rerun_id
    assert b.call("GET", f"/instances/{rerun_id}/shards").status == 200
    page = ops.call("GET", "/instances", query={"task_id": "x", "limit": "1"}).body
    after = ops.call("GET", "/instances", query={"task_id": "x", "before": page[-1]["instance_id"]})
    assert after.status == 200, after.body
    listed = [i["instance_id"] for i in page + after.body]
    assert sorted(listed) == sorted([run, rerun_id])


def test_records_from_before_audit_records_named_their_tenant_stay_their_tenants(
    services: Wiring,
) -> None:
    from iotsched.core.audit import AuditRecord, Verb
    from iotsched.core.timeutil import iso

    _ops, _a, b, _ = a_held_x_then_b_took_it(services)
    at = services.record_clock.now()
    legacy = [  # as written before records named their tenant: no `tenant` field at all
        AuditRecord(
            audit_id=f"{iso(at)}#legacy{v}",
            at=at,
            actor="old",
            verb=Verb.RUN,
            subject="x",
            version=v,
        )
        for v in (2, 3)
    ]
    assert not any(r.stamped for r in legacy)
    for record in legacy:
        services.tasks.record_audit(record)
    seen = {r["audit_id"] for r in b.call("GET", "/audit", query={"task": "x"}).body}
    # version 2 was acme's, version 3 is globex's
    assert {a for a in seen if "#legacy" in a} == {f"{iso(at)}#legacy3"}


def test_an_end_of_the_task_that_held_the_id_before_neither_pauses_nor_blocks_the_new_one(
    services: Wiring,
) -> None:
    from iotsched.core.instance_record import InstanceStatus
    from iotsched.services.fleet.pausing import pause_after_end
    from tests.support import instance

    _ops, _a, b, _ = a_held_x_then_b_took_it(services)
    # acme's instance, still open after acme's delete (a claim that raced it), then failing
    slot = services.clock.now() + timedelta(minutes=5)
    old = instance("x", slot, tenant="acme").model_copy(update={"task_version": 2})
    assert services.instances.claim_instance(old) is None
    ended = old.model_copy(update={"status": InstanceStatus.FAILED, "pause_on_failure": True})
    assert not pause_after_end(ended, services)
    assert b.call("GET", "/tasks/x").body["paused"] is False
    # globex's delete neither waits for acme's open instance nor cancels it
    assert b.call("DELETE", "/tasks/x").status in (200, 204)
    stored = services.instances.get_instance(old.instance_id)
    assert stored is not None and stored.status is InstanceStatus.PLANNING
