"""Issue item "accepted at apply, failing at every firing": what would fail at a firing is
refused at apply (by `tasks apply`, its `--dry-run` and the API alike), naming the field and the
bound; a task at every bound fires."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from iotsched import bootstrap
from iotsched.cli.main import cli
from iotsched.clock import ManualClock
from iotsched.core.sharding import PlanningError, register_planner
from iotsched.services.definitions.task_file import TaskFileError, parse_task_file
from iotsched.services.wiring import Wiring
from iotsched.tasklib import registry
from iotsched.testing import TaskHarness
from tests.support import T0


@register_planner("test-refusing")
def refusing(params: Mapping[str, Any]) -> list[dict[str, Any]]:
    raise PlanningError("no region given")


@register_planner("test-wide")
def wide(params: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [{"n": n, "pad": "p" * 100} for n in range(5000)]


def _task(**fields: Any) -> dict[str, Any]:
    return {"id": "t", "handler": "noop", "trigger": {"rate": "1h"}, **fields}


def _custom(planner: str, **params: Any) -> dict[str, Any]:
    return {"strategy": "custom", "planner": planner, "params": params}


def _static(shards: list[dict[str, Any]]) -> dict[str, Any]:
    return {"strategy": "static", "shards": shards}


OUTSIDE = "is not between 2000-01-01T00:00Z and 3000-01-01T00:00Z, the instants a task may name"
TOO_WIDE = (
    "an instance stores at most 300,000 bytes of bounds (DynamoDB items hold at most 400 KB): "
    "use fewer, larger shards (e.g. sharding id_range)"
)

#: (the task's fields, the problem apply names); each failed every firing, or never fired.
REFUSED: dict[str, tuple[dict[str, Any], str]] = {
    "instance-timeout": (
        {"instance_timeout_s": 10**12},
        "instance_timeout_s: Input should be less than or equal to 2592000",
    ),
    "misfire-grace": (
        {"misfire": {"grace_s": 10**15}},
        "misfire.grace_s: Input should be less than or equal to 2592000",
    ),
    "buckets-negative": (
        {"sharding": _custom("hash_buckets", buckets=-1)},
        "sharding.params.buckets: Input should be greater than or equal to 1",
    ),
    "planner-refuses": (
        {"sharding": _custom("test-refusing")},
        "sharding: no region given",
    ),
    "plan-too-large": (
        {"sharding": _custom("test-wide")},
        f"sharding: 5000 shards whose bounds take 598,891 bytes; {TOO_WIDE}",
    ),
    "static-plan-too-large": (
        {"sharding": _static([{"n": n, "pad": "p" * 100} for n in range(3000)])},
        f"sharding: 3000 shards whose bounds take 358,891 bytes; {TOO_WIDE}",
    ),
    "at-year-1": (
        {"trigger": {"at": "0001-01-01T00:00:00Z"}},
        f"trigger.at: 0001-01-01T00:00:00+00:00 {OUTSIDE}",
    ),
    "end-at-1970": (
        {"end_at": "1970-01-01T00:00:00Z"},
        f"end_at: 1970-01-01T00:00:00+00:00 {OUTSIDE}",
    ),
    "max-runs": (
        {"max_runs": 10**30},
        "max_runs: Input should be less than or equal to 1000000000",
    ),
    "id-range": (
        {"sharding": {"strategy": "id_range", "shards": 2, "id_max": 10**40}},
        "sharding.id_max: Input should be less than or equal to 1000000000000000000",
    ),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_accepted_at_apply_failing_at_every_firing_is_refused_at_apply(case: str) -> None:
    fields, problem = REFUSED[case]
    with pytest.raises(TaskFileError) as refused:
        parse_task_file({"tasks": [_task(**fields)]}, handlers=registry())
    assert refused.value.problems == [f"task 't': {problem}"]


@pytest.fixture
def services() -> Wiring:
    return bootstrap.build_memory(clock=ManualClock(T0))


def invoke(services: Wiring, *args: str) -> Result:
    return CliRunner().invoke(
        cli, list(args), obj={"services": services, "actor": "local:t"}, env={"COLUMNS": "200"}
    )


@pytest.mark.parametrize(
    ("yaml", "problem"),
    [
        pytest.param(
            "    exclude: {dates: [2026-02-30]}\n",
            "tasks.yaml:5:23: not valid YAML: 2026-02-30 is not a date or an instant: day is "
            "out of range for month",
            id="february-30",
        ),
        pytest.param(
            "    timeout_s: 10\n    timeout_s: 20\n",
            "tasks.yaml:6:5: not valid YAML: found duplicate key 'timeout_s' (first at 5:5)",
            id="duplicate-key",
        ),
        pytest.param(
            '    description: "\\uD83D\\uDE00"\n',
            "tasks.yaml:5:18: not valid YAML: \\ud83d is a surrogate, not a character: write "
            "the character itself (the file is UTF-8), or its \\U escape",
            id="surrogate",
        ),
    ],
)
def test_a_yaml_value_that_cannot_be_read_as_written_is_refused_naming_where(
    services: Wiring, tmp_path: Path, yaml: str, problem: str
) -> None:
    path = tmp_path / "tasks.yaml"
    path.write_text("tasks:\n  - id: t\n    handler: noop\n    trigger: {rate: 1h}\n" + yaml)
    for dry_run in (["--dry-run"], []):
        result = invoke(services, "tasks", "apply", *dry_run, str(path))
        assert result.exit_code == 2, result.output
        assert "Traceback" not in result.output
        assert f"{tmp_path}/{problem}" in result.output, result.output
    assert services.tasks.list_tasks() == []


def test_a_run_whose_params_cannot_be_sent_is_refused_at_the_request(
    services: Wiring, tmp_path: Path
) -> None:
    path = tmp_path / "tasks.yaml"
    path.write_text("tasks:\n  - {id: t, handler: noop, trigger: {rate: 1h}}\n")
    assert invoke(services, "tasks", "apply", str(path)).exit_code == 0
    deep = "{}"
    for _ in range(250):
        deep = '{"a": ' + deep + "}"
    for params in (deep, json_nested(33)):
        result = invoke(services, "run", "t", "--params", params)
        assert result.exit_code == 2, result.output
        assert "nests deeper than" in result.output, result.output
    assert services.instances.list_instances(task_id="t") == []


@pytest.mark.parametrize("day", ["0001-01-01", "9999-12-31"])
def test_a_run_for_a_business_date_out_of_range_is_refused_at_the_request(
    services: Wiring, tmp_path: Path, day: str
) -> None:
    # The API's models bound a business date; the CLI's run takes the use-case's same bound.
    path = tmp_path / "tasks.yaml"
    path.write_text("tasks:\n  - {id: t, handler: noop, trigger: {rate: 1h}}\n")
    assert invoke(services, "tasks", "apply", str(path)).exit_code == 0
    result = invoke(services, "run", "t", "--business-date", day)
    assert result.exit_code == 2, (result.output, result.exception)
    assert f"business date {day} is not between 1970-01-01 and 2999-12-31" in result.output
    assert services.instances.list_instances(task_id="t") == []


def json_nested(levels: int) -> str:
    text = "1"
    for _ in range(levels):
        text = '{"a": ' + text + "}"
    return text


def test_a_task_at_every_bound_fires_and_ends() -> None:
    harness = TaskHarness(start=datetime(2999, 12, 31, 22, 0, tzinfo=UTC))
    harness.apply(
        _task(
            trigger={"rate": "1h", "anchor": "1970-01-01T00:00:00Z"},
            instance_timeout_s=2_592_000,
            misfire={"grace_s": 2_592_000},
            max_runs=1_000_000_000,
            end_at="2999-12-31T23:59:00Z",
            sharding={"strategy": "id_range", "shards": 2, "id_max": 10**18},
            params=json_params(32),
        )
    )
    harness.advance(timedelta(hours=1, minutes=1))
    (run,) = harness.instances("t")
    assert run.status == "succeeded"


def json_params(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(levels - 1):
        value = {"a": value}
    return value
