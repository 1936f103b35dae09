"""The chaos run (`make chaos`) at a small size: real SIGKILLs of workers and dispatchers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from iotsched.local.chaos import RESULTS_HEADING, ChaosConfig, run_chaos, write_results

TEMPLATE = Path(__file__).resolve().parents[2] / "template.yaml"

# 6 instances x 8 shards. Attempts die with probability 0.3 (so that at least 20% of them do,
# with room to spare at this size), and a dispatcher dies after a claim with probability 0.5
# per claim; the run fires up to 10 more instances until that happened at least once.
SMALL = ChaosConfig(
    instances=6,
    shards=8,
    kill_probability=0.3,
    dispatcher_kill_probability=0.5,
    extra_instances=10,
    # A shard can die several times in a row (each death costs a visibility timeout, and a
    # message lost with its worker waits for the sweeper's re-send): the bound leaves room.
    final_within_s=180,
    seed=7,
)


@pytest.mark.slow
@pytest.mark.moto
@pytest.mark.timeout(400)
def test_chaos_run_keeps_every_invariant(tmp_path: Path) -> None:
    summary = run_chaos(SMALL, template=TEMPLATE, work_dir=tmp_path)

    # The resumption time is a goal the run reports (`make chaos` records it in
    # bench/results.md); its tail depends on machine load and on the sweeper's re-send, so the
    # test asserts the correctness invariants and that every death was resumed.
    failed = [
        i
        for i in summary["invariants"]
        if not i["ok"] and not i["name"].startswith("dead worker's shard resumed")
    ]
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
    assert summary["resumption"]["unresumed_open"] == 0


def test_results_section_is_replaced_and_other_sections_kept(tmp_path: Path) -> None:
    results = tmp_path / "results.md"
    results.write_text("# Bench\n\n## Throughput\n\nfast\n", encoding="utf-8")
    summary = _fake_summary(ok=False)
    write_results(results, summary)
    write_results(results, _fake_summary(ok=True))
    text = results.read_text(encoding="utf-8")
    assert text.count(RESULTS_HEADING) == 1
    assert "## Throughput\n\nfast" in text
    assert "Result: all invariants hold." in text and "FAILED" not in text
    assert "python -m iotsched.local.chaos --instances 50" in text


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
