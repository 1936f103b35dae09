"""Rollout rates on the local runtime: real worker processes, SQS delays and the gate on
DynamoDB (moto). Two instances of one task share a tenant's budget of 3 shard starts a minute:
each sends its 3 shards at once, so half of them must wait for a later minute (a delayed copy
of their message). The workers count minutes on their own (wall) clocks, as on AWS."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime

import pytest

from iotsched.core.instance_record import InstanceStatus
from iotsched.core.shard_record import ShardStatus
from iotsched.core.timeutil import floor_minute
from iotsched.local.runtime import LocalRuntime
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.definitions.task_file import parse_task_file
from iotsched.services.wiring import Wiring
from iotsched.tasklib import registry
from tests.support import PATIENCE_S

pytestmark = [pytest.mark.slow, pytest.mark.moto, pytest.mark.wall_minutes]

RATE = 3


def test_rollout_starts_never_pass_the_rate_and_every_shard_runs_once(
    runtime: LocalRuntime, services: Wiring
) -> None:
    start = datetime(2026, 2, 2, 9, 58, tzinfo=UTC)
    definitions = parse_task_file(
        {
            "tasks": [
                {
                    "id": "fleet-push",
                    "tenant": "acme",
                    "handler": "noop",
                    "trigger": {"rate": "1h"},
                    "sharding": {"strategy": "id_range", "shards": 3, "id_max": 300},
                    "rollout": {"max_shards_per_minute": RATE, "scope": "tenant"},
                    "timeout_s": 2,
                }
            ]
        },
        handlers=registry(),
    )
    apply_tasks(definitions, services.tasks, now=start)
    ids = ["fleet-push@2026-02-02T10:00Z", "fleet-push@2026-02-02T11:00Z"]
    runtime.tick(datetime(2026, 2, 2, 10, 0, tzinfo=UTC))
    runtime.tick(datetime(2026, 2, 2, 11, 0, tzinfo=UTC))

    def ended() -> bool:
        found = [services.instances.get_instance(i) for i in ids]
        return all(i is not None and i.status.final for i in found)

    assert runtime.wait_for(ended, PATIENCE_S)
    starts: Counter[datetime] = Counter()
    for instance_id in ids:
        instance = services.instances.get_instance(instance_id)
        assert instance is not None and instance.status is InstanceStatus.SUCCEEDED
        shards = services.instances.list_shards(instance_id)
        assert [s.status for s in shards] == [ShardStatus.SUCCEEDED] * 3
        assert [len(s.attempts) for s in shards] == [1, 1, 1]  # every shard ran once
        for shard in shards:
            starts[floor_minute(shard.attempts[0].started_at)] += 1
    assert sum(starts.values()) == 6
    assert max(starts.values()) <= RATE  # never past the shared rate in any minute
    assert len(starts) >= 2  # so some shards waited for a later minute
