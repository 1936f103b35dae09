"""`iotsched demo --json` end to end: real processes, a real SIGKILL, every instance final."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.moto]
ROOT = Path(__file__).resolve().parents[2]


def test_the_demo_kills_a_worker_fails_over_and_ends_every_instance() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "iotsched.cli", "demo", "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout)
    assert summary["all_final"] is True
    assert summary["instances_by_status"] == {"succeeded": 12, "failed": 2}
    assert summary["shards_by_status"] == {"succeeded": 53, "failed": 2}
    assert summary["worker_kills"] == 1 and summary["failovers"] >= 1
    assert summary["duplicate_claims_rejected"] >= 1
    assert summary["alerts_published"] == 2
    assert {a["type"] for a in summary["alerts"]} == {"instance_failed"}
