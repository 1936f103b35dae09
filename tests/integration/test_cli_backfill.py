"""`iotsched backfill --from/--to` takes business dates, through the installed command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import AwsResources

pytestmark = pytest.mark.moto

IOTSCHED = str(Path(sys.executable).with_name("iotsched"))
DAILY = """
tasks:
  - id: daily-report
    handler: noop
    trigger: {cron: "5 0 * * *", timezone: Asia/Shanghai}
    business_date: previous_day
"""


def _iotsched(aws: AwsResources, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "IOTSCHED_TABLE": aws.table,
        "IOTSCHED_SHARD_QUEUE_URL": aws.shard_queue_url,
        "IOTSCHED_ALERT_TOPIC_ARN": aws.alert_topic_arn,
        "AWS_ENDPOINT_URL": aws.endpoint_url,
        "COLUMNS": "200",
    }
    return subprocess.run(
        [IOTSCHED, *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def test_backfill_takes_business_dates_and_its_dry_run_shows_them(
    aws_resources: AwsResources, tmp_path: Path
) -> None:
    path = tmp_path / "tasks.yaml"
    path.write_text(DAILY)
    applied = _iotsched(aws_resources, "tasks", "apply", str(path))
    assert applied.returncode == 0, applied.stderr
    span = ["daily-report", "--from", "2026-11-30", "--to", "2026-12-02"]

    help_text = _iotsched(aws_resources, "backfill", "--help").stdout
    assert "Last business date, inclusive" in help_text

    dry = _iotsched(aws_resources, "backfill", *span, "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    slots = json.loads(dry.stdout)["slots"]
    assert slots == [
        {
            "slot": f"2026-{slot}:05:00.000Z",
            "business_date": day,
            "data_interval_start": f"2026-{start}:00:00.000Z",
            "data_interval_end": f"2026-{end}:00:00.000Z",
        }
        for slot, day, start, end in [
            ("11-30T16", "2026-11-30", "11-29T16", "11-30T16"),
            ("12-01T16", "2026-12-01", "11-30T16", "12-01T16"),
            ("12-02T16", "2026-12-02", "12-01T16", "12-02T16"),
        ]
    ]

    text = _iotsched(aws_resources, "backfill", *span, "--dry-run")
    assert text.returncode == 0, text.stderr
    lines = [line for line in text.stdout.splitlines() if "2026-12-01T16:05" in line]
    assert len(lines) == 1 and "2026-12-01" in lines[0], text.stdout
    assert "2026-11-30T16:00:00.000Z .. 2026-12-01T16:00:00.000Z" in lines[0]
    assert "3 slot(s) for business dates 2026-11-30 to 2026-12-02" in text.stdout
    assert _iotsched(aws_resources, "instances", "--json").stdout.strip() == "[]"

    done = _iotsched(aws_resources, "backfill", *span, "--max-concurrent", "3", "--json")
    assert done.returncode == 0, done.stderr
    assert set(json.loads(done.stdout)["results"].values()) == {"claimed"}
    made = json.loads(_iotsched(aws_resources, "instances", "--json").stdout)
    assert sorted(i["business_date"] for i in made) == ["2026-11-30", "2026-12-01", "2026-12-02"]
    assert {i["trigger_kind"] for i in made} == {"backfill"}
