"""Fairness between tenants: how long a small task waits behind another tenant's flood.

On the local runtime (real worker processes: 2 on the normal priority shard queue, 1 on each
of the high and low ones), tenant A floods the queue with one business date of a task of
`a_shards` no-op shards (a backfill), and `b_after_s` seconds after the flood began tenant B
runs a task of `b_shards` no-op shards (`iotsched run`). B's start delay of a shard is its first
attempt's start less the instant B's run was asked for; the figure is the p95 (nearest rank)
of B's shards. Phases, one runtime, each from an empty shard queue (A's instance is cancelled
and the queues purged after each):

* `fifo`: A's backfill at `normal`, sharing B's queue, served in arrival order (the emulator's
  fair queuing off): a deployment without priorities or fair queues;
* `fair`: the backfill at its default priority (`low`), B's run at its task's (`normal`);
* `same_priority_fair`: A's backfill at `normal`, as in `fifo`, with fair queuing (each
  message names its tenant; the emulator serves quiet tenants first, as SQS does);
* `capped_fifo` and `capped_fair`: the same two with A's tenant under `max_concurrent_shards`
  (`a_cap`): its instance keeps only a window on the queue; its shards run `CAPPED_SHARD_S`
  each. In `capped_fair`, after B ended, the requests every process made over
  `waiting_window_s` while A's shards waited are counted at the emulator, per waiting shard
  and minute.
"""

from __future__ import annotations

import contextlib
import math
import time
from datetime import UTC, date, datetime, timedelta
from typing import Any

from bench.common import service_timer, tag_as_poll
from bench.throughput import local_runtime

A_TASK = "tenant-a-backfill"
A_CAPPED_TASK = "tenant-a-capped-backfill"
B_TASK = "tenant-b-inspection"
POLL_S = 0.2
TIMEOUT_S = 900.0
#: B's p95 start delay in a fair phase must stay within this (docs/design.md, section 12: on
#: the local runtime, D is a no-op shard and the rest is the send, the poll and the emulator),
#: and 10 times under FIFO's.
BOUND_S = 5.0
TARGET_RATIO = 10.0
#: A capped backlog's requests per waiting shard and minute must stay within this.
WAITING_REQUESTS_BOUND = 1.0
#: How long each shard of the capped backlog runs.
CAPPED_SHARD_S = 5.0


def _task_file(a_shards: int, b_shards: int, a_cap: int) -> dict[str, Any]:
    def task(task_id: str, tenant: str, shards: int) -> dict[str, Any]:
        return {
            "id": task_id,
            "tenant": tenant,
            "handler": "noop",
            "trigger": {"cron": "5 0 * * *", "timezone": "UTC"},
            "sharding": {"strategy": "id_range", "shards": shards, "id_max": 1_000_000},
            "instance_timeout_s": 86_400,
        }

    # The capped backlog's shards each run CAPPED_SHARD_S (one effect through the ledger): its
    # shards wait for minutes, and what the window's few running shards cost stays small.
    capped = task(A_CAPPED_TASK, "tenant-a-capped", a_shards)
    capped["handler"] = "chaos"
    capped["params"] = {"effects": 1, "unit_seconds": CAPPED_SHARD_S}
    return {
        "tenants": [{"name": "tenant-a-capped", "quotas": {"max_concurrent_shards": a_cap}}],
        "tasks": [task(A_TASK, "tenant-a", a_shards), capped, task(B_TASK, "tenant-b", b_shards)],
    }


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


def _requests() -> int:
    """Requests the emulator served so far, the benchmark's own polls left out."""
    count, _ = service_timer().snapshot()
    return sum(n for name, n in count.items() if not name.startswith("poll:"))


def _phase(
    services: Any,
    *,
    name: str,
    task: str,
    day: date,
    b_after_s: float,
    priority: str,
    fair: bool,
    waiting_window_s: float = 0.0,
) -> dict[str, Any]:
    from iotsched.core.task_definition import Priority
    from iotsched.local.moto_patches import arrival_order
    from iotsched.services.operations.on_demand import (
        backfill_slots,
        plan_backfill,
        run_now,
    )

    order = contextlib.nullcontext() if fair else arrival_order()
    with order:
        began = time.monotonic()
        plan = plan_backfill(task, services, start=day, end=day)
        outcomes = [what for _, what in backfill_slots(plan, services, priority=Priority(priority))]
        if outcomes != ["claimed"]:
            raise RuntimeError(f"the backfill claimed {outcomes}, not one instance")
        sent_s = time.monotonic() - began
        time.sleep(max(0.0, b_after_s - sent_s))
        asked = datetime.now(UTC)
        b, _ = run_now(B_TASK, services, request_id=f"bench-{name}")
        b = _wait_final(services, b.instance_id)
        a_id = f"{task}@{plan.slots[0].slot:%Y-%m-%dT%H:%MZ}"
        figures: dict[str, Any] = {}
        if waiting_window_s:
            figures = _waiting_cost(services, a_id, waiting_window_s)
    delays = [
        (shard.attempts[0].started_at - asked).total_seconds()
        for shard in services.instances.list_shards(b.instance_id)
        if shard.attempts
    ]
    if len(delays) != b.plan.count:
        raise RuntimeError(f"{len(delays)} of {b.plan.count} shards of B started")
    a_done = sum(1 for s in services.instances.list_shards(a_id) if s.status.final)
    return {
        "backfill_priority": priority,
        "fair_queuing": fair,
        "capped": task == A_CAPPED_TASK,
        "backfill_send_s": round(sent_s, 2),
        "b_asked_after_s": round(b_after_s, 2),
        "b_status": b.status.value,
        "b_start_delays_s": [round(d, 2) for d in sorted(delays)],
        "b_p95_start_s": round(p95(delays), 2),
        "a_shards_ended_when_b_ended": a_done,
        "a_instance": a_id,
        **figures,
    }


def _waiting_cost(services: Any, a_id: str, window_s: float) -> dict[str, Any]:
    """Requests of every process over `window_s` while A's shards wait, per waiting shard
    and minute (B has ended: A's work is all there is)."""
    started_before = len(services.instances.list_shards(a_id))
    mark, t = _requests(), time.monotonic()
    time.sleep(window_s)
    requests, elapsed = _requests() - mark, time.monotonic() - t
    a = services.instances.get_instance(a_id)
    started_after = len(services.instances.list_shards(a_id))
    waiting = a.plan.count - (started_before + started_after) / 2
    return {
        "waiting_window_s": round(elapsed, 1),
        "waiting_shards": round(waiting),
        "waiting_requests": requests,
        "a_shards_started_in_window": started_after - started_before,
        "requests_per_waiting_shard_per_minute": round(requests / (waiting * elapsed / 60), 5),
    }


def _clear(services: Any, runtime: Any, sqs: Any, a_id: str) -> None:
    """End A's flood: its instance cancelled, the shard queues purged, in-flight work settled."""
    from iotsched.services.operations.actions import cancel_instance

    with contextlib.suppress(Exception):  # it may have ended by itself
        cancel_instance(a_id, services, reason="benchmark phase over")
    settings = runtime.settings()
    for url in (settings.shard_queue_url, settings.shard_queue_low_url):
        if url:
            sqs.purge_queue(QueueUrl=url)
    time.sleep(3.0)  # the deliveries under way end (their instance is final)


def run(
    *,
    a_shards: int = 2_000,
    b_shards: int = 10,
    b_after_s: float = 5.0,
    a_cap: int = 1,
    waiting_window_s: float = 20.0,
) -> dict[str, Any]:
    """Every phase on one local runtime; the figures and what they were measured at."""
    from iotsched.adapters.aws import AwsClients
    from iotsched.bootstrap import build
    from iotsched.services.definitions.apply import apply_task_file

    with local_runtime() as runtime:
        settings = runtime.settings()
        if not (settings.shard_queue_high_url and settings.shard_queue_low_url):
            raise RuntimeError("the template has no priority shard queues")
        clients = AwsClients(region="us-east-1", endpoint_url=runtime.endpoint_url)
        services = build(settings, clients=clients)
        tag_as_poll(clients.dynamodb())  # the phases' reads are the benchmark's own
        sqs = tag_as_poll(clients.sqs())
        now = datetime.now(UTC)
        apply_task_file(
            _task_file(a_shards, b_shards, a_cap),
            handlers=services.handlers,
            store=lambda: services.tasks,
            now=lambda: now,
            actor="bench",
        )
        phases: dict[str, dict[str, Any]] = {}
        plan = (
            ("fifo", A_TASK, "normal", False),
            ("fair", A_TASK, "low", True),
            ("same_priority_fair", A_TASK, "normal", True),
            ("capped_fifo", A_CAPPED_TASK, "normal", False),
            ("capped_fair", A_CAPPED_TASK, "normal", True),
        )
        for n, (name, task, priority, fair) in enumerate(plan):
            phases[name] = _phase(
                services,
                name=name,
                task=task,
                day=now.date() - timedelta(days=n + 1),
                b_after_s=b_after_s,
                priority=priority,
                fair=fair,
                waiting_window_s=waiting_window_s if name == "capped_fair" else 0.0,
            )
            _clear(services, runtime, sqs, phases[name]["a_instance"])
        workers = {"normal": len(runtime.workers), "high_and_low": len(runtime.lane_workers)}

    def ratio(slow: str, fast: str) -> float:
        return float(
            round(phases[slow]["b_p95_start_s"] / max(phases[fast]["b_p95_start_s"], 0.01), 1)
        )

    same, capped = ratio("fifo", "same_priority_fair"), ratio("capped_fifo", "capped_fair")
    waiting = phases["capped_fair"]["requests_per_waiting_shard_per_minute"]
    lanes = ratio("fifo", "fair")
    return {
        "a_shards": a_shards,
        "b_shards": b_shards,
        "b_after_s": b_after_s,
        "a_cap": a_cap,
        "worker_processes": workers,
        "phases": phases,
        "tenant_fairness_p95_start_s": phases["fair"]["b_p95_start_s"],
        "tenant_fifo_p95_start_s": phases["fifo"]["b_p95_start_s"],
        "ratio": lanes,
        "tenant_fairness_same_priority_p95_s": phases["same_priority_fair"]["b_p95_start_s"],
        "same_priority_ratio": same,
        "tenant_fairness_same_priority_capped_p95_s": phases["capped_fair"]["b_p95_start_s"],
        "tenant_fifo_capped_p95_s": phases["capped_fifo"]["b_p95_start_s"],
        "capped_ratio": capped,
        "requests_per_waiting_shard_per_minute": waiting,
        "bound_s": BOUND_S,
        "met": phases["fair"]["b_p95_start_s"] <= BOUND_S and lanes >= TARGET_RATIO,
        "same_priority_met": (
            phases["same_priority_fair"]["b_p95_start_s"] <= BOUND_S and same >= TARGET_RATIO
        ),
        "waiting_met": waiting <= WAITING_REQUESTS_BOUND,
    }
