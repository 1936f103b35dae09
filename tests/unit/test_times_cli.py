"""`iotsched times --task`: a task's next slots with their fire instants, jitter offsets,
window waits, excluded dates (and what excluded them) and where max_runs stops it; from a task
file or the deployment, as a table or `--json`, bad input exiting 2."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from iotsched import bootstrap
from iotsched.cli.main import cli
from iotsched.clock import ManualClock
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.scheduling.tick import dispatch_tick
from iotsched.services.wiring import Wiring
from tests.support import T0, task

FILE = """\
calendars:
  - name: holidays
    dates: [2026-12-25]
tasks:
  - id: push
    handler: noop
    trigger: {cron: "0 3 * * *", timezone: Europe/Berlin}
    jitter_s: 120
    window: {cron: "0 4 * * *", duration: 1h, timezone: Europe/Berlin}
    exclude: {calendars: [holidays], dates: [2026-12-27]}
"""


def times(*args: str, services: Wiring | None = None) -> Result:
    obj: dict[str, Any] = {"services": services} if services is not None else {}
    return CliRunner().invoke(cli, ["times", *args], obj=obj, env={"COLUMNS": "200"})


def test_a_task_file_shows_window_waits_and_excluded_dates(tmp_path: Path) -> None:
    path = tmp_path / "tasks.yaml"
    path.write_text(FILE)
    args = ["--task", "push", "--file", str(path), "--from", "2026-12-23T12:00Z", "--count", "5"]

    result = times(*args, "--json")

    assert result.exit_code == 0, result.output
    view = json.loads(result.output)
    rows = [(r["slot"][:10], r["excluded_by"], r["window_wait_s"] > 0) for r in view["fires"]]
    # 03:00 local waits for the 04:00 window; the 25th and the 27th never fire.
    assert rows == [
        ("2026-12-24", None, True),
        ("2026-12-25", "calendar:holidays", False),
        ("2026-12-26", None, True),
        ("2026-12-27", "exclude.dates", False),
        ("2026-12-28", None, True),
    ]
    fired = [r for r in view["fires"] if r["excluded_by"] is None]
    assert [r["fire_at"] for r in fired] == [
        "2026-12-24T03:00:00+00:00",
        "2026-12-26T03:00:00+00:00",
        "2026-12-28T03:00:00+00:00",
    ]
    assert all(0 <= r["jitter_s"] <= 120 for r in view["fires"])
    assert view["stop"] is None
    table = times(*args)
    assert table.exit_code == 0, table.output
    assert "excluded: calendar:holidays" in table.output
    assert "excluded: exclude.dates" in table.output
    assert table.output.count("for the window") == 3


def test_a_stored_task_shows_where_max_runs_stops_it() -> None:
    clock = ManualClock(T0 - timedelta(minutes=1))
    services = bootstrap.build_memory(clock=clock)
    apply_tasks(
        [task("twice", trigger={"rate": "1h"}, max_runs=2)], services.tasks, now=clock.now()
    )
    dispatch_tick(T0, services)

    result = times("--task", "twice", "--json", services=services)

    assert result.exit_code == 0, result.output
    view = json.loads(result.output)
    assert (view["runs"], view["max_runs"]) == (1, 2)
    assert [r["slot"] for r in view["fires"]] == ["2026-11-29T13:00:00+00:00"]
    assert view["stop"] == "max_runs reached (2 of 2 runs fired)"


def test_bad_input_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "tasks.yaml"
    path.write_text(FILE)
    services = bootstrap.build_memory(clock=ManualClock(datetime(2026, 12, 1, tzinfo=UTC)))
    unknown_calendar = tmp_path / "other.yaml"
    unknown_calendar.write_text(FILE.split("tasks:\n", 1)[1].join(["tasks:\n", ""]))
    cases = {
        "no task 'nope' in": ["--task", "nope", "--file", str(path)],
        "no task 'nope'": ["--task", "nope"],
        "No such file": ["--task", "push", "--file", str(tmp_path / "missing.yaml")],
        "1 problem(s)": ["--task", "push", "--file", str(unknown_calendar)],
        "Invalid isoformat": ["--task", "push", "--file", str(path), "--from", "yesterday"],
        "give --from and --to": ["0 2 * * *"],
    }
    for message, args in cases.items():
        result = times(*args, services=services)
        assert result.exit_code == 2, (args, result.output)
        assert message in result.output, (args, result.output)
    refused = times("--task", "push", "--file", str(unknown_calendar), services=services)
    assert "unknown calendar 'holidays'" in refused.output


def test_tasks_show_lists_exclusions_and_why_a_task_stopped() -> None:
    clock = ManualClock(T0 - timedelta(minutes=1))
    services = bootstrap.build_memory(clock=clock)
    once = task(
        "once", trigger={"rate": "1h"}, max_runs=1, exclude={"dates": ["2026-12-25"]}, jitter_s=60
    )
    apply_tasks([once], services.tasks, now=clock.now())
    runner = CliRunner()
    before = runner.invoke(cli, ["tasks", "show", "once", "--json"], obj={"services": services})
    assert before.exit_code == 0, before.output
    shown = json.loads(before.output)
    assert shown["excluded_dates"] == {"2026-12-25": "exclude.dates"}
    assert shown["stop_reason"] is None and shown["runs"] == 0
    assert [f["utc"] for f in shown["next_fires"]] == ["2026-11-29T12:01:00+00:00"]  # max_runs
    dispatch_tick(T0 + timedelta(minutes=1), services)

    after = runner.invoke(
        cli, ["tasks", "show", "once"], obj={"services": services}, env={"COLUMNS": "200"}
    )

    assert after.exit_code == 0, after.output
    assert "stopped: max_runs reached (1 of 1 runs fired)" in after.output
    assert "excluded dates: 2026-12-25 (exclude.dates)" in after.output


def test_calendars_lists_each_with_the_tasks_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "tasks.yaml"
    path.write_text(FILE)
    services = bootstrap.build_memory(clock=ManualClock(T0))
    runner = CliRunner()
    applied = runner.invoke(
        cli, ["tasks", "apply", str(path)], obj={"services": services, "actor": "local:test"}
    )
    assert applied.exit_code == 0, applied.output
    assert "calendars: holidays" in applied.output

    listed = runner.invoke(cli, ["calendars", "--json"], obj={"services": services})

    assert listed.exit_code == 0, listed.output
    assert json.loads(listed.output) == [
        {"name": "holidays", "description": "", "dates": ["2026-12-25"], "tasks": ["push"]}
    ]
    missing = runner.invoke(cli, ["calendars", "nope"], obj={"services": services})
    assert missing.exit_code == 2 and "no calendar 'nope'" in missing.output
