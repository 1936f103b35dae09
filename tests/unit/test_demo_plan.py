"""The demo's task file, the minutes its accelerated clock delivers, and its argument checks."""

from __future__ import annotations

from datetime import timedelta

from click.testing import CliRunner

from iotsched.cli.main import cli
from iotsched.demo.run import (
    DEMO_START,
    demo_tasks,
    tick_minutes,
)


def test_the_demo_tasks_cover_the_five_handlers_in_the_tenants_timezones() -> None:
    tasks = {t.id: t for t in demo_tasks()}
    assert {t.handler for t in tasks.values()} == {
        "inspect_offline",
        "tenant_report",
        "archive_cold_data",
        "plan_expiry_reminders",
        "billing_settlement",
    }
    assert tasks["daily-report-acme"].reduce == "tenant_report_merge"
    assert {tasks[f"daily-report-{t}"].timezone for t in ("acme", "globex", "initech")} == {
        "Asia/Shanghai",
        "Europe/Berlin",
        "America/New_York",
    }
    assert all(t.sharding.strategy.value in ("groups", "none") for t in tasks.values())


def test_only_minutes_with_a_due_task_are_delivered() -> None:
    day = [
        m.strftime("%H:%M")
        for m in tick_minutes(demo_tasks(), DEMO_START, DEMO_START + timedelta(days=1))
    ]
    # Every 2 hours; globex's settlement (01:00 Berlin) falls on 00:00 UTC with one of them.
    inspections = [f"{h:02d}:00" for h in range(0, 24, 2)]
    others = [
        "02:30",  # archive, UTC
        "05:05",  # initech's daily report, 00:05 New York
        "06:00",  # initech's settlement, 01:00 New York
        "08:00",  # reminders, 09:00 Berlin
        "16:05",  # acme's daily report, 00:05 Shanghai
        "17:00",  # acme's settlement, 01:00 Shanghai
        "23:05",  # globex's daily report, 00:05 Berlin
        "23:10",  # globex's weekly report, Monday 00:10 Berlin
    ]
    assert day == sorted(set(inspections) | set(others))


def test_bad_demo_arguments_are_clear_errors() -> None:
    done = CliRunner().invoke(cli, ["demo", "--devices", "5"])
    assert done.exit_code != 0
    assert "--devices must be between 30" in done.output
    assert "Traceback" not in done.output
    assert isinstance(done.exception, SystemExit)  # a usage error, not a crash
