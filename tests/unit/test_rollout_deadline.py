"""A rollout's instance deadline leaves room for the rollout's own pace."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from iotsched.core.decisions import Firing
from iotsched.core.instance_record import (
    InstanceStatus,
    TriggerKind,
)
from iotsched.core.task_definition import TaskDefinition
from iotsched.core.task_fleet_safety import (
    Ramp,
    Rollout,
)
from iotsched.core.task_record import TaskRecord
from iotsched.services.fleet.rollout import least_rollout_minutes
from iotsched.services.scheduling.build import build_instance

NOW = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)


def _instance(**fields: object):  # type: ignore[no-untyped-def]
    definition = TaskDefinition.model_validate(
        {
            "id": "fleet",
            "handler": "noop",
            "trigger": {"cron": "0 4 * * *"},
            "sharding": {"strategy": "id_range", "shards": 100, "id_max": 10_000},
            "instance_timeout_s": 600,
            **fields,
        }
    )
    task = TaskRecord(definition=definition, version=1, next_fire=NOW, updated_at=NOW)
    firing = Firing(slot=NOW, kind=TriggerKind.MANUAL, status=InstanceStatus.PLANNING)
    return build_instance(task, firing, claimed_at=NOW, dispatch_lease_s=60, directory=None)


def test_without_a_rollout_the_deadline_is_the_instance_timeout() -> None:
    assert _instance().deadline == NOW + timedelta(seconds=600)


def test_a_rollout_adds_the_least_time_its_rate_takes_to_start_every_shard() -> None:
    # 100 shards at 10 a minute: 10 minutes of starts beyond the 10-minute timeout.
    instance = _instance(rollout={"max_shards_per_minute": 10})
    assert instance.deadline == NOW + timedelta(seconds=600) + timedelta(minutes=10)
    # 10,000 devices at 2,500 a minute (shards of 100 devices): 4 minutes.
    instance = _instance(rollout={"max_devices_per_minute": 2_500})
    assert instance.deadline == NOW + timedelta(seconds=600) + timedelta(minutes=4)


def test_a_ramp_counts_its_slow_start() -> None:
    rollout = Rollout(max_shards_per_minute=8, ramp=Ramp(base=1, factor=2, every_succeeded=2))
    # Minute by minute: 1, 1, 2, 4, 8, 8 ... as if every start succeeded by its minute's end.
    assert least_rollout_minutes(rollout, [1] * 8) == 4  # 1 + 1 + 2 + 4
    assert least_rollout_minutes(rollout, [1] * 24) == 6  # then 8 + 8
    assert least_rollout_minutes(rollout, []) == 0


def test_a_shard_heavier_than_the_rate_takes_a_minute_of_its_own() -> None:
    rollout = Rollout(max_devices_per_minute=10)
    assert least_rollout_minutes(rollout, [25, 25, 5, 5]) == 3
