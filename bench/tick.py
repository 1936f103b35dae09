"""A tick with many due tasks: claims per second and the whole tick's duration.

N one-shard `noop` tasks are all due at one instant; `dispatch_tick` (the dispatcher's use-case,
in this process, against the emulator) handles that tick: the due query, then (from
`BATCH_FROM` due tasks on) pages of `PAGE_TASKS` tasks, `TICK_WORKERS` at a time, each page one
transaction per ~100 claims, its shard messages in shared SendMessageBatch calls, one transaction
per ~100 running marks and one per ~100 task advances. Each run uses its own instant, so earlier
runs' tasks are no longer due.

The dispatcher's CPU time is the calling thread's plus that of every page, each measured on the
thread that ran it (pages run on pool threads; the emulator's threads are not counted).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.common import breakdown, deploy, emulator, median, rounded, service_timer
from bench.counting import aws_latency_s

T0 = datetime(2026, 12, 4, 0, 0, tzinfo=UTC)
TARGET_S = 60.0  # "completes well inside the minute"
SPEC_TASKS = 10_000
#: The Lambda memory size that comes with one full vCPU (CPU share scales with memory).
VCPU_MB = 1769


def run(*, tasks: int = SPEC_TASKS, runs: int = 5) -> dict[str, Any]:
    """`runs` ticks of `tasks` due tasks each."""
    from iotsched.bootstrap import build
    from iotsched.clock import ManualClock
    from iotsched.core.task_definition import TaskDefinition
    from iotsched.services.definitions.apply import apply_tasks
    from iotsched.services.scheduling.tick import (
        BATCH_FROM,
        PAGE_TASKS,
        TICK_WORKERS,
        dispatch_tick,
    )

    pages = _PageCpu()
    durations: list[float] = []
    cpu: list[float] = []
    claims: list[int] = []
    spans: dict[str, tuple[int, float]] = {}
    with emulator() as url:
        deployment = deploy(url)
        clock = ManualClock(T0)
        services = build(deployment.settings, clock=clock, clients=deployment.clients)
        sqs = deployment.clients.sqs()
        for n in range(runs):
            at = T0 + timedelta(hours=n)
            definitions = [
                TaskDefinition.model_validate(
                    {
                        "id": f"tick-{n}-{i:05d}",
                        "handler": "noop",
                        "trigger": {"at": at.isoformat()},
                    }
                )
                for i in range(tasks)
            ]
            apply_tasks(definitions, services.tasks, now=at - timedelta(minutes=1))
            clock.set(at)
            mark = service_timer().snapshot()
            pages.reset()
            started, started_cpu = time.perf_counter(), time.thread_time()
            with pages.timed():
                report = dispatch_tick(at, services)
            durations.append(time.perf_counter() - started)
            cpu.append(time.thread_time() - started_cpu + pages.cpu)
            for name, (calls, secs) in service_timer().since(mark).items():
                before = spans.get(name, (0, 0.0))
                spans[name] = (before[0] + calls, before[1] + secs)
            claims.append(len(report.claimed))
            if report.due_tasks != tasks or len(report.claimed) != tasks:
                raise RuntimeError(
                    f"tick found {report.due_tasks} due and claimed {len(report.claimed)} "
                    f"of {tasks}"
                )
            sqs.purge_queue(QueueUrl=deployment.queue_url)
    seconds = median(durations)
    cpu_ms_per_task = sum(cpu) / (tasks * runs) * 1000
    waits_per_task = sum(
        calls * aws_latency_s(*name.split(".", 1))
        for name, (calls, _s) in spans.items()
        if "." in name
    ) / (tasks * runs)
    in_flight = TICK_WORKERS if tasks >= BATCH_FROM else 1
    per_s = tasks / seconds
    measured_at_spec = tasks >= SPEC_TASKS
    at_spec = seconds * SPEC_TASKS / tasks
    return {
        "due_tasks": tasks,
        "runs": runs,
        "tick_seconds": [rounded(x, 2) for x in durations],
        "tick_median_s": rounded(seconds, 2),
        "claims_per_s": rounded(per_s, 1),
        "dispatcher_cpu_ms_per_task": rounded(cpu_ms_per_task, 2),
        "emulator_per_task": breakdown(spans, tasks * runs),
        "emulator_share": rounded(sum(s for _c, s in spans.values()) / sum(durations), 3),
        "tick_10k_due_seconds": rounded(at_spec, 1),
        "tick_10k_basis": (
            f"measured: median of {runs} ticks of {tasks} due tasks"
            if measured_at_spec
            else f"extrapolated linearly from the median of {runs} ticks of {tasks} due tasks"
        ),
        "path": (
            f"batched: pages of {PAGE_TASKS} tasks, {TICK_WORKERS} in flight"
            if tasks >= BATCH_FROM
            else "one by one"
        ),
        "requests_per_task": rounded(
            sum(c for name, (c, _s) in spans.items() if name != "other") / (tasks * runs), 4
        ),
        # On AWS (an estimate, not a measurement): this run's CPU per task on a Lambda's share
        # of a vCPU, plus its calls at bench.counting's assumed round trips, `in_flight` pages
        # waiting at once; added, not overlapped (an upper bound).
        "aws_estimate_10k_s": {
            f"{mb} MB": rounded(
                SPEC_TASKS * (cpu_ms_per_task / 1000 / min(1.0, mb / VCPU_MB))
                + SPEC_TASKS * waits_per_task / in_flight,
                1,
            )
            for mb in (512, VCPU_MB)
        },
        "target_s": TARGET_S,
        "met": at_spec < TARGET_S,
    }


class _PageCpu:
    """The CPU time of the tick's pages, each on the pool thread that ran it."""

    def __init__(self) -> None:
        self.cpu = 0.0
        self._lock = threading.Lock()

    def reset(self) -> None:
        self.cpu = 0.0

    @contextmanager
    def timed(self) -> Iterator[None]:
        from iotsched.services.scheduling import page_dispatch as dispatch

        original = dispatch._dispatch_page

        def page(*args: Any, **kwargs: Any) -> Any:
            started = time.thread_time()
            try:
                return original(*args, **kwargs)
            finally:
                spent = time.thread_time() - started
                if threading.current_thread() is not threading.main_thread():
                    with self._lock:  # the main thread's pages are in its own thread time
                        self.cpu += spent

        dispatch._dispatch_page = page
        try:
            yield
        finally:
            dispatch._dispatch_page = original


if __name__ == "__main__":
    import json
    import sys

    sys.stdout.write(
        json.dumps(run(tasks=int(sys.argv[1]) if len(sys.argv) > 1 else 100, runs=1)) + "\n"
    )
