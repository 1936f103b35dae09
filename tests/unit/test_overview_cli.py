"""`iotsched overview`: the API's figures in a terminal and with --json; bad hours exit 2."""

from __future__ import annotations

import dataclasses
import json
from datetime import timedelta

from click.testing import CliRunner

from iotsched import bootstrap
from iotsched.adapters.memory.queues import MemoryQueueGauge
from iotsched.cli.main import cli
from iotsched.clock import ManualClock
from iotsched.core.instance_record import InstanceStatus
from iotsched.ports.messaging import QueueDepth
from iotsched.services.wiring import Wiring
from tests.support import T0, instance

S = InstanceStatus


def seeded() -> Wiring:
    services = dataclasses.replace(
        bootstrap.build_memory(clock=ManualClock(T0 + timedelta(minutes=30))),
        gauge=MemoryQueueGauge([QueueDepth("normal", 7, 1, 0), QueueDepth("dead_letter", 2, 0, 0)]),
    )
    for n, (task, status, tenant) in enumerate(
        [("meter", S.SUCCEEDED, "acme"), ("meter", S.FAILED, "acme"), ("report", S.FAILED, None)]
    ):
        inst = instance(task, T0 - timedelta(hours=n), tenant=tenant)
        assert services.instances.claim_instance(inst) is None
        assert services.instances.set_instance_status(
            inst.instance_id,
            expected=S.PLANNING,
            status=status,
            reason=None if status is S.SUCCEEDED else "shard 0 failed",
            finished_at=inst.slot + timedelta(seconds=12),
        )
    return services


def run(services: Wiring, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(
        cli, ["overview", *args], obj={"services": services}, env={"COLUMNS": "200"}
    )
    return result.exit_code, result.output


def test_json_is_the_routes_answer() -> None:
    services = seeded()
    code, output = run(services, "--json")
    assert code == 0, output
    data = json.loads(output)
    assert data["instances"] == 3 and len(data["hourly"]) == 24
    assert [f["task_id"] for f in data["failing"]] == ["report"]  # meter's latest succeeded
    assert data["queues"][1] == {"queue": "dead_letter", "visible": 2, "in_flight": 0, "delayed": 0}
    code, output = run(services, "--json", "--tenant", "acme", "--hours", "168")
    only = json.loads(output)
    assert (only["hours"], only["instances"], only["failing"]) == (168, 2, [])
    assert json.loads(run(services, "--json", "--tenant", "-")[1])["instances"] == 1


def test_the_table_names_the_busy_hours_the_failing_tasks_and_the_queues() -> None:
    code, output = run(seeded())
    assert code == 0, output
    assert "last 24 h" in output and "3 instances" in output
    assert "2026-11-29 12:00      1  1 succeeded" in output
    assert "2026-11-29 10:00      1  1 failed" in output
    assert "report" in output and "no task failing" not in output
    assert "missed runs: 0" in output
    assert "dead_letter" in output and "7" in output


def test_hours_out_of_range_are_bad_input() -> None:
    for hours in ("0", "169"):
        code, output = run(seeded(), "--hours", hours)
        assert code == 2 and "between 1 and 168" in output, output
