"""Triggers in words (the console's and `tasks list`'s `trigger_text`)."""

from __future__ import annotations

from typing import Any

import pytest

from iotsched.core.trigger_text import describe_trigger
from tests.support import task


@pytest.mark.parametrize(
    ("trigger", "words"),
    [
        ({"cron": "0 2 * * *", "timezone": "Europe/Berlin"}, "every day at 02:00 (Europe/Berlin)"),
        ({"cron": "* * * * *"}, "every minute (UTC)"),
        ({"cron": "*/5 * * * *"}, "every 5 minutes (UTC)"),
        ({"cron": "15 * * * *"}, "every hour at minute 15 (UTC)"),
        ({"cron": "0 */6 * * *"}, "every 6 hours at minute 0 (UTC)"),
        ({"cron": "5 0 * * 1-5"}, "every weekday (Monday to Friday) at 00:05 (UTC)"),
        ({"cron": "30 7 * * 1,3"}, "every Monday, Wednesday at 07:30 (UTC)"),
        ({"cron": "0 9 1 * *"}, "on day 1 of every month at 09:00 (UTC)"),
        ({"cron": "0 0 1 1 *"}, "cron 0 0 1 1 * (UTC)"),  # uncommon: the expression itself
        ({"rate": "1m"}, "every minute"),
        ({"rate": "15m"}, "every 15 minutes"),
        ({"rate": "90m"}, "every 90 minutes"),
        ({"rate": "2h"}, "every 2 hours"),
        ({"rate": "1d"}, "every day"),
        ({"at": "2026-12-01T10:00:00Z"}, "once, at 2026-12-01T10:00:00.000Z"),
        ({"after": ["ingest"]}, "after ingest succeeds (per business date)"),
        ({"after": ["a", "b"]}, "after a, b succeed (per business date)"),
    ],
)
def test_a_trigger_in_words(trigger: dict[str, Any], words: str) -> None:
    assert describe_trigger(task("x", trigger=trigger).trigger) == words
