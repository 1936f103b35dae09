"""The chaos run's measure of a dead batch's waiting records (bench/chaos/checks.py
`stranded_records`), on shard records the worker's own code wrote on the memory fakes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import cast

from bench.chaos.checks import stranded_records
from iotsched import bootstrap
from iotsched.adapters.memory.queues import MemoryShardQueue
from iotsched.clock import ManualClock
from iotsched.core.task_definition import TaskDefinition
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.execution.batch import run_shard
from iotsched.services.execution.outcomes import Delivery
from iotsched.services.scheduling.tick import dispatch_tick

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
S = timedelta(seconds=1)


def test_the_chaos_run_measures_a_dead_batch_s_waiting_records_from_the_death() -> None:
    """Death to the first start in another invocation that held the record (by the start log:
    the record itself, or among the records that invocation had not started), and to the
    record's own first attempt."""
    clock = ManualClock(T0 + S)
    services = bootstrap.build_memory(clock=clock, handlers={"h": lambda ctx: None})
    definition = TaskDefinition.model_validate(
        {
            "id": "t",
            "handler": "h",
            "trigger": {"rate": "1h"},
            "sharding": {"strategy": "static", "shards": [{"n": i} for i in range(3)]},
            "timeout_s": 300,  # the template's worker timeout
        }
    )
    apply_tasks([definition], services.tasks, now=T0 - timedelta(hours=1))
    dispatch_tick(T0, services)
    messages = list(cast("MemoryShardQueue", services.queue).sent)
    iid = messages[0].instance_id
    died = clock.now()
    clock.advance(17 * S)
    held_at = clock.now().timestamp()
    run_shard(Delivery(messages[1].model_dump_json(), "rh-1"), services, worker="w2")
    clock.advance(30 * S)
    run_shard(Delivery(messages[2].model_dump_json(), "rh-2"), services, worker="w2")
    found = {(iid, s.index): s for s in services.instances.list_shards(iid)}
    starts = [
        # the dead process's own earlier start names the records too: not another invocation
        {
            "instance_id": iid,
            "shard": 0,
            "pid": 1,
            "time": died.timestamp() - 5,
            "waiting": [[iid, 1], [iid, 2]],
        },
        {"instance_id": iid, "shard": 1, "pid": 2, "time": held_at, "waiting": [[iid, 2]]},
    ]
    death = {"time": died.timestamp(), "pid": 1, "waiting": [[iid, 1], [iid, 2], ["other@x", 0]]}
    assert stranded_records([death], found, starts) == {
        "waiting": 3,
        "held_again": 2,
        "held_again_median_s": 17.0,
        "held_again_max_s": 17.0,
        "count": 2,
        "median_s": 32.0,
        "max_s": 47.0,
        "started_before": 0,
        "never_started_open": 1,
        "never_started_ended": 0,
    }
