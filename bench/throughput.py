"""End-to-end throughput: no-op shards per second through the local runtime vs a bare loop.

A (the design): `iotsched.local.runtime.LocalRuntime` (the template's resources in the emulator,
a dispatcher process, 2 shard-worker processes running `functions/worker/app.py` behind the
event-source-mapping poller). A task with `id_range` N shards is due; the clock starts when the
tick is delivered and stops when the instance is final (polled every 0.1 s).

B (the floor): 2 processes of `bench.bare_worker` (receive 10, one conditional lease write per
message, one fenced completion transaction with one counter decrement per batch, delete batch)
on their own queue in the same emulator; the clock starts when the main process begins sending
the same N message bodies (bare SendMessageBatch) and stops when the counter reaches 0 (polled
every 0.1 s).

Runs alternate ABBA against the one emulator, each pair from an empty table; the figure is floor
time over design time (the ratio of throughputs), from medians.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.common import (
    AWS_ENV,
    ROOT,
    TEMPLATE,
    breakdown,
    instrument_emulator,
    median,
    prepare_environment,
    rounded,
    service_timer,
    tag_as_poll,
)
from iotsched.local.emulator import empty_table, reset_state

T0 = datetime(2026, 12, 2, 0, 0, tzinfo=UTC)
TARGET = 0.6
POLL_S = 0.1
DISPATCHER_TIMEOUT_S = 900


@contextmanager
def local_runtime(workers: int = 2) -> Iterator[Any]:
    """A started LocalRuntime (manual clock) on the project's emulator, its requests timed."""
    from iotsched.local.runtime import LocalRuntime

    prepare_environment()
    instrument_emulator()
    reset_state()
    runtime = LocalRuntime(
        TEMPLATE,
        manual_clock=True,
        workers=workers,
        dispatchers=1,
        # The template's default (60 s) is shorter than a tick with 1,000 due tasks takes on
        # the emulator (see the peer section of results.md): the most Lambda allows.
        parameter_overrides={"DispatcherTimeoutSeconds": str(DISPATCHER_TIMEOUT_S)},
        env_overrides={"POWERTOOLS_LOG_LEVEL": "WARNING"},
        log_dir=Path(tempfile.mkdtemp(prefix="iotsched-bench-")),
    )
    runtime.start()
    try:
        yield runtime
    finally:
        runtime.stop()


@contextmanager
def bare_workers(endpoint: str, queue_url: str, table: str, count: int = 2) -> Iterator[list[Any]]:
    """`count` bare worker processes polling `queue_url`."""
    env = {**os.environ, **AWS_ENV, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "bench.bare_worker", endpoint, queue_url, table],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(count)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            if json.loads(proc.stdout.readline()).get("state") != "ready":
                raise RuntimeError("a bare worker did not start")
        yield procs
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()


def _task(task_id: str, at: datetime, shards: int) -> Any:
    from iotsched.core.task_definition import TaskDefinition

    return TaskDefinition.model_validate(
        {
            "id": task_id,
            "handler": "noop",
            "trigger": {"at": at.isoformat()},
            "sharding": {"strategy": "id_range", "shards": shards, "id_max": 1_000_000},
        }
    )


def _bodies(task_id: str, at: datetime, shards: int) -> list[str]:
    from iotsched.core.decisions import Firing
    from iotsched.core.instance_record import (
        InstanceStatus,
        TriggerKind,
    )
    from iotsched.core.task_record import TaskRecord
    from iotsched.services.scheduling.build import build_instance
    from iotsched.services.scheduling.send import shard_messages

    instance = build_instance(
        TaskRecord(definition=_task(task_id, at, shards), version=1, next_fire=at, updated_at=at),
        Firing(slot=at, kind=TriggerKind.SCHEDULED, status=InstanceStatus.PLANNING),
        claimed_at=at,
        dispatch_lease_s=60,
    )
    return [m.model_dump_json() for m in shard_messages(instance)]


def run(runtime: Any, *, shards: int = 100, pairs: int = 5) -> dict[str, Any]:
    """`pairs` runs of each side on a started runtime."""
    from iotsched.adapters.aws import AwsClients
    from iotsched.bootstrap import build
    from iotsched.core.instance_record import instance_id_for
    from iotsched.services.definitions.apply import apply_tasks

    settings = runtime.settings()
    clients = AwsClients(region="us-east-1", endpoint_url=runtime.endpoint_url)
    services = build(settings, clients=clients)
    sqs = clients.sqs()
    ddb = clients.dynamodb()
    polling = AwsClients(region="us-east-1", endpoint_url=runtime.endpoint_url)
    tag_as_poll(polling.dynamodb())
    watch = build(settings, clients=polling)
    bare_queue = sqs.create_queue(QueueName="bench-bare")["QueueUrl"]
    design: list[float] = []
    floor: list[float] = []
    spans: dict[str, dict[str, tuple[int, float]]] = {"design": {}, "floor": {}}

    def account(side: str, mark: Any) -> None:
        for name, (calls, secs) in service_timer().since(mark).items():
            before = spans[side].get(name, (0, 0.0))
            spans[side][name] = (before[0] + calls, before[1] + secs)

    with bare_workers(runtime.endpoint_url, bare_queue, settings.table) as procs:
        for n in range(pairs):
            empty_table(settings.table)
            at = T0 + timedelta(hours=n)
            task_id = f"throughput-{n}"
            apply_tasks([_task(task_id, at, shards)], services.tasks, now=at - timedelta(minutes=1))
            instance_id = instance_id_for(task_id, at)
            bodies = _bodies(f"bare-{n}", at, shards)

            def run_design(at: datetime = at, instance_id: str = instance_id) -> None:
                mark = service_timer().snapshot()
                started = time.perf_counter()
                runtime.tick(at)
                while True:
                    instance = watch.instances.get_instance(instance_id)
                    if instance is not None and instance.status.final:
                        break
                    time.sleep(POLL_S)
                design.append(time.perf_counter() - started)
                account("design", mark)
                if instance.status.value != "succeeded":
                    raise RuntimeError(f"{instance_id} ended {instance.status.value}")

            def run_floor(n: int = n, bodies: list[str] = bodies) -> None:
                instance = json.loads(bodies[0])["instance_id"]
                key = {"pk": {"S": f"BARE#{instance}"}, "sk": {"S": "COUNTER"}}
                ddb.put_item(
                    TableName=settings.table, Item={**key, "remaining": {"N": str(shards)}}
                )
                mark = service_timer().snapshot()
                started = time.perf_counter()
                for s in range(0, len(bodies), 10):
                    sqs.send_message_batch(
                        QueueUrl=bare_queue,
                        Entries=[
                            {"Id": str(i), "MessageBody": b}
                            for i, b in enumerate(bodies[s : s + 10])
                        ],
                    )
                while True:
                    item = polling.dynamodb().get_item(
                        TableName=settings.table, Key=key, ConsistentRead=True
                    )
                    if item["Item"]["remaining"]["N"] == "0":
                        break
                    time.sleep(POLL_S)
                floor.append(time.perf_counter() - started)
                account("floor", mark)

            order = (run_design, run_floor) if n % 2 == 0 else (run_floor, run_design)
            for side in order:
                side()
    handled: list[int] = []
    for proc in procs:
        out = proc.stdout.read() if proc.stdout else ""
        handled.extend(json.loads(line)["handled"] for line in out.splitlines() if line.strip())
    ratio = median(floor) / median(design)
    return {
        "shards_per_run": shards,
        "runs_per_side": pairs,
        "worker_processes": 2,
        "design_seconds": [rounded(x, 2) for x in design],
        "floor_seconds": [rounded(x, 2) for x in floor],
        "design_shards_per_s": rounded(shards / median(design), 1),
        "floor_shards_per_s": rounded(shards / median(floor), 1),
        "floor_messages_handled": sum(handled),
        "emulator_per_shard": {
            side: breakdown(spans[side], shards * pairs) for side in ("design", "floor")
        },
        "emulator_busy_share": {
            side: rounded(
                sum(s for _c, s in spans[side].values())
                / sum(design if side == "design" else floor),
                3,
            )
            for side in ("design", "floor")
        },
        "ratio": rounded(ratio, 3),
        "pair_ratios": [rounded(b / a, 3) for a, b in zip(design, floor, strict=True)],
        "target": TARGET,
        "met": ratio >= TARGET,
    }


if __name__ == "__main__":
    with local_runtime() as rt:
        sys.stdout.write(
            json.dumps(run(rt, shards=int(sys.argv[1]) if len(sys.argv) > 1 else 100, pairs=2))
            + "\n"
        )
