"""Dispatch of one instance with 10,000 shards: the dispatcher handler against its floor.

A (the design): the real dispatcher Lambda handler (`functions/dispatcher/app.py`, Powertools
decorators included), warm, loaded in this process, handles the bucket message of the tick at
which a task with `id_range` 10,000 shards is due (the task's bucket): the bucket's lease,
query, claim, 1,000 SendMessageBatch of 10, mark running, advance the task, release.

B (the floor): the same number of SendMessageBatch calls (and of BatchWriteItem calls: the
dispatcher makes none, shard records are written by the lease) with the same message bodies,
issued bare from a loop, bodies prepared beforehand.

Both against the same emulator and queue (purged between runs), alternated ABBA so that a drift
in the emulator's speed falls on both sides; the figure is the ratio of the medians.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import sys
import time
from datetime import UTC, datetime, timedelta
from types import ModuleType
from typing import Any

from bench.common import ROOT, Deployment, deploy, emulator, median, rounded

T0 = datetime(2026, 12, 1, 0, 0, tzinfo=UTC)
TARGET = 1.3


def load_dispatcher(deployment: Deployment) -> ModuleType:
    """functions/dispatcher/app.py, imported as Lambda would, aimed at the emulator."""
    os.environ.update(
        {
            "IOTSCHED_TABLE": deployment.table,
            "IOTSCHED_SHARD_QUEUE_URL": deployment.queue_url,
            "IOTSCHED_ALERT_TOPIC_ARN": deployment.settings.alert_topic_arn,
            "AWS_ENDPOINT_URL": deployment.endpoint_url,
            "AWS_LAMBDA_LOG_STREAM_NAME": "bench-dispatcher",
            # The bucket dispatcher's answer carries its report (as in the local runtime).
            "IOTSCHED_DISPATCH_QUEUE_URL": deployment.queue_url,
            "IOTSCHED_BATCH_REPORTS": "1",
        }
    )
    code = ROOT / "functions" / "dispatcher" / "app.py"
    spec = importlib.util.spec_from_file_location("bench_dispatcher_app", code)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    with contextlib.redirect_stdout(io.StringIO()):  # its Logger writes to this stream
        spec.loader.exec_module(module)
    return module


def run(*, shards: int = 10_000, pairs: int = 5) -> dict[str, Any]:
    """`pairs` runs of each side; returns the medians and their ratio."""
    from iotsched.adapters.sqs import tick_body
    from iotsched.bootstrap import build
    from iotsched.clock import ManualClock
    from iotsched.core.buckets import DEFAULT_BUCKETS, bucket_of
    from iotsched.core.decisions import Firing
    from iotsched.core.instance_record import (
        InstanceStatus,
        TriggerKind,
    )
    from iotsched.core.task_definition import TaskDefinition
    from iotsched.core.task_record import TaskRecord
    from iotsched.local.host import FakeLambdaContext
    from iotsched.ports.messaging import BucketTick
    from iotsched.services.definitions.apply import apply_tasks
    from iotsched.services.scheduling.build import build_instance
    from iotsched.services.scheduling.send import shard_messages

    with emulator() as url:
        deployment = deploy(url)
        clock = ManualClock(T0)
        services = build(deployment.settings, clock=clock, clients=deployment.clients)
        sqs = deployment.clients.sqs()
        app = load_dispatcher(deployment)
        sink = io.StringIO()

        def handler(at: datetime, task_id: str) -> dict[str, Any]:
            """The bucket dispatcher's invocation for the bucket of `task_id` at `at`."""
            tick = BucketTick(minute=at, bucket=bucket_of(task_id, DEFAULT_BUCKETS))
            record = {
                "messageId": "m",
                "receiptHandle": "r",
                "body": tick_body(tick),
                "attributes": {"ApproximateReceiveCount": "1"},
                "messageAttributes": {},
                "md5OfBody": "",
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:bench-DispatchQueue",
                "awsRegion": "us-east-1",
            }
            with contextlib.redirect_stdout(sink):
                answer: dict[str, Any] = app.lambda_handler(
                    {"Records": [record]}, FakeLambdaContext("bench-dispatcher", 900)
                )
            sink.seek(0)
            sink.truncate()
            result: dict[str, Any] = answer["reports"]["m"]["report"]
            return result

        handler(T0 - timedelta(hours=1), "warm")  # a warm container: clients built, nothing due

        design: list[float] = []
        floor: list[float] = []
        sends: list[int] = []
        for n in range(pairs):
            at = T0 + timedelta(hours=n)
            definition = TaskDefinition.model_validate(
                {
                    "id": f"dispatch-{n}",
                    "handler": "noop",
                    "trigger": {"at": at.isoformat()},
                    "sharding": {"strategy": "id_range", "shards": shards, "id_max": 1_000_000},
                }
            )
            apply_tasks([definition], services.tasks, now=at - timedelta(minutes=1))
            # The floor's bodies: what the design sends for an instance of the same task.
            instance = build_instance(
                TaskRecord(definition=definition, version=1, next_fire=at, updated_at=at),
                Firing(slot=at, kind=TriggerKind.SCHEDULED, status=InstanceStatus.PLANNING),
                claimed_at=at,
                dispatch_lease_s=60,
            )
            bodies = [m.model_dump_json() for m in shard_messages(instance)]
            batches = [
                [{"Id": str(i), "MessageBody": b} for i, b in enumerate(bodies[s : s + 10])]
                for s in range(0, len(bodies), 10)
            ]

            def run_design(at: datetime = at, task_id: str = definition.id) -> None:
                started = time.perf_counter()
                report = handler(at, task_id)
                design.append(time.perf_counter() - started)
                sends.append(int(report["send_requests"]))
                if report["messages_sent"] != shards:
                    raise RuntimeError(f"dispatcher sent {report['messages_sent']} of {shards}")
                sqs.purge_queue(QueueUrl=deployment.queue_url)

            def run_floor(batches: list[list[dict[str, str]]] = batches) -> None:
                started = time.perf_counter()
                for entries in batches:
                    sqs.send_message_batch(QueueUrl=deployment.queue_url, Entries=entries)
                floor.append(time.perf_counter() - started)
                sqs.purge_queue(QueueUrl=deployment.queue_url)

            order = (run_design, run_floor) if n % 2 == 0 else (run_floor, run_design)
            for side in order:
                side()
        floor_batches = len(batches)

    ratio = median(design) / median(floor)
    return {
        "shards": shards,
        "runs_per_side": pairs,
        "design_seconds": [rounded(x, 3) for x in design],
        "floor_seconds": [rounded(x, 3) for x in floor],
        "design_median_s": rounded(median(design), 3),
        "floor_median_s": rounded(median(floor), 3),
        "send_message_batch_calls": {"design": sends[0], "floor": floor_batches},
        "batch_write_item_calls": {"design": 0, "floor": 0},
        "ratio": rounded(ratio, 3),
        "pair_ratios": [rounded(a / b, 3) for a, b in zip(design, floor, strict=True)],
        "target": TARGET,
        "met": ratio <= TARGET,
    }


if __name__ == "__main__":
    import json

    count = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    sys.stdout.write(
        json.dumps(run(shards=count, pairs=int(sys.argv[2]) if len(sys.argv) > 2 else 5)) + "\n"
    )
