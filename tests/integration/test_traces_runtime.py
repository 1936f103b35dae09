"""One firing's trace on the local runtime: real processes (the tick, the bucket dispatchers,
the workers), each recording its spans with the local tracer; the trace crosses the dispatch
queue and the shard queue in the messages, as X-Ray's crosses them in `AWSTraceHeader`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from click.testing import CliRunner

from iotsched.adapters.spans import SpanRecord
from iotsched.bootstrap import build
from iotsched.cli.main import cli
from iotsched.core.instance_record import InstanceStatus
from iotsched.local.control import ControlServer
from iotsched.local.runtime import LocalRuntime
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.definitions.task_file import parse_task_file
from iotsched.tasklib import registry
from tests.integration.conftest import ENV, PARAMETERS
from tests.support import PATIENCE_S, started_runtime

pytestmark = [pytest.mark.slow, pytest.mark.moto]

INSTANCE = "traced@2026-02-02T10:00Z"


@pytest.fixture(scope="module")
def runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRuntime]:
    """A started runtime whose functions trace locally."""
    logs = tmp_path_factory.mktemp("traces-runtime")
    with started_runtime(logs, parameters=PARAMETERS, env=ENV, dispatchers=1, traces=True) as rt:
        yield rt


def _trace_of(spans: list[SpanRecord], instance_id: str) -> list[SpanRecord]:
    """The trace holding the instance's claim (as an operator finds it: by annotation)."""
    claims = [
        s for s in spans if s.name == "claim" and s.annotations.get("instance_id") == instance_id
    ]
    if len(claims) != 1:
        return []
    return [s for s in spans if s.trace_id == claims[0].trace_id]


def _finalized(spans: list[SpanRecord]) -> bool:
    return any(s.name == "finalize" and s.annotations.get("ended") == "succeeded" for s in spans)


def test_a_tick_to_effect_trace_crosses_the_queues_and_processes(runtime: LocalRuntime) -> None:
    # given a task of 2 shards whose handler claims 2 effects per shard through ctx.once
    services = build(runtime.settings())
    definitions = parse_task_file(
        {
            "tasks": [
                {
                    "id": "traced",
                    "handler": "chaos",
                    "params": {"effects": 2, "unit_seconds": 0},
                    "trigger": {"rate": "1h"},
                    "sharding": {"strategy": "id_range", "shards": 2, "id_max": 20},
                    "timeout_s": 2,
                }
            ]
        },
        handlers=registry(),
    )
    apply_tasks(definitions, services.tasks, now=datetime(2026, 2, 2, 9, 58, tzinfo=UTC))
    # when its tick is delivered and its instance runs on the worker processes
    runtime.tick(datetime(2026, 2, 2, 10, 0, 5, tzinfo=UTC))
    assert runtime.wait_for(lambda: _finalized(_trace_of(runtime.spans(), INSTANCE)), PATIENCE_S)
    instance = services.instances.get_instance(INSTANCE)
    assert instance is not None and instance.status is InstanceStatus.SUCCEEDED
    # then one trace holds the tick, the dispatch, the claim, each attempt, its effects, the
    # completion and the finalize, each linked to its parent across the processes
    trace = _trace_of(runtime.spans(), INSTANCE)
    by_id = {s.span_id: s for s in trace}
    (tick,) = [s for s in trace if s.name == "tick"]
    assert tick.parent_id is None
    (claim,) = [s for s in trace if s.name == "claim"]
    assert claim.annotations == {"task_id": "traced", "instance_id": INSTANCE, "shards": 2}
    dispatch = by_id[claim.parent_id or ""]
    assert dispatch.name == "dispatch" and dispatch.parent_id == tick.span_id
    attempts = sorted(
        (s for s in trace if s.name == "attempt"), key=lambda s: s.annotations["shard"]
    )
    assert [a.annotations["shard"] for a in attempts] == [0, 1]
    for shard, attempt in enumerate(attempts):
        assert attempt.parent_id == claim.span_id
        assert attempt.annotations["task_id"] == "traced"
        assert attempt.annotations["instance_id"] == INSTANCE
        assert attempt.annotations["attempt"] == 1
        effects = [s for s in trace if s.name == "once" and s.parent_id == attempt.span_id]
        assert sorted(str(s.annotations["effect_key"]) for s in effects) == [
            f"effect#traced#2026-02-01#{shard}#{unit}" for unit in range(2)
        ]
        assert all(s.annotations["claimed"] is True for s in effects)
        assert all(s.annotations["shard"] == shard for s in effects)
    completes = [s for s in trace if s.name == "complete"]
    assert completes and all(by_id[s.parent_id or ""].name == "attempt" for s in completes)
    (ended,) = [s for s in trace if s.name == "finalize" and s.annotations["ended"] == "succeeded"]
    assert by_id[ended.parent_id or ""].name == "complete"
    assert ended.annotations["task_id"] == "traced"
    # the spans came from more than one process: the tick's, a dispatcher's, the workers'
    files = {p.name for p in runtime.span_dir.glob("*.jsonl")}
    assert len(files) >= 3


def test_local_traces_shows_the_firing_s_trace_as_a_tree(runtime: LocalRuntime) -> None:
    # given the firing of the test above, traced (run alone, this test fires it first)
    if not _finalized(_trace_of(runtime.spans(), INSTANCE)):
        test_a_tick_to_effect_trace_crosses_the_queues_and_processes(runtime)
    control = ControlServer(runtime, 0)
    control.start()
    try:
        runner = CliRunner()
        # when an operator asks the runtime's control for the instance's traces
        listed = runner.invoke(
            cli, ["local", "traces", INSTANCE, "--port", str(control.port), "--json"]
        )
        shown = runner.invoke(cli, ["local", "traces", INSTANCE, "--port", str(control.port)])
        unknown = runner.invoke(cli, ["local", "traces", "nope@x", "--port", str(control.port)])
    finally:
        control.stop()
    # then --json gives the spans of the one trace, and the tree nests them by parent
    assert listed.exit_code == 0, listed.output
    found = json.loads(listed.output)
    assert found["instance_id"] == INSTANCE and len(found["traces"]) == 1
    names = [s["name"] for s in found["traces"][0]]
    assert names[0] == "tick" and {"claim", "attempt", "once", "finalize"} <= set(names)
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    depth = {line.strip().split()[0]: len(line) - len(line.lstrip()) for line in lines[1:]}
    assert depth["tick"] < depth["dispatch"] < depth["claim"] < depth["attempt"] < depth["once"]
    assert f"instance_id={INSTANCE}" in shown.output
    assert unknown.exit_code == 0 and "no span names nope@x" in unknown.output
