"""`explain_cron`: the DST notes `iotsched times` prints."""

from __future__ import annotations

from datetime import UTC, datetime

from click.testing import CliRunner

from iotsched.cli.main import cli
from iotsched.core.timeline import explain_cron

SPRING = (datetime(2026, 3, 28, 22, tzinfo=UTC), datetime(2026, 3, 29, 3, tzinfo=UTC))
AUTUMN = (datetime(2026, 10, 24, 23, tzinfo=UTC), datetime(2026, 10, 25, 2, tzinfo=UTC))


def test_a_fixed_time_in_the_spring_gap_is_moved_past_it() -> None:
    (line,) = explain_cron("30 2 * * *", "Europe/Berlin", *SPRING)
    assert line.utc == datetime(2026, 3, 29, 1, 0, tzinfo=UTC)
    assert line.local.strftime("%H:%M %Z") == "03:00 CEST"
    assert line.note == "moved: 02:30 does not exist (spring forward)"


def test_a_wildcard_schedule_skips_the_gap_and_says_so() -> None:
    lines = explain_cron("*/30 * * * *", "Europe/Berlin", *SPRING)
    skipped = [line for line in lines if line.utc is None]
    assert [line.local.strftime("%H:%M") for line in skipped] == ["02:00", "02:30"]
    assert all(line.note.startswith("skipped") for line in skipped)
    fired = [line.utc for line in lines if line.utc is not None]
    assert fired == sorted(fired) and len(fired) == len(set(fired))


def test_the_repeated_hour_fires_once_for_fixed_time_and_twice_for_wildcards() -> None:
    (fixed,) = explain_cron("30 2 * * *", "Europe/Berlin", *AUTUMN)
    assert fixed.utc == datetime(2026, 10, 25, 0, 30, tzinfo=UTC)
    assert fixed.note == "repeated hour, first occurrence"
    notes = [
        (line.local.strftime("%H:%M%z"), line.note)
        for line in explain_cron("*/30 * * * *", "Europe/Berlin", *AUTUMN)
    ]
    assert ("02:30+0200", "repeated hour, first occurrence") in notes
    assert ("02:30+0100", "repeated hour, second occurrence") in notes


def test_times_cli_prints_json_and_rejects_bad_cron() -> None:
    runner = CliRunner()
    result = runner.invoke(
        cli,
        [
            "times",
            "30 2 * * *",
            "--timezone",
            "Europe/Berlin",
            "--from",
            "2026-03-28T00:00Z",
            "--to",
            "2026-03-30T00:00Z",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    import json

    lines = json.loads(result.output)
    assert [line["utc"] for line in lines] == [
        "2026-03-28T01:30:00+00:00",
        "2026-03-29T01:00:00+00:00",
    ]
    assert lines[1]["note"].startswith("moved")
    bad = runner.invoke(
        cli, ["times", "0 61 * * *", "--from", "2026-03-28T00:00Z", "--to", "2026-03-29T00:00Z"]
    )
    assert bad.exit_code == 2
    assert "Bad hour" in bad.output
