"""Issue item "one validation for every way in", its params part: params nest at most 32
levels, refused with the same message by `tasks apply` (whose files took 200 levels the API
refused), the API (and so the console), a run's `--params` and `POST .../runs`, nothing
written. (A shard message nesting some hundreds of levels was dead-lettered as malformed, its
instance left running.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from iotsched.cli.main import cli
from iotsched.services.operations.on_demand import ManualRunError, run_now
from tests.api.conftest import DEVICE_SCAN, Client

TOO_DEEP = "nests deeper than 32 levels, the most params may"


def nested(levels: int) -> dict[str, Any]:
    """A mapping nesting `levels` levels (`{}` is one)."""
    value: dict[str, Any] = {}
    for _ in range(levels - 1):
        value = {"a": value}
    return value


def test_params_nest_at_most_32_levels_whichever_way_they_enter(
    api: Client, tmp_path: Path
) -> None:
    deep = {**DEVICE_SCAN, "params": nested(33)}
    # the CLI's file and the API's bodies: one message
    path = tmp_path / "tasks.yaml"
    path.write_text(yaml.safe_dump({"tasks": [deep]}))
    services = api.services
    cli_run = CliRunner().invoke(
        cli, ["tasks", "apply", str(path)], obj={"services": services, "actor": "local:t"}
    )
    assert cli_run.exit_code == 2, cli_run.output
    assert f"error: {path}: task 'device-scan': params: {TOO_DEEP}" in cli_run.output
    for answer in (api.put("/tasks/device-scan", deep), api.post("/tasks", {"tasks": [deep]})):
        assert answer.status == 400, answer.body
        assert answer.problems == [{"field": "task 'device-scan': params", "message": TOO_DEEP}]
    assert api.get("/tasks").body == []
    # 32 levels are taken
    assert api.put("/tasks/device-scan", {**DEVICE_SCAN, "params": nested(32)}).status == 200
    # a run's params: the API's body, and the use-case the CLI's `run --params` calls
    answer = api.post("/tasks/device-scan/runs", {"params": nested(33)})
    assert answer.status == 400, answer.body
    assert answer.problems == [{"field": "body.params", "message": TOO_DEEP}]
    with pytest.raises(ManualRunError, match=f"params: {TOO_DEEP}"):
        run_now("device-scan", services, params=nested(33))
    assert services.instances.list_instances(task_id="device-scan") == []


@pytest.mark.parametrize(
    ("sharding", "field"),
    [
        ({"strategy": "static", "shards": [nested(33)]}, "sharding.shards.0"),
        (
            {"strategy": "custom", "planner": "hash_buckets", "params": nested(33)},
            "sharding.params",
        ),
    ],
)
def test_bounds_and_planner_params_nest_as_params_do(
    api: Client, sharding: dict[str, Any], field: str
) -> None:
    answer = api.put("/tasks/device-scan", {**DEVICE_SCAN, "sharding": sharding})
    assert answer.status == 400, answer.body
    assert answer.problems == [{"field": f"task 'device-scan': {field}", "message": TOO_DEEP}]
