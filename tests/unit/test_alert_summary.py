"""Alerts are bounded whatever the instance's size: the first failed shards, the count, and
how to list the rest (an SNS message carries at most 256 KiB, an alert record 400 KB)."""

from __future__ import annotations

from iotsched.core.instance_record import InstanceStatus
from iotsched.core.shard_record import (
    ShardRecord,
    ShardStatus,
)
from iotsched.services.notices.alerts import (
    MAX_LISTED_FAILED,
    alert_for,
)
from tests.support import instance

SNS_MAX_BYTES = 256 * 1024


def failed_shards(iid: str, count: int) -> list[ShardRecord]:
    return [
        ShardRecord(
            instance_id=iid,
            index=n,
            bounds={"tenant": "acme", "group": f"g-{n:05d}", "first_id": "dev-000000"},
            status=ShardStatus.FAILED,
            attempt=3,
            max_attempts=3,
            error="TimeoutError: " + "x" * 2000,
        )
        for n in reversed(range(count))
    ]


def test_an_instance_with_2500_failed_shards_alerts_within_the_topics_limit() -> None:
    ended = instance(shards=2500).model_copy(update={"status": InstanceStatus.FAILED})
    alert = alert_for(ended, failed_shards(ended.instance_id, 2500))
    assert len(alert.model_dump_json().encode()) < SNS_MAX_BYTES // 4
    assert [s["shard"] for s in alert.failed_shards] == list(range(MAX_LISTED_FAILED))
    assert alert.failed_shard_count == 2500
    assert alert.more_failed_shards is not None
    assert f"iotsched shards '{ended.instance_id}'" in alert.more_failed_shards
    assert f"/api/instances/{ended.instance_id}/shards" in alert.more_failed_shards


def test_a_small_failure_lists_every_failed_shard_and_nothing_more() -> None:
    ended = instance(shards=3).model_copy(update={"status": InstanceStatus.FAILED})
    shards = failed_shards(ended.instance_id, 2)
    shards.append(shards[0].model_copy(update={"index": 2, "status": ShardStatus.SUCCEEDED}))
    alert = alert_for(ended, shards)
    assert [s["shard"] for s in alert.failed_shards] == [0, 1]
    assert (alert.failed_shard_count, alert.more_failed_shards) == (2, None)


def test_large_bounds_are_left_to_the_shard_record() -> None:
    ended = instance(shards=1).model_copy(update={"status": InstanceStatus.FAILED})
    (shard,) = failed_shards(ended.instance_id, 1)
    alert = alert_for(ended, [shard.model_copy(update={"bounds": {"ids": ["x" * 100] * 3000}})])
    assert len(alert.model_dump_json()) < 4000
    assert alert.failed_shards[0]["bounds"] == {
        "omitted": "312009 characters; see the shard record"
    }
