"""Every verb of `iotsched.client` against the real management API (the local port's app on
the in-memory services): each answer parses into its model and says what the API did."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from datetime import date, timedelta
from typing import Any, cast

import pytest

from iotsched.api.app import create_app
from iotsched.api.identity import local_identity
from iotsched.api.proxy import wsgi_app
from iotsched.client import BadRequestError, Client, ConflictError, NotFoundError
from iotsched.core.instance_record import InstanceStatus
from iotsched.local.control import API_PREFIX, ControlServer
from iotsched.local.runtime import LocalRuntime
from iotsched.services.wiring import Wiring
from tests.api.conftest import DEVICE_SCAN
from tests.api.test_local_port import FakeRuntime


@pytest.fixture
def api(memory_services: Wiring) -> Iterator[Client]:
    svc = dataclasses.replace(memory_services)
    app = wsgi_app(create_app(lambda: svc, identify=local_identity, strip_prefixes=[API_PREFIX]))
    server = ControlServer(cast("LocalRuntime", FakeRuntime()), 0, api=app)
    server.start()
    try:
        yield Client.local(f"http://127.0.0.1:{server.port}/api")
    finally:
        server.stop()


def _file(*tasks: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {"tasks": list(tasks), **more}


def test_tasks_apply_list_show_put_pause_resume_history_rollback(api: Client) -> None:
    acme = {**DEVICE_SCAN, "id": "acme-scan", "tenant": "acme"}
    assert api.apply(_file(DEVICE_SCAN, acme), dry_run=True).valid == ["device-scan", "acme-scan"]
    assert list(api.tasks()) == []  # a dry run wrote nothing
    applied = api.apply(_file(DEVICE_SCAN, acme))
    assert sorted(applied.created) == ["acme-scan", "device-scan"]
    assert [t.id for t in api.tasks(page_size=1)] == ["acme-scan", "device-scan"]
    assert [t.id for t in api.tasks(tenant="acme")] == ["acme-scan"]
    assert [t.id for t in api.tasks(after="acme-scan")] == ["device-scan"]
    # a tenant's caller (the local port's header) sees its own tasks only
    port = api.transport.base_url
    assert [t.id for t in Client.local(port, tenants=["acme"]).tasks()] == ["acme-scan"]

    detail = api.task("device-scan")
    assert detail.definition.sharding.strategy.value == "id_range"
    changed = api.put_task({**DEVICE_SCAN, "params": {"mode": "fast"}})
    assert (changed.change, changed.task.version) == ("updated", 2)
    assert api.put_task(changed.task.definition).change == "unchanged"

    paused = api.pause("device-scan", note="firmware recalled")
    assert (paused.paused, paused.pause_note) == (True, "firmware recalled")
    assert api.resume("device-scan").paused is False

    versions = api.history("device-scan")
    assert [v.version for v in versions] == [1, 2]
    assert versions[1].diff == {"params.mode": [None, "fast"]}
    rolled = api.rollback("device-scan", to=1)
    assert (rolled.changed, rolled.version) == (True, 3)
    assert api.task("device-scan").definition.params == {}

    with pytest.raises(BadRequestError) as bad:
        api.apply(_file({**DEVICE_SCAN, "trigger": {"cron": "not a cron"}}))
    assert [p.field for p in bad.value.problems] == ["task 'device-scan': trigger.cron"]
    with pytest.raises(NotFoundError):
        api.task("nope")


def test_runs_submissions_backfills_reruns_and_cancels(api: Client) -> None:
    api.apply(_file(DEVICE_SCAN))
    ran = api.run("device-scan", request_id="r-1", params={"mode": "slow"}, priority="high")
    assert ran.outcome == "claimed"
    assert ran.instance.trigger_kind == "manual" and ran.instance.priority == "high"
    assert api.run("device-scan", request_id="r-1").instance == ran.instance

    later = api.submit("device-scan", delay="2h", request_id="s-1")
    assert later.status == InstanceStatus.SCHEDULED and later.fire_at is not None
    cancelled = api.cancel(later.instance_id, reason="not needed")
    assert (cancelled.status, cancelled.reason) == ("cancelled", "not needed")
    with pytest.raises(ConflictError):
        api.cancel(later.instance_id)
    rerun = api.rerun(later.instance_id)
    assert (rerun.run, rerun.rerun_of) == (2, later.instance_id)

    day = date(2026, 11, 20)
    plan = api.backfill("device-scan", start=day, end=day, dry_run=True)
    assert plan.dry_run and plan.slot_count == 24 and plan.results == {}
    done = api.backfill("device-scan", start=day, end=day + timedelta(days=0))
    assert len(done.results) == 24 and set(done.results.values()) == {"claimed"}

    instance = api.instance(ran.instance.instance_id)
    assert instance.status in (InstanceStatus.QUEUED, InstanceStatus.RUNNING)
    page = api.shard_page(instance.instance_id, limit=2)
    assert (page.total, page.next_start, len(page.shards)) == (3, 2, 2)
    assert [s.index for s in api.shards(instance.instance_id, page_size=2)] == [0, 1, 2]
    assert [s.index for s in api.shards(instance.instance_id, start=1)] == [1, 2]
    log = api.logs(instance.instance_id, 0)
    assert (log.attempt, log.source, log.lines) == (None, "none", [])

    listed = list(api.instances("device-scan", page_size=7))
    assert len(listed) == 27  # the run, the submission and its rerun, 24 backfilled
    assert [i.instance_id for i in api.instances(status="cancelled")] == [later.instance_id]

    audit = api.audit(task="device-scan", since="2026-11-28", until="2026-12-01")
    # (all at the manual clock's one instant: in no particular order)
    assert {"apply", "run", "submit", "cancel", "rerun", "backfill"} <= {r.verb for r in audit}

    deleted = api.delete("device-scan", force=True)
    assert deleted.task_id == "device-scan" and ran.instance.instance_id in deleted.cancelled
    with pytest.raises(NotFoundError):
        api.delete("device-scan")


def test_overview_tenants_calendars_and_alerts(api: Client) -> None:
    api.apply(
        _file(
            {**DEVICE_SCAN, "tenant": "acme", "exclude": {"calendars": ["holidays"]}},
            calendars=[{"name": "holidays", "dates": ["2026-12-25"]}],
            tenants=[{"name": "acme", "quotas": {"max_tasks": 5}}],
        )
    )
    assert [(t.name, t.tasks, t.quotas) for t in api.tenants()] == [
        ("acme", ["device-scan"], {"max_tasks": 5})
    ]
    assert [(c.name, [str(d) for d in c.dates]) for c in api.calendars()] == [
        ("holidays", ["2026-12-25"])
    ]
    overview = api.overview(hours=2)
    assert overview.hours == 2 and len(overview.hourly) == 2 and overview.queues is not None
    assert api.alerts(limit=5) == []


def test_the_cli_through_the_api(api: Client) -> None:
    """`--api-url`: tenant filters, every shard's logs, `--follow` on an instance that ended
    before its shards started, the human forms, and bad input as exit 2."""
    from click.testing import CliRunner

    from iotsched.cli.main import cli

    api.apply(_file(DEVICE_SCAN, {**DEVICE_SCAN, "id": "acme-scan", "tenant": "acme"}))
    runner = CliRunner(env={"IOTSCHED_API_URL": api.transport.base_url, "AWS_ENDPOINT_URL": ""})

    def run(*args: str, code: int = 0) -> Any:
        result = runner.invoke(cli, list(args))
        assert result.exit_code == code, result.output
        return json.loads(result.output) if "--json" in args and code == 0 else result.output

    assert [t["id"] for t in run("tasks", "list", "--tenant", "-", "--json")] == ["device-scan"]
    assert [t["id"] for t in run("tasks", "list", "--limit", "1", "--json")] == ["acme-scan"]
    listed = run("tasks", "list", "--after", "acme-scan", "--json")
    assert [t["id"] for t in listed] == ["device-scan"]
    assert "device-scan" in run("tasks", "show", "device-scan")  # the human form

    started = run("run", "acme-scan", "--request-id", "r-1", "--json")
    assert started["tenant"] == "acme"
    acme = run("instances", "--tenant", "acme", "--json")
    assert [i["instance_id"] for i in acme] == [started["instance_id"]]
    assert run("instances", "--tenant", "-", "--json") == []
    assert run("logs", started["instance_id"], "--json") == []  # no shard has started
    assert "cancelled" in run("cancel", started["instance_id"])
    followed = run("logs", started["instance_id"], "--shard", "1", "--follow")
    assert "shard 1 never started" in followed
    shards = run("shards", started["instance_id"], "--json")
    assert [s["status"] for s in shards["shards"]] == ["cancelled"] * 3

    assert "--attempt needs --shard" in run(
        "logs", started["instance_id"], "--attempt", "1", code=2
    )
    assert "no task 'nope'" in run("run", "nope", code=2)
    assert "409 conflict" in run("cancel", started["instance_id"], code=1)
    bad = runner.invoke(cli, ["--api-url", "ftp://example.com/api", "instances"])
    assert bad.exit_code == 2 and "--api-url" in bad.output
