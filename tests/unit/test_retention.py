"""A task's retention (`retention: {days: N}`): validated with the task file, defaults
documented, and effect keys kept past any redelivery of the shard queue's messages."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from iotsched.core.task_policies import (
    DEFAULT_RETENTION_DAYS,
    EFFECT_RETENTION_FLOOR_DAYS,
    MAX_RETENTION_DAYS,
)
from iotsched.local.template import load
from iotsched.services.definitions.task_file import (
    TaskFileError,
    parse_task_file,
)
from tests.support import task

ROOT = Path(__file__).resolve().parents[2]
DAY_S = 86_400


def _file(**fields: Any) -> dict[str, Any]:
    return {"tasks": [{"id": "kept", "handler": "noop", "trigger": {"rate": "1h"}, **fields}]}


def test_a_task_without_retention_keeps_its_records_the_default_30_days() -> None:
    assert DEFAULT_RETENTION_DAYS == 30
    (definition,) = parse_task_file(_file(), handlers={"noop"})
    assert definition.retention.days == DEFAULT_RETENTION_DAYS
    assert task("t", retention={"days": 400}).retention.days == 400


@pytest.mark.parametrize(
    ("retention", "problem"),
    [
        ({"days": 0}, "task 'kept': retention.days: Input should be greater than or equal to 1"),
        (
            {"days": MAX_RETENTION_DAYS + 1},
            "task 'kept': retention.days: Input should be less than or equal to 3650",
        ),
        (
            {"days": "a week"},
            "task 'kept': retention.days: Input should be a valid integer, unable to parse string as an integer",
        ),
        ({"weeks": 2}, "task 'kept': retention.weeks: Extra inputs are not permitted"),
        (30, "task 'kept': retention: Input should be a valid dictionary or instance of Retention"),
    ],
)
def test_a_bad_retention_is_named_and_nothing_parsed(retention: Any, problem: str) -> None:
    with pytest.raises(TaskFileError) as err:
        parse_task_file(_file(retention=retention), handlers={"noop"})
    assert err.value.problems == [problem]


def test_effect_keys_outlive_every_message_the_shard_queue_and_its_dlq_can_hold() -> None:
    """A copy of a shard message may come back while the queue keeps it, and after a redrive
    from the DLQ: its effect keys must still be there, whatever the task's retention."""
    resources = load(ROOT / "template.yaml")["Resources"]
    kept_s = (
        resources["ShardQueue"]["Properties"]["MessageRetentionPeriod"]
        + resources["ShardDLQ"]["Properties"]["MessageRetentionPeriod"]
    )
    assert kept_s <= EFFECT_RETENTION_FLOOR_DAYS * DAY_S
