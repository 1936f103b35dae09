"""`iotsched.testing.TaskHarness` and the pytest plugin's fixtures: whole tasks on the memory
store with a manual clock."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from iotsched import ShardContext, handler
from iotsched.testing import TaskHarness

START = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def sharded(task_id: str, handler_name: str, shards: int = 2, **fields: Any) -> dict[str, Any]:
    return {
        "id": task_id,
        "handler": handler_name,
        "trigger": {"rate": "1d"},
        "sharding": {"strategy": "static", "shards": [{"n": n} for n in range(shards)]},
        **fields,
    }


def test_a_failed_attempt_is_retried_after_its_backoff_on_the_manual_clock() -> None:
    attempts: list[tuple[int, int, datetime]] = []
    harness = TaskHarness()

    @handler("flaky")
    def flaky(ctx: ShardContext) -> dict[str, int]:
        attempts.append((ctx.shard, ctx.attempt, harness.clock.now()))
        if ctx.shard == 1 and ctx.attempt == 1:
            raise ConnectionError("device service reset the connection")
        return {"n": ctx.bounds["n"]}

    harness.add_handler(flaky)
    assert harness.apply(sharded("t", "flaky", retry={"max_attempts": 3, "backoff_s": 120})) == [
        "t"
    ]
    run = harness.run("t")
    assert run.status == "succeeded" and run.ended
    assert run.results == [{"n": 0}, {"n": 1}]
    assert attempts == [(0, 1, START), (1, 1, START), (1, 2, START + timedelta(minutes=2))]
    assert harness.clock.now() == START + timedelta(minutes=2)  # no further than needed
    retried = run.shards[1]
    assert (retried.attempts, retried.error) == (2, None)
    assert [line.level for line in retried.logs] == ["ERROR"]  # the first attempt's failure
    assert "ConnectionError: device service reset" in retried.logs[0].message


def test_a_shard_out_of_attempts_fails_the_instance_raises_its_alert_and_skips_the_reduce() -> None:
    reduced: list[int] = []

    def broken(ctx: ShardContext) -> None:
        raise ValueError(f"shard {ctx.shard} has bad data")

    def total(ctx: ShardContext) -> dict[str, int]:
        reduced.append(1)
        return {}

    harness = TaskHarness(handlers={"broken": broken, "total": total})
    harness.apply(sharded("t", "broken", reduce="total", retry={"max_attempts": 2}))
    run = harness.run("t")
    assert run.status == "failed"
    assert [(s.status, s.attempts) for s in run.shards] == [("failed", 2), ("failed", 2)]
    assert run.shards[0].error == "ValueError: shard 0 has bad data"
    assert run.reduce is None and run.reduce_result is None and reduced == []
    (alert,) = run.alerts
    assert (alert["type"], alert["instance_id"], alert["status"]) == (
        "instance_failed",
        run.instance_id,
        "failed",
    )
    assert harness.alerts == run.alerts


def test_a_rerun_of_the_failed_shards_runs_only_them_and_reduces_over_every_run() -> None:
    broken = {1}

    def work(ctx: ShardContext) -> dict[str, int]:
        if ctx.shard in broken:
            raise RuntimeError("not yet")
        ctx.once(f"effect#{ctx.shard}")
        return {"n": ctx.shard + 1}

    def total(ctx: ShardContext) -> dict[str, int]:
        return {"sum": sum(p["result"]["n"] for p in ctx.partials())}

    harness = TaskHarness(handlers={"work": work, "total": total})
    harness.apply(sharded("t", "work", shards=3, reduce="total", retry={"max_attempts": 1}))
    first = harness.run("t")
    assert first.status == "failed"
    assert [e.key for e in first.effects] == ["effect#0", "effect#2"]
    broken.clear()
    again = harness.rerun(first.instance_id, failed_only=True)
    assert again.instance_id == f"{first.instance_id}~run2"
    assert again.status == "succeeded"
    assert [s.index for s in again.shards] == [1]
    assert again.reduce_result == {"sum": 6}
    assert [e.key for e in again.effects] == ["effect#1"]
    assert [e.key for e in harness.effects] == ["effect#0", "effect#2", "effect#1"]


def test_a_task_file_with_problems_raises_them_and_writes_nothing() -> None:
    harness = TaskHarness()
    with pytest.raises(ValueError) as refused:
        harness.apply(
            [
                sharded("good", "noop"),
                {"id": "bad", "handler": "nobody", "trigger": {"rate": "1h"}},
                {"id": "worse", "handler": "nothing", "trigger": {"rate": "1h"}},
            ]
        )
    assert refused.value.problems == [  # type: ignore[attr-defined]
        "task 'bad': handler: unknown handler 'nobody' (known: "
        + ", ".join(sorted(harness.services.handlers))
        + ")",
        "task 'worse': handler: unknown handler 'nothing' (known: "
        + ", ".join(sorted(harness.services.handlers))
        + ")",
    ]
    with pytest.raises(ValueError, match=r"task 'bad': trigger.cron: "):
        harness.apply({"id": "bad", "handler": "noop", "trigger": {"cron": "61 * * * *"}})
    assert harness.services.tasks.list_tasks() == []


def test_task_files_are_read_from_json_and_yaml(tmp_path: Path) -> None:
    as_json = tmp_path / "tasks.json"
    as_json.write_text(json.dumps({"tasks": [sharded("a", "noop")]}), encoding="utf-8")
    as_yaml = tmp_path / "tasks.yaml"
    as_yaml.write_text(
        "tasks:\n  - id: b\n    handler: noop\n    trigger: {rate: 1h}\n", encoding="utf-8"
    )
    harness = TaskHarness()
    assert harness.apply(as_json) == ["a"]
    assert harness.apply(str(as_yaml)) == ["b"]
    assert harness.apply([sharded("c", "noop"), sharded("d", "noop")]) == ["c", "d"]
    assert harness.run("b").status == "succeeded"
    broken = tmp_path / "broken.yaml"
    broken.write_text("tasks: [\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"broken\.yaml:\d+:\d+: not valid YAML"):
        harness.apply(broken)
    with pytest.raises(ValueError, match=r"missing\.yaml: cannot be read"):
        harness.apply(tmp_path / "missing.yaml")


def test_a_yaml_task_file_without_pyyaml_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "tasks.yaml"
    path.write_text("tasks: []\n", encoding="utf-8")
    monkeypatch.setitem(sys.modules, "yaml", None)  # as if PyYAML were not installed
    with pytest.raises(ImportError, match=r"needs PyYAML: .*pip install 'iotsched\[cli\]'"):
        TaskHarness().apply(path)


def test_advance_fires_the_schedule_each_slot_with_its_business_date() -> None:
    seen: list[tuple[str, date]] = []

    def look(ctx: ShardContext) -> None:
        seen.append((ctx.instance_id, ctx.business_date))

    harness = TaskHarness(handlers={"look": look})
    harness.apply({"id": "q", "handler": "look", "trigger": {"rate": "15m"}})
    harness.advance(timedelta(hours=1))
    assert harness.clock.now() == START + timedelta(hours=1)
    assert [instance for instance, _ in seen] == [
        "q@2026-01-01T12:15Z",
        "q@2026-01-01T12:30Z",
        "q@2026-01-01T12:45Z",
        "q@2026-01-01T13:00Z",
    ]
    assert {day for _, day in seen} == {date(2025, 12, 31)}
    runs = harness.instances("q")
    assert [r.instance_id for r in runs] == [instance for instance, _ in reversed(seen)]
    assert {r.status for r in runs} == {"succeeded"}


def test_runs_in_the_same_minute_are_distinct_instances_with_their_params() -> None:
    def echo(ctx: ShardContext) -> dict[str, Any]:
        return dict(ctx.params)

    harness = TaskHarness(handlers={"echo": echo})
    harness.apply({"id": "e", "handler": "echo", "trigger": {"rate": "1d"}, "params": {"a": 1}})
    first = harness.run("e", business_date=date(2025, 6, 1))
    second = harness.run("e", params={"a": 2})
    assert first.instance_id != second.instance_id
    assert (first.status, first.results, first.business_date) == (
        "succeeded",
        [{"a": 1}],
        date(2025, 6, 1),
    )
    assert (second.status, second.results) == ("succeeded", [{"a": 2}])


def test_a_cancelled_instance_never_runs_its_shards() -> None:
    calls: list[int] = []
    harness = TaskHarness(handlers={"work": lambda ctx: calls.append(ctx.shard)})
    harness.apply(sharded("t", "work", shards=3))
    instance_id = harness.fire("t")
    run = harness.cancel(instance_id)
    assert run.status == "cancelled" and calls == []
    assert harness.deliver() == 0


def test_installed_handlers_resolve_by_name_and_a_given_one_replaces_its_namesake() -> None:
    harness = TaskHarness()
    harness.apply({"id": "n", "handler": "noop", "trigger": {"rate": "1h"}})
    assert harness.run("n").status == "succeeded"
    harness.add_handler(lambda ctx: {"fake": True}, "noop")
    assert harness.run("n").results == [{"fake": True}]


def test_resources_reach_every_handler_and_can_be_provided_later() -> None:
    def client() -> str:
        raise AssertionError("never made: the test provides it")

    def reads(ctx: ShardContext) -> dict[str, str]:
        return {"client": ctx.resource(client)}

    harness = TaskHarness(handlers={"reads": reads}, resources={client: "first fake"})
    harness.apply({"id": "r", "handler": "reads", "trigger": {"rate": "1h"}})
    assert harness.run("r").results == [{"client": "first fake"}]
    harness.provide(client, "second fake")
    assert harness.run("r").results == [{"client": "second fake"}]


def test_reading_an_unknown_instance_is_a_key_error() -> None:
    harness = TaskHarness()
    with pytest.raises(KeyError, match="no instance 't@nowhere'"):
        harness.instance("t@nowhere")
    with pytest.raises(KeyError):
        harness.wait("t@nowhere")


# -- the pytest plugin --------------------------------------------------------------------------


@handler("greet")
def greet(ctx: ShardContext) -> dict[str, str]:
    ctx.log("greeting", to=ctx.resource(name))
    return {"hello": ctx.resource(name)}


def name() -> str:
    raise AssertionError("never made: the fixture provides it")


@pytest.fixture
def iotsched_handlers() -> dict[str, Any]:
    return {"greet": greet}


@pytest.fixture
def iotsched_resources() -> dict[Any, Any]:
    return {name: "world"}


def test_the_fixture_is_a_harness_built_from_the_overridden_fixtures(
    iotsched_harness: TaskHarness,
) -> None:
    assert iotsched_harness.clock.now() == START
    iotsched_harness.apply({"id": "g", "handler": "greet", "trigger": {"rate": "1h"}})
    run = iotsched_harness.run("g")
    assert run.results == [{"hello": "world"}]
    assert [(line.message, line.fields) for line in run.logs] == [("greeting", {"to": "world"})]


def test_the_plugin_is_registered_and_imports_nothing_of_the_scheduler(
    request: pytest.FixtureRequest,
) -> None:
    assert request.config.pluginmanager.has_plugin("iotsched")
    probe = (
        "import sys, iotsched.testing.plugin\n"
        "heavy = ('boto3', 'botocore', 'yaml', 'iotsched.bootstrap', 'iotsched.services',\n"
        "         'iotsched.adapters', 'iotsched.testing._run', 'iotsched.testing._harness')\n"
        "print([m for m in heavy if m in sys.modules])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.strip() == "[]"


def test_apply_checks_params_against_the_handler_model_and_the_run_gets_the_model() -> None:
    from pydantic import BaseModel, Field

    class Greeting(BaseModel):
        name: str = Field(min_length=1)
        times: int = 1

    @handler("greet", params=Greeting)
    def greet(ctx: ShardContext, params: Greeting) -> dict[str, str]:
        return {"said": " ".join([f"hello {params.name}"] * params.times)}

    harness = TaskHarness(handlers={"greet": greet})
    with pytest.raises(ValueError, match=r"params\.name") as bad:
        harness.apply(sharded("g", "greet", shards=1, params={"name": ""}))
    assert "task 'g'" in str(getattr(bad.value, "problems", bad.value))
    assert harness.services.tasks.get_task("g") is None  # nothing written
    assert harness.apply(sharded("g", "greet", shards=1, params={"name": "ann", "times": 2}))
    assert harness.run("g").results == [{"said": "hello ann hello ann"}]
