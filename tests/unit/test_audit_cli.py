"""The CLI's change verbs each write exactly one audit record naming the CLI's caller, and a
command added later that changes state without a case here fails the walk; a rollback restores
the earlier definition as a new version and the next firing runs it; the scheduler's own pause
is recorded as `scheduler`."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from iotsched import bootstrap
from iotsched.api.identity import local_principal
from iotsched.cli.main import cli
from iotsched.cli.output import actor
from iotsched.cli.target import Target
from iotsched.clock import ManualClock
from iotsched.core.audit import SCHEDULER, AuditRecord, AuditState
from iotsched.core.instance_record import InstanceStatus
from iotsched.services.fleet.pausing import pause_after_end
from iotsched.services.scheduling.tick import dispatch_tick
from iotsched.services.wiring import Wiring
from tests.support import T0, instance

WHO = "local:tester"
FILE = """\
calendars:
  - name: holidays
    dates: [2026-12-25]
tasks:
  - id: scan
    handler: noop
    trigger: {rate: 1h}
    params: {mode: fast}
  - id: daily
    handler: noop
    trigger: {cron: "0 3 * * *", timezone: UTC}
    exclude: {calendars: [holidays]}
"""
#: Commands that read only (or run the local runtime, whose own verbs are the ones below, or
#: write files of the caller's: `init`).
READ_ONLY = {
    "alerts",
    "audit",
    "calendars",
    "demo",
    "handlers list",
    "handlers show",
    "init",
    "instances",
    "local sweep",
    "local traces",
    "local tick",
    "local up",
    "logs",
    "overview",
    "shards",
    "tasks history",
    "tasks list",
    "tasks show",
    "tenants",
    "times",
}


def commands(cmd: click.Command, prefix: tuple[str, ...] = ()) -> list[str]:
    if isinstance(cmd, click.Group):
        return [c for name, sub in cmd.commands.items() for c in commands(sub, (*prefix, name))]
    return [" ".join(prefix)]


@pytest.fixture
def services() -> Wiring:
    return bootstrap.build_memory(clock=ManualClock(T0))


def invoke(services: Wiring, *args: str) -> Any:
    clock = services.clock
    assert isinstance(clock, ManualClock)
    clock.advance(timedelta(seconds=1))  # records of one instant list in no set order
    result = CliRunner().invoke(
        cli, [*args, "--json"], obj={"services": services, "actor": WHO}, env={"COLUMNS": "200"}
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def new_records(services: Wiring, before: set[str]) -> list[AuditRecord]:
    found = services.tasks.list_audit(since=T0, until=T0 + timedelta(days=2))
    return [r for r in found if r.audit_id not in before]


def test_every_cli_change_writes_one_record_by_its_caller(services: Wiring, tmp_path: Path) -> None:
    path = tmp_path / "tasks.yaml"
    path.write_text(FILE)
    v2 = tmp_path / "v2.yaml"
    v2.write_text(FILE.replace("mode: fast", "mode: slow"))
    seen: dict[str, Any] = {}
    steps: list[tuple[str, list[str], list[tuple[str, str]]]] = [
        (
            "tasks apply",
            ["tasks", "apply", str(path)],
            [("apply", "daily"), ("apply", "scan"), ("calendars", "calendar:holidays")],
        ),
        ("tasks apply", ["tasks", "apply", str(v2)], [("apply", "scan")]),
        ("tasks pause", ["tasks", "pause", "scan", "--note", "why"], [("pause", "scan")]),
        ("tasks resume", ["tasks", "resume", "scan"], [("resume", "scan")]),
        ("run", ["run", "scan"], [("run", "scan")]),
        ("cancel", ["cancel", "{run}"], [("cancel", "scan")]),
        ("rerun", ["rerun", "{run}"], [("rerun", "scan")]),
        ("submit", ["submit", "scan", "--delay", "2h"], [("submit", "scan")]),
        (
            "backfill",
            [
                "backfill",
                "daily",
                "--from",
                "2026-11-25",
                "--to",
                "2026-11-26",
                "--max-concurrent",
                "5",
            ],
            [("backfill", "daily")],
        ),
        ("tasks rollback", ["tasks", "rollback", "scan", "--to", "1"], [("rollback", "scan")]),
        ("tasks delete", ["tasks", "delete", "daily", "--force"], [("delete", "daily")]),
    ]
    for _, args, expected in steps:
        before = {r.audit_id for r in new_records(services, set())}
        answer = invoke(services, *[a.format(**seen) for a in args])
        if args[0] == "run":
            seen["run"] = answer["instance_id"]
        found = new_records(services, before)
        assert sorted((r.verb.value, r.subject) for r in found) == expected, found
        assert {(r.actor, r.state) for r in found} == {(WHO, AuditState.DONE)}
    # a command that changes state without its case above fails here
    assert set(commands(cli)) - READ_ONLY == {name for name, _, _ in steps}

    by_verb = {r.verb.value: r for r in new_records(services, set()) if r.subject == "scan"}
    assert by_verb["apply"].diff == {"params.mode": ["fast", "slow"]}  # the newest apply
    assert by_verb["pause"].note == "why"
    assert by_verb["cancel"].instance_ids == [seen["run"]]
    assert by_verb["rollback"].diff == {"params.mode": ["slow", "fast"]}

    history = invoke(services, "tasks", "history", "scan")
    assert [(v["version"], v["verb"], v["actor"], v["current"]) for v in history] == [
        (1, "apply", WHO, False),
        (2, "apply", WHO, False),
        (3, "rollback", WHO, True),
    ]
    listed = invoke(services, "audit", "--task", "scan", "--since", "2026-11-29")
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


def test_a_rollback_restores_the_definition_and_the_next_firing_runs_it(
    services: Wiring, tmp_path: Path
) -> None:
    path = tmp_path / "tasks.yaml"
    path.write_text(FILE)
    invoke(services, "tasks", "apply", str(path))
    path.write_text(FILE.replace("mode: fast", "mode: slow"))
    invoke(services, "tasks", "apply", str(path))
    rolled = invoke(services, "tasks", "rollback", "scan", "--to", "1")
    assert rolled == {"task_id": "scan", "rolled_back_to": 1, "changed": True, "version": 3}
    # rolling back to the definition already current changes nothing
    again = invoke(services, "tasks", "rollback", "scan", "--to", "1")
    assert again["changed"] is False and again["version"] == 3

    clock = services.clock
    assert isinstance(clock, ManualClock)
    clock.advance(timedelta(hours=1))
    dispatch_tick(clock.now(), services)
    (fired,) = services.instances.list_instances(task_id="scan")
    assert (fired.task_version, fired.params) == (3, {"mode": "fast"})
    shown = invoke(services, "instances", "scan")
    assert [v["task_version"] for v in shown] == [3]


def test_a_rollback_to_a_missing_version_is_bad_input(services: Wiring, tmp_path: Path) -> None:
    path = tmp_path / "tasks.yaml"
    path.write_text(FILE)
    invoke(services, "tasks", "apply", str(path))
    result = CliRunner().invoke(
        cli,
        ["tasks", "rollback", "scan", "--to", "7"],
        obj={"services": services, "actor": WHO},
    )
    assert result.exit_code == 2 and "no version 7" in result.output
    assert services.tasks.get_task("scan") is not None
    assert services.tasks.get_task("scan").version == 1  # type: ignore[union-attr]


def test_the_schedulers_pause_is_recorded_once_as_the_scheduler(
    services: Wiring, tmp_path: Path
) -> None:
    path = tmp_path / "tasks.yaml"
    path.write_text(FILE)
    invoke(services, "tasks", "apply", str(path))
    ended = instance(task_id="scan").model_copy(
        update={"status": InstanceStatus.FAILED, "reason": "boom"}
    )
    assert pause_after_end(ended, services)
    assert not pause_after_end(ended, services)  # done again: already paused, no record
    pauses = [r for r in new_records(services, set()) if r.verb.value == "pause"]
    assert [(r.actor, r.instance_ids) for r in pauses] == [(SCHEDULER, [ended.instance_id])]


def test_the_clis_caller_is_local_on_an_emulator_and_the_sts_arn_on_aws(
    monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    # getpass reads these before the password database (a module reloaded by another test
    # would escape a patch of getpass itself)
    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        monkeypatch.setenv(name, "ops")
    # the name is read once a process (cached): forget one an earlier test read, and this one
    local_principal.cache_clear()
    request.addfinalizer(local_principal.cache_clear)
    local = click.Context(cli, obj={"target": Target("http://127.0.0.1:5000", None, "s")})
    assert actor(local) == "local:ops"

    class Sts:
        def get_caller_identity(self) -> dict[str, str]:
            return {"Arn": "arn:aws:iam::123456789012:user/alice"}

    class Session:
        def client(self, name: str) -> Sts:
            assert name == "sts"
            return Sts()

    aws = Target(None, "eu-west-1", "s")
    monkeypatch.setattr(Target, "session", lambda self: Session())
    remote = click.Context(cli, obj={"target": aws})
    assert actor(remote) == "arn:aws:iam::123456789012:user/alice"
