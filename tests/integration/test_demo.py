"""`iotsched demo --json` end to end on a small fleet: real processes, a real SIGKILL in the
middle of a shard, duplicated, late and raced ticks, every instance final, every task's effect
present, claims refused and copies absorbed, no effect applied twice."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.moto]
ROOT = Path(__file__).resolve().parents[2]


def test_the_demo_runs_every_iot_task_once_with_a_worker_killed_mid_shard() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "iotsched.cli",
            "demo",
            "--json",
            "--devices",
            "3000",
            "--days",
            "1",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=400,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout)
    assert summary["all_final"] is True
    assert set(summary["instances_by_status"]) == {"succeeded"}
    assert summary["worker_kills"] == 1 and summary["failovers"] >= 1
    assert summary["killed"]["instance_id"].startswith("archive-cold-data@")
    # Every due minute was delivered twice, concurrently, and some a third time, late (after
    # the next due minute's); a second dispatcher raced the bucket dispatchers on others.
    late = summary["late_ticks_delivered"]
    assert late > 0 and summary["racer"]["minutes_raced"] > 0
    assert summary["ticks_delivered"] == 2 * summary["simulated"]["due_minutes"] + late
    # The guarantee, happening: claims the store refused (counted by the dispatchers whose
    # claims lost), copies that found their minute's work done, and no slot claimed or effect
    # applied twice.
    assert summary["duplicate_claims_rejected"] > 0
    assert summary["duplicate_claims_rejected"] == sum(
        summary["duplicate_claims_rejected_by"].values()
    )
    assert summary["duplicate_ticks_absorbed"] > 0
    assert summary["racer"]["errors"] == []
    assert summary["claims_by_ticks"] == summary["distinct_claims_by_ticks"] > 0
    assert summary["slots_claimed_twice"] == 0
    # Computed from the accounts, the reminder topic's deliveries and the bucket's versions.
    assert summary["effects_applied_twice"] == 0
    assert summary["effect_checks"]["notices_delivered"] > 0
    # One simulated day (UTC): three daily reports and the weekly one at Monday 00:10 Berlin.
    assert summary["reports_written"] == 4
    assert sorted(summary["report_keys"]) == [
        "reports/acme/daily/2026-11-29.json",
        "reports/globex/daily/2026-11-29.json",
        "reports/globex/weekly/2026-11-29.json",
        "reports/initech/daily/2026-11-28.json",
    ]
    tasks = summary["tasks"]
    assert tasks["offline-inspection"]["instances"] == 12  # every 2 hours
    assert (
        tasks["offline-inspection"]["devices_marked_offline"]
        == (summary["effect_checks"]["devices_offline"])
    )
    assert tasks["archive-cold-data"]["objects_archived"] > 0
    assert (
        tasks["plan-expiry-reminders"]["notices_sent"]
        == (summary["effect_checks"]["notices_delivered"])
    )
    for tenant in ("acme", "globex", "initech"):
        assert tasks[f"billing-settlement-{tenant}"]["deductions"] == 5  # one per account
    # The fleet phase, on the workers' real clock: a rollout rate held in every minute, and
    # abort criteria that stopped a rollout with no shard started after the decision.
    fleet = summary["fleet"]
    check = fleet["fleet-firmware-check"]
    assert check["status"] == "succeeded"
    assert check["shard_starts"] == check["shards_planned"] == 24
    assert check["max_starts_in_a_minute"] <= check["rate_limit_per_minute"] == 12
    assert len(check["starts_per_minute"]) >= 2  # 24 shards at 12 a minute span 2 minutes
    reboot = fleet["fleet-gateway-reboot"]
    assert reboot["status"] == "aborted"
    assert "failed" in reboot["reason"]
    assert 10 <= reboot["shard_starts"] < reboot["shards_planned"] == 30
    assert reboot["max_starts_in_a_minute"] <= 10
    assert reboot["starts_after_the_end"] == 0
    assert reboot["alerts"] == ["instance_aborted"]
    assert reboot["task_paused"] is True and "aborted" in reboot["pause_note"]
    # The only alert is the abort's: the replayed days raise none (no missed run, although
    # every replayed fire time is long past on the real clock).
    assert [a["type"] for a in summary["alerts"]] == ["instance_aborted"]
