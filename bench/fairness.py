"""Fairness between tenants: how long a small task waits behind another tenant's backfill.

On the local runtime (real worker processes: 2 on the normal priority shard queue, 1 on each
of the high and low ones), tenant A backfills one business date of a task of `a_shards` no-op
shards, and `b_after_s` seconds after the backfill began tenant B runs a task of `b_shards`
no-op shards (`iotsched run`). B's start delay of a shard is its first attempt's start less the
instant B's run was asked for; the figure is the p95 (nearest rank) of B's shards.

Two phases in the same run, one runtime, each from an empty shard queue:

* `fifo`: the backfill asked at priority `normal`: A's and B's shards share one queue at one
  priority, the behaviour of a deployment without priorities;
* `fair`: the backfill at its default priority (`low`), B's run at its task's (`normal`).

A's backlog in the fifo phase is waited out (its instance ends) before the fair phase starts.
"""

from __future__ import annotations

import math
import time
from datetime import UTC, date, datetime, timedelta
from typing import Any

from bench.throughput import local_runtime

A_TASK = "tenant-a-backfill"
B_TASK = "tenant-b-inspection"
POLL_S = 0.2
TIMEOUT_S = 900.0
#: B's p95 start delay in the fair phase must stay within this (docs/design.md, section 12: on
#: the local runtime, D is a no-op shard and the rest is the send, the poll and the emulator),
#: and 10 times under FIFO's.
BOUND_S = 5.0
TARGET_RATIO = 10.0


def _tasks(a_shards: int, b_shards: int) -> list[Any]:
    from iotsched.core.task_definition import TaskDefinition

    def task(task_id: str, tenant: str, shards: int) -> TaskDefinition:
        return TaskDefinition.model_validate(
            {
                "id": task_id,
                "tenant": tenant,
                "handler": "noop",
                "trigger": {"cron": "5 0 * * *", "timezone": "UTC"},
                "sharding": {"strategy": "id_range", "shards": shards, "id_max": 1_000_000},
                "instance_timeout_s": 86_400,
            }
        )

    return [task(A_TASK, "tenant-a", a_shards), task(B_TASK, "tenant-b", b_shards)]


def p95(values: list[float]) -> float:
    """The nearest-rank 95th percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def _wait_final(services: Any, instance_id: str, timeout: float = TIMEOUT_S) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        instance = services.instances.get_instance(instance_id)
        if instance is not None and instance.status.final:
            return instance
        time.sleep(POLL_S)
    raise RuntimeError(f"{instance_id} did not end within {timeout:.0f} s")


def _phase(services: Any, *, mode: str, day: date, b_after_s: float) -> dict[str, Any]:
    from iotsched.core.task_definition import Priority
    from iotsched.services.operations.on_demand import (
        backfill_slots,
        plan_backfill,
        run_now,
    )

    priority = Priority.NORMAL if mode == "fifo" else Priority.LOW
    began = time.monotonic()
    plan = plan_backfill(A_TASK, services, start=day, end=day)
    outcomes = [what for _, what in backfill_slots(plan, services, priority=priority)]
    if outcomes != ["claimed"]:
        raise RuntimeError(f"the backfill claimed {outcomes}, not one instance")
    sent_s = time.monotonic() - began
    time.sleep(max(0.0, b_after_s - sent_s))
    asked = datetime.now(UTC)
    b, _ = run_now(B_TASK, services, request_id=f"bench-{mode}")
    b = _wait_final(services, b.instance_id)
    delays = [
        (shard.attempts[0].started_at - asked).total_seconds()
        for shard in services.instances.list_shards(b.instance_id)
        if shard.attempts
    ]
    if len(delays) != b.plan.count:
        raise RuntimeError(f"{len(delays)} of {b.plan.count} shards of B started")
    a_id = f"{A_TASK}@{plan.slots[0].slot:%Y-%m-%dT%H:%MZ}"
    a_done = sum(1 for s in services.instances.list_shards(a_id) if s.status.final)
    return {
        "backfill_priority": priority.value,
        "backfill_send_s": round(sent_s, 2),
        "b_asked_after_s": round(b_after_s, 2),
        "b_status": b.status.value,
        "b_start_delays_s": [round(d, 2) for d in sorted(delays)],
        "b_p95_start_s": round(p95(delays), 2),
        "a_shards_ended_when_b_ended": a_done,
        "a_instance": a_id,
    }


def run(*, a_shards: int = 2_000, b_shards: int = 10, b_after_s: float = 5.0) -> dict[str, Any]:
    """Both phases on one local runtime; the figures and what they were measured at."""
    from iotsched.adapters.aws import AwsClients
    from iotsched.bootstrap import build
    from iotsched.services.definitions.apply import apply_tasks

    with local_runtime() as runtime:
        settings = runtime.settings()
        if not (settings.shard_queue_high_url and settings.shard_queue_low_url):
            raise RuntimeError("the template has no priority shard queues")
        services = build(
            settings, clients=AwsClients(region="us-east-1", endpoint_url=runtime.endpoint_url)
        )
        now = datetime.now(UTC)
        apply_tasks(_tasks(a_shards, b_shards), services.tasks, now=now)
        yesterday = now.date() - timedelta(days=1)
        fifo = _phase(services, mode="fifo", day=yesterday - timedelta(days=1), b_after_s=b_after_s)
        # A's backlog drains before the fair phase: it starts from an empty queue too.
        _wait_final(services, fifo["a_instance"])
        fair = _phase(services, mode="fair", day=yesterday, b_after_s=b_after_s)
        workers = {"normal": len(runtime.workers), "high_and_low": len(runtime.lane_workers)}
    ratio = fifo["b_p95_start_s"] / max(fair["b_p95_start_s"], 0.01)
    return {
        "a_shards": a_shards,
        "b_shards": b_shards,
        "b_after_s": b_after_s,
        "worker_processes": workers,
        "phases": {"fifo": fifo, "fair": fair},
        "tenant_fairness_p95_start_s": fair["b_p95_start_s"],
        "tenant_fifo_p95_start_s": fifo["b_p95_start_s"],
        "ratio": round(ratio, 1),
        "bound_s": BOUND_S,
        "met": fair["b_p95_start_s"] <= BOUND_S and ratio >= TARGET_RATIO,
    }
