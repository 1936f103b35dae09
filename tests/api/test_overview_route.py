"""GET /overview on the in-memory services and on moto: the figures match the records written,
a tenant sees only its own, the queues' depths are the operators', the read is capped."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta
from typing import Any

import pytest

from iotsched import bootstrap
from iotsched.adapters.memory.queues import MemoryQueueGauge
from iotsched.api.app import create_app
from iotsched.api.identity import IamIdentity
from iotsched.clock import ManualClock
from iotsched.core.alert_message import Alert
from iotsched.core.instance_record import InstanceStatus
from iotsched.ports.messaging import QueueDepth
from iotsched.services.operations import overview as overview_service
from iotsched.services.wiring import Wiring
from tests.api.conftest import Client
from tests.api.test_tenant_scope import OPERATOR, TENANT_A, FakeTags, Signed
from tests.support import T0, instance

S = InstanceStatus
#: The clock in these tests: 20 minutes into T0's hour, so the window's last hour is T0's.
NOW = T0 + timedelta(minutes=20)


def record(
    services: Wiring,
    task_id: str,
    slot: datetime,
    status: InstanceStatus,
    seconds: float = 30.0,
    *,
    tenant: str | None = None,
) -> str:
    """An instance of `task_id` at `slot` claimed, then (if final) ended `seconds` later."""
    inst = instance(task_id, slot, tenant=tenant)
    assert services.instances.claim_instance(inst) is None
    if status is S.PLANNING:
        return inst.instance_id
    ended = services.instances.set_instance_status(
        inst.instance_id,
        expected=S.PLANNING,
        status=status,
        reason=None if status is S.SUCCEEDED else "shard 0 failed",
        finished_at=slot + timedelta(seconds=seconds),
    )
    assert ended
    return inst.instance_id


def missed(services: Wiring, task_id: str, fire: str, tenant: str | None = None) -> None:
    services.alerts.publish(
        Alert(
            type="missed_run",
            severity="high",
            task_id=task_id,
            tenant=tenant,
            instance_id=f"{task_id}@{fire}",
            status="missed",
            reason="not fired",
            alert_id=f"{task_id}@{fire}#missed_run",
        )
    )


def seed(services: Wiring) -> dict[str, list[str]]:
    """Two tenants' tasks over three hours of the last day, one instance eight days ago, one
    two days ago (in the week only), and missed runs."""
    hour = timedelta(hours=1)
    ids: dict[str, list[str]] = {"acme": [], "globex": []}
    for n, seconds in enumerate((10.0, 20.0, 30.0, 40.0)):
        ids["acme"].append(
            record(
                services,
                "meter",
                T0 - 2 * hour + n * timedelta(minutes=5),
                S.SUCCEEDED,
                seconds,
                tenant="acme",
            )
        )
    ids["acme"].append(record(services, "meter", T0 - hour, S.FAILED, 100.0, tenant="acme"))
    ids["acme"].append(record(services, "meter", T0, S.PLANNING, tenant="acme"))
    ids["globex"].append(record(services, "report", T0 - hour, S.SUCCEEDED, 5.0, tenant="globex"))
    ids["globex"].append(
        record(services, "report", T0 - timedelta(days=2), S.TIMED_OUT, 60.0, tenant="globex")
    )
    record(services, "report", T0 - timedelta(days=8), S.FAILED, tenant="globex")
    missed(services, "meter", "2026-11-29T11:30Z", "acme")
    missed(services, "report", "2026-11-29T11:45Z", "globex")
    return ids


def services_on(kind: str, request: pytest.FixtureRequest) -> Wiring:
    if kind == "memory":
        services: Wiring = request.getfixturevalue("memory_services")
        services = dataclasses.replace(
            services, gauge=MemoryQueueGauge([QueueDepth("normal", 3, 2, 1)])
        )
    else:
        resources = request.getfixturevalue("aws_resources")
        settings = dataclasses.replace(resources.settings, shard_dlq_url=resources.shard_dlq_url)
        services = bootstrap.build(
            settings, clock=request.getfixturevalue("clock"), clients=resources.clients()
        )
        sqs = resources.clients().sqs()
        for _ in range(3):
            sqs.send_message(QueueUrl=resources.shard_queue_url, MessageBody="{}")
        sqs.send_message(QueueUrl=resources.shard_dlq_url, MessageBody="{}")
    clock = services.clock
    assert isinstance(clock, ManualClock)
    clock.set(NOW)
    return services


def hour_of(body: dict[str, Any], at: datetime) -> dict[str, Any]:
    key = at.strftime("%Y-%m-%dT%H:00:00.000Z")
    return next(h for h in body["hourly"] if h["hour"] == key)


@pytest.mark.load
@pytest.mark.parametrize("kind", ["memory", pytest.param("moto", marks=pytest.mark.moto)])
def test_the_figures_match_the_records(kind: str, request: pytest.FixtureRequest) -> None:
    services = services_on(kind, request)
    seed(services)
    api = Client(create_app(lambda: services), services)
    day = api.get("/overview")
    assert day.status == 200, day.body
    body = day.body
    assert (body["hours"], body["start"], body["end"]) == (
        24,
        "2026-11-28T13:00:00.000Z",
        "2026-11-29T13:00:00.000Z",
    )
    assert len(body["hourly"]) == 24
    assert hour_of(body, T0 - timedelta(hours=2))["counts"] == {"succeeded": 4}
    assert hour_of(body, T0 - timedelta(hours=1))["counts"] == {"failed": 1, "succeeded": 1}
    assert hour_of(body, T0)["counts"] == {"planning": 1}
    assert sum(h["total"] for h in body["hourly"]) == body["instances"] == 7
    assert body["statuses"] == ["planning", "succeeded", "failed"]
    assert not body["capped"] and body["complete_from"] is None
    durations = {d["task_id"]: d for d in body["durations"]}
    assert (durations["meter"]["count"], durations["meter"]["p50_s"]) == (5, 30.0)
    assert (durations["meter"]["p95_s"], durations["meter"]["max_s"]) == (100.0, 100.0)
    assert (durations["report"]["count"], durations["report"]["p95_s"]) == (1, 5.0)
    assert [(f["task_id"], f["status"], f["failures"]) for f in body["failing"]] == [
        ("meter", "failed", 1)
    ]
    assert body["missed_runs"]["count"] == 2 and not body["missed_runs"]["capped"]
    assert {a["task_id"] for a in body["missed_runs"]["alerts"]} == {"meter", "report"}
    if kind == "memory":
        assert body["queues"] == [{"queue": "normal", "visible": 3, "in_flight": 2, "delayed": 1}]
    else:
        depths = {q["queue"]: q for q in body["queues"]}
        assert list(depths) == ["normal", "dead_letter"]
        assert (depths["normal"]["visible"], depths["dead_letter"]["visible"]) == (3, 1)

    week = api.get("/overview", hours="168").body
    assert len(week["hourly"]) == 168 and week["instances"] == 8  # two days ago, not eight
    assert hour_of(week, T0 - timedelta(days=2))["counts"] == {"timed_out": 1}
    assert [f["task_id"] for f in week["failing"]] == ["meter"]  # report recovered since


def test_a_tenant_sees_its_own_figures_and_no_queue(request: pytest.FixtureRequest) -> None:
    services = services_on("memory", request)
    seed(services)
    ticks = iter(range(1_000_000))
    identify = IamIdentity(FakeTags(), monotonic=lambda: float(next(ticks)))
    client = Client(create_app(lambda: services, identify=identify), services)
    acme = Signed(client, TENANT_A).call("GET", "/overview").body
    # every tenant's instances were read to count its own; it is told of its own only
    assert (acme["instances"], acme["read"]) == (6, 6)
    assert Signed(client, OPERATOR).call("GET", "/overview").body["read"] >= 7
    assert [d["task_id"] for d in acme["durations"]] == ["meter"]
    assert [a["task_id"] for a in acme["missed_runs"]["alerts"]] == ["meter"]
    assert acme["queues"] is None
    operator = Signed(client, OPERATOR)
    only_globex = operator.call("GET", "/overview", query={"tenant": "globex"}).body
    assert only_globex["instances"] == 1 and only_globex["failing"] == []
    assert only_globex["queues"] is not None  # the operator's, whatever the filter
    assert operator.call("GET", "/overview", query={"tenant": "-"}).body["instances"] == 0
    # another tenant's filter shows a tenant nothing
    assert (
        Signed(client, TENANT_A)
        .call("GET", "/overview", query={"tenant": "globex"})
        .body["instances"]
        == 0
    )


def test_the_read_is_capped_and_says_from_when_it_is_complete(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    services = services_on("memory", request)
    for n in range(6):
        record(services, "meter", T0 - timedelta(hours=n), S.SUCCEEDED)
    monkeypatch.setattr(overview_service, "PAGE", 3)
    capped = overview_service.overview(
        services, hours=24, keep=lambda t: True, operator=True, cap=4
    )
    assert (capped["read"], capped["capped"], capped["instances"]) == (4, True, 4)
    assert capped["complete_from"] == "2026-11-29T10:00:00.000Z"  # T0-3h read, its hour partial
    whole = overview_service.overview(
        services, hours=24, keep=lambda t: True, operator=True, cap=10
    )
    assert (whole["read"], whole["capped"], whole["instances"]) == (6, False, 6)


def test_hours_out_of_range_are_refused(api: Client) -> None:
    for hours in ("0", "169", "x"):
        answer = api.get("/overview", hours=hours)
        assert answer.status == 400, (hours, answer.body)
    assert api.get("/overview").body["hourly"][-1]["total"] == 0  # an empty window
