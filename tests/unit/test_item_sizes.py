"""What the DynamoDB codec stores of tasks and instances: everything read back, and items of a
task that uses no policy within one write unit (1 KB), so that a policy not used costs nothing."""

from __future__ import annotations

from datetime import timedelta

import pytest

from iotsched.adapters.dynamodb.codec import instance_from, instance_item, task_from, task_item
from iotsched.core.instance_record import (
    InstanceRecord,
    InstanceStatus,
)
from iotsched.core.task_definition import Priority
from tests.support import T0, instance, item_size, task, task_record

WRITE_UNIT = 1024

# Read back, a field left out of the body takes its default: these defaults are part of the
# stored format, and changing one changes what every stored instance means.
STORED_DEFAULTS = {
    "tenant": None,
    "trigger_kind": "scheduled",
    "covers": [],
    "covers_count": 0,
    "reason": None,
    "failed_shards": 0,
    "unrun_shards": 0,
    "params": {},
    "backoff_s": 0,
    "severity": "high",
    "exclusive": False,
    "reduce": None,
    "run": 1,
    "rerun_of": None,
    "only": None,
    "fire_at": None,
    "finished_at": None,
    "dispatch_lease_until": None,
    "sent": 0,
    "owed": [],
    "retention_days": 30,
    "rollout": None,
    "abort": None,
    "window": None,
    "shard_spread_s": 0,
    "pause_on_failure": False,
    "alert_policy": None,
    "priority": "normal",
    "tenant_cap": None,
    "tenant_rate": None,
    "instance_timeout_s": None,
    "waiting": None,
}


def test_the_instance_defaults_are_the_stored_ones() -> None:
    defaults = {
        name: info.get_default(call_default_factory=True)
        for name, info in InstanceRecord.model_fields.items()
        if not info.is_required()
    }
    assert defaults == STORED_DEFAULTS


def _bounds(n: int) -> list[dict[str, int]]:
    return [{"start": i * 1000, "end": (i + 1) * 1000} for i in range(n)]


@pytest.mark.parametrize(
    "inst",
    [
        instance("inspect-offline-devices", shards=_bounds(4), tenant="acme"),
        instance(
            "fleet-reboot",
            shards=_bounds(3),
            tenant="acme",
            params={"command": "reboot"},
            retry={"max_attempts": 5, "backoff_s": 0},
            rollout={"max_shards_per_minute": 2},
            abort={"failure_percent": 20, "min_executed": 3},
            priority="high",
        ),
        instance("t", shards=2).model_copy(
            update={
                "status": InstanceStatus.FAILED,
                "reason": "shard 1 failed",
                "finished_at": T0 + timedelta(minutes=3),
                "priority": Priority.LOW,
            }
        ),
    ],
    ids=["plain", "policies", "final"],
)
def test_an_instance_item_reads_back_whole(inst: InstanceRecord) -> None:
    item = instance_item(inst, 16)
    assert instance_from(item) == inst


def test_an_instance_without_policies_takes_one_write_unit() -> None:
    inst = instance("inspect-offline-devices", shards=_bounds(4), tenant="acme")
    item = instance_item(inst, 16)
    assert item_size(item) <= WRITE_UNIT
    assert "rollout" not in item["body"]["S"]
    for unused in ("rollout", "abort", "window", "alert_policy", "rerun_of", "fire_at", "priority"):
        assert f'"{unused}"' not in item["body"]["S"]


def test_a_plain_task_item_takes_one_write_unit() -> None:
    definition = task(
        "tenant-daily-report",
        tenant="acme",
        trigger={"cron": "0 2 * * *", "timezone": "Asia/Shanghai"},
        params={"format": "pdf"},
    )
    record = task_record(definition, next_fire=T0)
    item = task_item(record, 16)
    assert item_size(item) <= WRITE_UNIT
    assert task_from(item).definition == definition
