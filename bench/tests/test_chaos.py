"""The chaos run (`make chaos`) at a small size: real SIGKILLs of workers and dispatchers."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from bench.chaos import cli
from bench.chaos.cli import main
from bench.chaos.config import ChaosConfig, ChaosConfigError
from bench.chaos.driver import run_chaos
from bench.chaos.report import write_chaos_results
from bench.report import CHAOS_DEFAULT_TIMEOUTS_HEADING, CHAOS_HEADING

TEMPLATE = Path(__file__).resolve().parents[2] / "template.yaml"

# 4 instances x 6 shards, with the deployment of `make chaos` (one shard per invocation, worker
# timeout 5 s, visibility timeout 30 s). Attempts die with probability 0.3 (so that at least 20%
# of them do, with room to spare at this size), and a dispatcher dies after a claim with
# probability 0.25 per claim; the run fires up to 10 more instances until that happened once.
SMALL = ChaosConfig(
    instances=4,
    shards=6,
    kill_probability=0.3,
    dispatcher_kill_probability=0.25,
    extra_instances=10,
    # A shard can die several times in a row (each death costs a hold, below): the
    # bound leaves room.
    final_within_s=300,
    seed=7,
    # The worker's hold on its message is one shard lease: 4 s here (the template's is 20 s),
    # so that each death costs the run less waiting; an attempt's lease is 3 s.
    shard_lease_s=4,
    # The test deployments' bucket count (tests/support.py): a tick and a sweep query each.
    index_buckets=4,
    # A dead dispatcher holds its bucket until its invocation's end: 10 s here (the template's
    # least; its default is 60 s), so that each dispatcher death costs the run less waiting.
    dispatcher_timeout_s=10,
    # A death resumes within that hold (4 s) or a lease (3 s) and a sweep (5 s). `make chaos`
    # holds the run to the visibility timeout + 10 s; a worker process respawned on a loaded
    # shared machine can take longer, so here the bound is 70 s (more than two holds and a
    # visibility timeout): what it must catch is a death left to the queue's own timeout again
    # and again, or never resumed.
    resume_max_goal_s=70,
)


@pytest.mark.slow
@pytest.mark.moto
@pytest.mark.timeout(600)
def test_chaos_run_keeps_every_invariant(tmp_path: Path) -> None:
    summary = run_chaos(SMALL, template=TEMPLATE, work_dir=tmp_path)

    # Every invariant, the resumption bound included (see SMALL).
    failed = [i for i in summary["invariants"] if not i["ok"]]
    assert not failed, json.dumps(failed, indent=2)
    # the chaos did happen, and the records show it
    assert summary["worker_kills"] >= 1 and summary["failovers"] >= summary["worker_kills"]
    assert summary["dispatcher_kills"] >= 1
    assert summary["tick_deliveries"] == 2 * summary["ticks"]
    # every fired instance and every planned shard ended
    assert SMALL.instances <= summary["instances"] <= SMALL.instances + SMALL.extra_instances
    assert sum(summary["shards_by_status"].values()) == summary["instances"] * SMALL.shards
    assert summary["effects"]["applied_more_than_once"] == 0
    assert summary["effects"]["missing"] == 0
    resumption = summary["resumption"]
    assert resumption["count"] == summary["worker_kills"]  # every death was resumed
    assert resumption["unresumed_open"] == 0
    assert resumption["max_s"] <= SMALL.resume_goal_s


def test_the_default_configuration_keeps_the_template_rules() -> None:
    assert ChaosConfig().problems() == []
    assert SMALL.problems() == []
    defaults = ChaosConfig()
    assert defaults.visibility_timeout_s >= 6 * defaults.worker_timeout_s
    assert defaults.resume_goal_s == defaults.visibility_timeout_s + 10


def test_a_configuration_that_breaks_the_template_rules_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The worker function's timeout (10 s) above the visibility timeout (5 s), which Lambda
    # refuses for an SQS event source.
    old = ChaosConfig(visibility_timeout_s=5, worker_timeout_s=10)
    assert any("6 x worker timeout" in p for p in old.problems())
    assert any(
        "lease" in p
        for p in ChaosConfig(
            visibility_timeout_s=18, task_timeout_s=2, lease_margin_s=16, worker_timeout_s=3
        ).problems()
    )
    assert any("task timeout" in p for p in ChaosConfig(task_timeout_s=5).problems())
    with pytest.raises(ChaosConfigError, match="6 x worker timeout"):
        run_chaos(old, template=TEMPLATE, work_dir=tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(["--visibility-timeout", "5", "--worker-timeout", "10", "--no-results"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "visibility timeout 5 s < 6 x worker timeout 10 s" in err
    assert "Traceback" not in err


def _cli_run(
    monkeypatch: pytest.MonkeyPatch, argv: list[str], *, ok: bool = True
) -> tuple[int | str | None, dict[str, Any]]:
    """Run the command line with the driver replaced: its exit code and what the driver got."""
    seen: dict[str, Any] = {}

    def fake_run(config: ChaosConfig, **kwargs: Any) -> dict[str, Any]:
        seen.update(kwargs, config=config)
        return {**_fake_summary(ok=ok), "work_dir": "/tmp/chaos-work"}

    monkeypatch.setattr(cli, "run_chaos", fake_run)
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    return exit_info.value.code, seen


def test_the_command_line_writes_results_only_when_asked(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, seen = _cli_run(monkeypatch, ["--instances", "3", "--kill-probability", "0.5"])
    assert code == 0
    assert seen["results"] is None
    assert seen["config"] == dataclasses.replace(ChaosConfig(), instances=3, kill_probability=0.5)
    assert "summary written to /tmp/chaos-work/summary.json" in capsys.readouterr().out

    target = tmp_path / "results.md"
    code, seen = _cli_run(monkeypatch, ["--results", str(target)], ok=False)
    assert code == 1  # an invariant failed
    assert seen["results"] == target
    code, seen = _cli_run(monkeypatch, ["--results", str(target), "--no-results"])
    assert seen["results"] is None

    capsys.readouterr()
    code, seen = _cli_run(monkeypatch, ["--default-timeouts", "--batch-size", "10", "--json"])
    assert seen["config"] == dataclasses.replace(ChaosConfig.default_timeouts(), batch_size=10)
    assert json.loads(capsys.readouterr().out)["ok"] is True


def test_the_command_line_refuses_bad_sizes_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--instances", "0"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "Error: need --instances >= 1" in err and "Traceback" not in err


def test_results_section_is_replaced_and_other_sections_kept(tmp_path: Path) -> None:
    results = tmp_path / "results.md"
    results.write_text("# Bench\n\n## Throughput\n\nfast\n", encoding="utf-8")
    summary = _fake_summary(ok=False)
    write_chaos_results(results, summary)
    write_chaos_results(results, _fake_summary(ok=True))
    text = results.read_text(encoding="utf-8")
    assert text.count(CHAOS_HEADING) == 1
    assert "## Throughput\n\nfast" in text
    assert "Result: all invariants hold." in text and "FAILED" not in text
    assert "python -m bench.chaos --instances 50" in text


def test_the_default_timeouts_run_keeps_the_template_s_defaults_and_its_own_section(
    tmp_path: Path,
) -> None:
    preset = ChaosConfig.default_timeouts()
    assert preset.problems() == []
    assert (preset.worker_timeout_s, preset.visibility_timeout_s) == (300, 1800)
    assert (preset.shard_lease_s, preset.sweep_every_s, preset.lease_s) == (20, 60.0, 20)
    assert (preset.resume_median_goal_s, preset.resume_goal_s) == (60.0, 90.0)
    # each attempt outlives its first lease: it lives by its renewals
    assert preset.effects * preset.unit_seconds > preset.lease_s
    assert preset.command() == (
        "python -m bench.chaos --default-timeouts --instances 3 --shards 6 "
        "--kill-probability 0.35 --seed 0"
    )
    results = tmp_path / "results.md"
    write_chaos_results(results, _fake_summary(ok=True))
    summary = _fake_summary(ok=True)
    summary["command"] = preset.command()
    summary["config"] = {**dataclasses.asdict(preset)}
    write_chaos_results(results, summary)
    write_chaos_results(results, summary)
    text = results.read_text(encoding="utf-8")
    assert text.count(CHAOS_HEADING + "\n") == 1  # the default run's section is kept
    assert text.count(CHAOS_DEFAULT_TIMEOUTS_HEADING) == 1
    assert "--default-timeouts" in text and "on real time" in text
    assert "goals: median 60 s, max 90 s" in text


def _fake_summary(*, ok: bool) -> dict[str, object]:
    config = ChaosConfig()
    return {
        "ok": ok,
        "command": config.command(),
        "config": {"shards": 20, "visibility_timeout_s": 5, "final_within_s": 300, "max_open": 4},
        "instances": 50,
        "instances_by_status": {"succeeded": 50},
        "shards_by_status": {"succeeded": 1000},
        "attempts": 1300,
        "worker_kills": 300,
        "kill_fraction": 0.23,
        "failovers": 300,
        "resumption": {
            "median_s": 5.0,
            "p90_s": 7.0,
            "max_s": 12.0,
            "count": 300,
            "via_sweeper": 0,
            "via_sweeper_median_s": None,
            "unresumed_open": 0,
            "unresumed_ended": 0,
        },
        "dispatcher_kills": 4,
        "dispatches_resumed": 4,
        "ticks": 50,
        "tick_deliveries": 100,
        "duplicate_claims_rejected": 50,
        "effects": {
            "required": 3000,
            "applied_once": 3000,
            "applied_more_than_once": 0,
            "missing": 0,
        },
        "sweeps": 60,
        "sweeper": {"resumed": 2},
        "dead_lettered_shards": 0,
        "function_timeouts": 0,
        "worker_respawns": 300,
        "final_after_s": 40.0,
        "instance_duration_s": {"median": 20.0, "max": 60.0},
        "fire_s": 30.0,
        "duration_s": 90.0,
        "invariants": [{"name": "x", "ok": ok, "detail": "d"}],
    }
