"""Priority lanes on the local runtime: real worker processes on the three shard queues.

Tenant A backfills a task of many shards (low priority, its own queue and worker); tenant B's
run (normal) starts and ends while A's backlog still waits, and each queue's messages are
held, retried and deleted on the queue that delivered them: every shard of both runs once."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from iotsched.core.attempt_record import AttemptOutcome
from iotsched.core.instance_record import InstanceStatus
from iotsched.core.shard_record import ShardStatus
from iotsched.core.task_definition import Priority
from iotsched.local.runtime import LocalRuntime
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.definitions.task_file import parse_task_file
from iotsched.services.operations.on_demand import (
    backfill_slots,
    plan_backfill,
    run_now,
)
from iotsched.services.wiring import Wiring
from iotsched.tasklib import registry
from tests.support import PATIENCE_S

pytestmark = [pytest.mark.slow, pytest.mark.moto]

A_SHARDS = 300


def _task(task_id: str, tenant: str, shards: int) -> dict[str, object]:
    return {
        "id": task_id,
        "tenant": tenant,
        "handler": "noop",
        "trigger": {"cron": "5 0 * * *", "timezone": "UTC"},
        "sharding": {"strategy": "id_range", "shards": shards, "id_max": 1_000_000},
        "timeout_s": 2,
    }


def test_another_tenants_run_starts_and_ends_while_a_low_backfill_waits(
    runtime: LocalRuntime, services: Wiring
) -> None:
    definitions = parse_task_file(
        {"tasks": [_task("a-backfill", "tenant-a", A_SHARDS), _task("b-inspect", "tenant-b", 10)]},
        handlers=registry(),
    )
    apply_tasks(definitions, services.tasks, now=datetime.now(UTC))
    plan = plan_backfill("a-backfill", services, start=date(2026, 1, 5), end=date(2026, 1, 5))
    assert [what for _, what in backfill_slots(plan, services)] == ["claimed"]
    a_id = "a-backfill@2026-01-06T00:05Z"
    a = services.instances.get_instance(a_id)
    assert a is not None and a.priority is Priority.LOW

    b, _ = run_now("b-inspect", services, request_id="while-a-waits")
    assert b.priority is Priority.NORMAL

    def ended(instance_id: str) -> bool:
        found = services.instances.get_instance(instance_id)
        return found is not None and found.status.final

    assert runtime.wait_for(lambda: ended(b.instance_id), PATIENCE_S)
    # B ended while A's backlog waited on its own queue: one queue in arrival order would
    # have ended every shard of A first. (How far A got meanwhile depends on how the host's
    # cores share out between the two lanes' workers: over half of it, once, on a loaded
    # 2-core host; a quarter of A is left as the margin.)
    a_ended = [s for s in services.instances.list_shards(a_id) if s.status.final]
    assert len(a_ended) < A_SHARDS * 3 // 4
    b_shards = services.instances.list_shards(b.instance_id)
    assert [s.status for s in b_shards] == [ShardStatus.SUCCEEDED] * 10

    assert runtime.wait_for(lambda: ended(a_id), PATIENCE_S)
    a = services.instances.get_instance(a_id)
    assert a is not None and a.status is InstanceStatus.SUCCEEDED
    a_shards = services.instances.list_shards(a_id)
    assert len(a_shards) == A_SHARDS
    # Each shard succeeded once. An attempt before that one can only have run out of time on
    # a loaded host (its lease taken over: `lost`; or past its 2 s: `timed_out`), never failed.
    for shard in [*a_shards, *b_shards]:
        *before, last = [attempt.outcome for attempt in shard.attempts]
        assert last is AttemptOutcome.SUCCEEDED, shard
        assert set(before) <= {AttemptOutcome.LOST, AttemptOutcome.TIMED_OUT}, shard
    # Deleted from the queues that delivered them: nothing is left on any shard queue or on the
    # dead-letter queue. (Which queue a message is held and deleted on: tests/unit/test_priority_routing.py.)
    gauge = services.gauge
    assert gauge is not None
    assert runtime.wait_for(
        lambda: all(d.visible + d.in_flight + d.delayed == 0 for d in gauge.depths()), PATIENCE_S
    ), gauge.depths()
