"""The alert policy's pure parts: the task file's `alerts:` fields and their errors, threshold
windows, silences (recurring in a timezone, or one period), and when a fire time is missed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from iotsched.core.alertpolicy import missed_after, silenced_until, window_start
from iotsched.core.task_alerts import (
    Alerts,
    Threshold,
)
from tests.support import task


def at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def test_a_task_file_sets_a_policy_and_without_one_has_none() -> None:
    plain = task("t")
    assert not plain.alerts.has_policy
    with_policy = task("t", alerts={"threshold": {"count": 10, "window_s": 300}})
    assert with_policy.alerts.has_policy
    assert task("t", alerts={"recovery": True}).alerts.has_policy


@pytest.mark.parametrize(
    ("alerts", "says"),
    [
        ({"threshold": {"count": 0, "window_s": 300}}, "count"),
        ({"threshold": {"count": 10, "window_s": 90}}, "multiple of 60"),
        ({"silence": [{"cron": "0 2 * * *"}]}, "both `cron` and `duration`"),
        ({"silence": [{"start": "2026-12-01T00:00Z"}]}, "`start` before `end`"),
        (
            {"silence": [{"start": "2026-12-01T02:00Z", "end": "2026-12-01T01:00Z"}]},
            "`start` before `end`",
        ),
        ({"silence": [{"cron": "0 2 * *", "duration": "1h"}]}, "5 fields"),
        ({"silence": [{"cron": "0 2 * * *", "duration": "1h", "timezone": "Mars/Base"}]}, "Mars"),
        (
            {"silence": [{"cron": "0 2 * * *", "duration": "1h", "start": "2026-12-01T00:00Z"}]},
            "either",
        ),
        ({"threshold": {"count": 10, "window_s": 300, "per": "task"}}, "per"),
    ],
)
def test_a_bad_policy_is_refused_naming_what_is_wrong(alerts: dict[str, object], says: str) -> None:
    with pytest.raises(ValidationError) as err:
        task("t", alerts=alerts)
    assert says in str(err.value)


def test_windows_are_aligned_on_the_epoch() -> None:
    five = Threshold(count=10, window_s=300)
    assert window_start(five, at("2026-11-29T12:04:59Z")) == at("2026-11-29T12:00:00Z")
    assert window_start(five, at("2026-11-29T12:05:00Z")) == at("2026-11-29T12:05:00Z")
    day = Threshold(count=1, window_s=86_400)
    assert window_start(day, at("2026-11-29T23:59:00Z")) == at("2026-11-29T00:00:00Z")


def test_a_recurring_silence_holds_in_its_timezone_across_daylight_saving() -> None:
    policy = Alerts.model_validate(
        {"silence": [{"cron": "0 2 * * *", "duration": "2h", "timezone": "Europe/Berlin"}]}
    )
    # an ordinary winter night: 02:00-04:00 CET is 01:00-03:00 UTC
    assert silenced_until(policy, at("2026-11-29T00:59:00Z")) is None
    assert silenced_until(policy, at("2026-11-29T01:00:00Z")) == at("2026-11-29T03:00:00Z")
    assert silenced_until(policy, at("2026-11-29T02:59:00Z")) == at("2026-11-29T03:00:00Z")
    assert silenced_until(policy, at("2026-11-29T03:00:00Z")) is None
    # the spring-forward night: 02:00 does not exist, the silence opens at 03:00 CEST (01:00Z)
    assert silenced_until(policy, at("2026-03-29T01:30:00Z")) == at("2026-03-29T03:00:00Z")
    assert silenced_until(policy, at("2026-03-29T00:30:00Z")) is None


def test_periods_hold_between_start_and_end_and_the_latest_end_wins() -> None:
    policy = Alerts.model_validate(
        {
            "silence": [
                {"start": "2026-12-24T00:00Z", "end": "2026-12-27T00:00Z"},
                {"start": "2026-12-26T00:00Z", "end": "2026-12-28T00:00Z"},
            ]
        }
    )
    assert silenced_until(policy, at("2026-12-23T23:59:00Z")) is None
    assert silenced_until(policy, at("2026-12-24T00:00:00Z")) == at("2026-12-27T00:00:00Z")
    assert silenced_until(policy, at("2026-12-26T12:00:00Z")) == at("2026-12-28T00:00:00Z")
    assert silenced_until(policy, at("2026-12-28T00:00:00Z")) is None


def test_a_fire_time_is_missed_past_its_grace_and_never_within_two_minutes() -> None:
    assert missed_after(300) == timedelta(seconds=300)
    assert missed_after(0) == timedelta(seconds=120)
    assert missed_after(30) == timedelta(seconds=120)


def test_a_tenants_defaults_fill_the_alert_fields_its_tasks_do_not_set() -> None:
    from iotsched.services.definitions.task_file import (
        TaskFileError,
        parse_task_file,
    )
    from iotsched.tasklib import registry

    handlers = registry()
    file = {
        "tenants": [
            {
                "name": "acme",
                "alerts": {
                    "threshold": {"count": 10, "window_s": 300},
                    "recovery": True,
                    "severity": "low",
                },
            }
        ],
        "tasks": [
            {"id": "a", "handler": "noop", "trigger": {"rate": "1h"}, "tenant": "acme"},
            {
                "id": "b",
                "handler": "noop",
                "trigger": {"rate": "1h"},
                "tenant": "acme",
                "alerts": {"threshold": {"count": 3, "window_s": 60}, "severity": "critical"},
            },
            {"id": "c", "handler": "noop", "trigger": {"rate": "1h"}, "tenant": "globex"},
            {"id": "d", "handler": "noop", "trigger": {"rate": "1h"}},
        ],
    }
    a, b, c, d = parse_task_file(file, handlers=handlers)
    assert a.alerts == Alerts(
        threshold=Threshold(count=10, window_s=300), recovery=True, severity="low"
    )
    # the task's own fields win, field by field
    assert b.alerts == Alerts(
        threshold=Threshold(count=3, window_s=60), recovery=True, severity="critical"
    )
    assert not c.alerts.has_policy and not d.alerts.has_policy
    twice = {**file, "tenants": file["tenants"] * 2}
    with pytest.raises(TaskFileError, match="tenant 'acme' appears twice"):
        parse_task_file(twice, handlers=handlers)
    bad = {**file, "tenants": [{"name": "acme", "alerts": {"threshold": {"count": 0}}}]}
    with pytest.raises(TaskFileError, match="threshold"):
        parse_task_file(bad, handlers=handlers)
