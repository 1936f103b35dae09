"""Records name what happened: each outcome, status and trigger kind means one thing, and each
is documented in docs/operations.md ("What the records say") and docs/openapi.json."""

from __future__ import annotations

import json
import re
from datetime import date, timedelta
from enum import StrEnum
from pathlib import Path
from typing import cast

import pytest

from iotsched import bootstrap
from iotsched.adapters.memory.queues import MemoryAlertSink
from iotsched.clock import ManualClock
from iotsched.core.attempt_record import Attempt, AttemptOutcome
from iotsched.core.instance_record import InstanceStatus, TriggerKind
from iotsched.core.shard_record import ShardStatus
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.operations.on_demand import (
    run_now,
    submit,
)
from iotsched.services.scheduling.tick import dispatch_tick
from tests.support import T0, task

ROOT = Path(__file__).resolve().parents[2]
DAY = timedelta(days=1)


def test_a_submission_has_its_own_trigger_kind_and_keeps_it_when_fired() -> None:
    clock = ManualClock(T0)
    services = bootstrap.build_memory(clock=clock)
    apply_tasks([task("t", trigger={"rate": "1d"})], services.tasks, now=T0 - DAY)
    at = T0 + timedelta(hours=2)
    pending = submit("t", services, at=at)
    assert pending.trigger_kind is TriggerKind.SUBMITTED
    clock.set(at + timedelta(seconds=2))
    assert pending.instance_id in dispatch_tick(at, services).claimed
    fired = services.instances.get_instance(pending.instance_id)
    assert fired is not None and fired.trigger_kind is TriggerKind.SUBMITTED
    # `run` stays `manual`
    manual, _ = run_now("t", services, request_id="r1")
    assert manual.trigger_kind is TriggerKind.MANUAL


def test_the_catch_up_dropped_alert_carries_business_dates_and_lists_the_dropped_slots() -> None:
    # a daily 00:05 Shanghai task (previous_day), unreached for five days, catch_up 1
    definition = task(
        "t",
        trigger={"cron": "5 0 * * *", "timezone": "Asia/Shanghai"},
        misfire={"policy": "catch_up", "max_catch_up": 1, "grace_s": 300},
    )
    clock = ManualClock(T0)
    services = bootstrap.build_memory(clock=clock)
    apply_tasks([definition], services.tasks, now=T0)  # T0 is 2026-11-29T12:00Z
    now = T0 + 5 * DAY
    clock.set(now)
    dispatch_tick(now, services)
    (alert,) = [
        a
        for a in cast("MemoryAlertSink", services.alerts).published
        if a.type == "catch_up_dropped"
    ]
    # due: 16:05 UTC on 11-29 .. 12-03; the first fires (catch-up), the other four drop
    assert alert.business_date == date(2026, 11, 30)  # 00:05 on 12-01 in Shanghai
    assert alert.slots == [
        {"slot": "2026-11-30T16:05Z", "business_date": "2026-11-30"},
        {"slot": "2026-12-01T16:05Z", "business_date": "2026-12-01"},
        {"slot": "2026-12-02T16:05Z", "business_date": "2026-12-02"},
        {"slot": "2026-12-03T16:05Z", "business_date": "2026-12-03"},
    ]
    assert alert.instance_id == "t@2026-11-30T16:05Z"
    assert "4 missed slot(s)" in (alert.reason or "")


# -- documentation ------------------------------------------------------------------------------

GUIDE_TABLES = {
    "AttemptOutcome": "Attempt outcomes",
    "InstanceStatus": "Instance statuses",
    "ShardStatus": "Shard statuses",
    "TriggerKind": "Trigger kinds",
}
RECORD_ENUMS: dict[str, type[StrEnum]] = {
    "AttemptOutcome": AttemptOutcome,
    "InstanceStatus": InstanceStatus,
    "ShardStatus": ShardStatus,
    "TriggerKind": TriggerKind,
}


def _guide_table(heading: str) -> dict[str, str]:
    """The first column (a `value`) and the rest of each row of the table after `heading`."""
    text = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    start = text.index(f"**{heading}**")
    rows: dict[str, str] = {}
    for line in text[start:].splitlines()[1:]:
        if not line.startswith("|") and rows:
            break
        match = re.match(r"\| `([a-z_]+)` \|(.+)\|\s*$", line)
        if match:
            rows[match.group(1)] = match.group(2)
    return rows


@pytest.mark.parametrize("name", GUIDE_TABLES)
def test_every_value_has_a_row_in_the_guide_saying_what_it_means_and_who_sets_it(
    name: str,
) -> None:
    enum = RECORD_ENUMS[name]
    rows = _guide_table(GUIDE_TABLES[name])
    assert sorted(rows) == sorted(v.value for v in enum)
    for value, rest in rows.items():
        meaning, who = (cell.strip() for cell in rest.split("|")[:2])
        assert meaning and who, value


@pytest.mark.parametrize("name", GUIDE_TABLES)
def test_every_value_is_described_in_the_openapi_document(name: str) -> None:
    enum = RECORD_ENUMS[name]
    document = json.loads((ROOT / "docs" / "openapi.json").read_text(encoding="utf-8"))
    schema = document["components"]["schemas"][name]
    assert schema["enum"] == [v.value for v in enum]
    described = re.findall(r"^- `([a-z_]+)`", schema["description"], flags=re.MULTILINE)
    assert described == [v.value for v in enum]


def test_no_record_names_an_outcome_that_is_documented_nowhere() -> None:
    # `released` was written by retried attempts; a stored one reads as `failed`
    attempt = Attempt.model_validate(
        {"number": 1, "worker": "w", "started_at": T0, "outcome": "released"}
    )
    assert attempt.outcome is AttemptOutcome.FAILED
    with pytest.raises(ValueError, match="outcome"):
        Attempt.model_validate(
            {"number": 1, "worker": "w", "started_at": T0, "outcome": "whatever"}
        )
