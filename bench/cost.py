"""AWS requests per shard execution, by service, and USD per million shards.

A full run on the emulator: one task (`noop` handler, `id_range` over 1,000,000 device ids in
100 shards, rate 1 minute) fires once per tick; each tick runs as deployed, the bucket
dispatcher of the task's bucket (`bench.common.tick_as_deployed`; the other buckets' empty
reads are a fixed cost per minute, priced in docs/guarantees.md, not per shard), then the shard messages are consumed the way the Lambda event source mapping
does: ReceiveMessage of up to 10 (one worker invocation per batch), the worker function's path
for the batch (a `ShardBatch` given the function's timeout as its time left, as in Lambda: the
records' visibility hold, each message run, then the finished shards' completions committed
together), DeleteMessageBatch of the handled ones, until a receive comes back empty. Every boto3 call the
dispatcher, the worker and the ESM make is counted by botocore hooks (`bench.counting`).
Set-up (provisioning, applying the task) and the final check are not counted.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3

from bench.common import breakdown, deploy, emulator, rounded, service_timer, tick_as_deployed
from bench.counting import (
    AWS_LATENCY_MS,
    LAMBDA_MEMORY_GB,
    PRICE_NOTES,
    PRICES,
    RequestCounter,
    aws_latency_s,
    moto_item_sizes,
)
from bench.floor import REQUEST_RATIO_TARGET, run_floor
from bench.harness import HEARTBEAT_S, LONG_SHARD_S, Harness
from bench.indexwrites import Ledger, WriteAccountant, describe
from bench.virtual_time import virtual_worker_time

T0 = datetime(2026, 11, 30, 0, 0, tzinfo=UTC)


def _time_left(timeout_s: float) -> Callable[[], float]:
    """An invocation's remaining time, counted from now (a Lambda context's)."""
    ends = time.monotonic() + timeout_s
    return lambda: ends - time.monotonic()


TASK_ID = "bench-scan"
DEVICES = 1_000_000

#: The targets the figures are read against.
TARGETS = {"dynamodb_wru": 3.5, "sqs": 0.35, "lambda": 0.12, "usd_per_million": 2.5}


#: The fleet-safety scenario's policies: a rollout whose rate never makes a shard wait (so
#: what is counted is the gate itself, not waits) and abort criteria never met.
FLEET_POLICIES: dict[str, Any] = {
    "rollout": {"max_shards_per_minute": 100_000},
    "abort": {"failure_percent": 50, "min_executed": 10},
}


def run(
    *,
    instances: int = 100,
    shards: int = 100,
    long_instances: int = 2,
    long_shards: int = 20,
    fleet_instances: int = 10,
) -> dict[str, Any]:
    """Run `instances` firings of a `shards`-shard task and count what they cost; then
    `long_instances` of `long_shards` 30 s heartbeating shards (`run_long`); then
    `fleet_instances` of the same no-op task under a rollout and abort criteria."""
    found = run_noop(instances=instances, shards=shards)
    found["heartbeat_30s"] = run_long(instances=long_instances, shards=long_shards)
    found["usd_per_million_shards_30s"] = found["heartbeat_30s"]["usd_per_million_shards"]
    found["heartbeat_5min"] = run_long(instances=long_instances, shards=long_shards, seconds=300)
    found["usd_per_million_shards_5min"] = found["heartbeat_5min"]["usd_per_million_shards"]
    found["fleet_safety"] = run_noop(
        instances=fleet_instances, shards=shards, policies=FLEET_POLICIES
    )
    found["floor"] = run_floor(instances=instances, shards=shards)
    design = (
        found["requests_per_shard"]["dynamodb"] + found["sqs_calls"] / found["shard_executions"]
    )
    floor = found["floor"]["requests_per_shard"]
    found["request_ratio_to_floor"] = rounded(floor / design, 3)
    found["request_ratio_target"] = REQUEST_RATIO_TARGET
    found["request_ratio_met"] = floor / design >= REQUEST_RATIO_TARGET
    return found


def run_noop(
    *, instances: int, shards: int, policies: dict[str, Any] | None = None
) -> dict[str, Any]:
    """`instances` firings of a `shards`-shard no-op task (with `policies`: task fields such
    as a rollout), every request and write counted."""
    from iotsched.adapters.aws import AwsClients
    from iotsched.bootstrap import build
    from iotsched.clock import ManualClock
    from iotsched.core.instance_record import InstanceStatus
    from iotsched.core.task_definition import TaskDefinition
    from iotsched.services.definitions.apply import apply_tasks
    from iotsched.services.execution.batch import ShardBatch
    from iotsched.services.execution.outcomes import (
        Delivery,
        PendingShard,
    )

    with emulator() as url:
        deployment = deploy(url)
        clients = AwsClients(region="us-east-1", endpoint_url=url)
        counter = RequestCounter(size_of=moto_item_sizes())
        counter.paused = True
        for client in (clients.dynamodb(), clients.sqs(), clients.sns()):
            counter.attach(client)
        reader = boto3.client("dynamodb", region_name="us-east-1", endpoint_url=url)
        accountant = WriteAccountant(reader, [describe(reader, deployment.table)])
        accountant.paused = True
        accountant.attach(clients.dynamodb())
        clock = ManualClock(T0 - timedelta(minutes=1))
        services = build(deployment.settings, clock=clock, clients=clients)
        definition = TaskDefinition.model_validate(
            {
                "id": TASK_ID,
                "handler": "noop",
                "trigger": {"rate": "1m"},
                "sharding": {"strategy": "id_range", "shards": shards, "id_max": DEVICES},
                **(policies or {}),
            }
        )
        apply_tasks([definition], services.tasks, now=clock.now())
        sqs = clients.sqs()
        invocations = {"dispatcher": 0, "worker": 0}
        seconds = {"dispatcher": 0.0, "worker": 0.0}
        cpu = {"dispatcher": 0.0, "worker": 0.0}
        handled = 0
        started = time.perf_counter()
        mark = service_timer().snapshot()
        counter.paused = False
        accountant.paused = False
        for n in range(instances):
            at = T0 + timedelta(minutes=n)
            clock.set(at)
            counter.phase = "dispatcher"
            t, c = time.perf_counter(), time.thread_time()
            invocations["dispatcher"] += tick_as_deployed(
                at, services, [TASK_ID], deployment.settings.index_buckets
            )
            seconds["dispatcher"] += time.perf_counter() - t
            cpu["dispatcher"] += time.thread_time() - c
            while True:
                counter.phase = "esm"
                batch = sqs.receive_message(
                    QueueUrl=deployment.queue_url,
                    MaxNumberOfMessages=10,
                    WaitTimeSeconds=0,  # as the local runtime's poller: the emulator is serial
                    AttributeNames=["All"],
                ).get("Messages", [])
                if not batch:
                    break
                counter.phase = "worker"
                invocations["worker"] += 1
                t, c = time.perf_counter(), time.thread_time()
                # as in Lambda: the invocation may run for the function's timeout (the task
                # keeps the default timeout_s; the batch commits before either runs out)
                worker_batch = ShardBatch(
                    services,
                    worker="bench-worker",
                    time_left_s=_time_left(deployment.worker_timeout_s),
                )
                pending = []
                deliveries = [
                    Delivery(
                        body=message["Body"],
                        receipt_handle=message["ReceiptHandle"],
                        receive_count=int(
                            message.get("Attributes", {}).get("ApproximateReceiveCount", 1)
                        ),
                    )
                    for message in batch
                ]
                # as the worker function: the records' visibility hold, then each record
                worker_batch.expect(deliveries)
                for delivery in deliveries:
                    outcome = worker_batch.run(delivery)
                    if isinstance(outcome, PendingShard):
                        pending.append(outcome)
                    handled += 1
                worker_batch.end()
                unwritten = [p for p in pending if p.outcome is None]
                assert not unwritten, f"completions not written: {unwritten}"
                seconds["worker"] += time.perf_counter() - t
                cpu["worker"] += time.thread_time() - c
                counter.phase = "esm"
                sqs.delete_message_batch(
                    QueueUrl=deployment.queue_url,
                    Entries=[
                        {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                        for i, m in enumerate(batch)
                    ],
                )
        wall = time.perf_counter() - started
        counter.paused = True
        accountant.paused = True
        spans = service_timer().since(mark)
        ended = services.instances.list_instances(task_id=TASK_ID, limit=instances + 10)
        succeeded = sum(1 for i in ended if i.status is InstanceStatus.SUCCEEDED)
    return summarise(
        counter,
        instances=instances,
        shards=shards,
        handled=handled,
        succeeded=succeeded,
        invocations=invocations,
        seconds=seconds,
        cpu=cpu,
        wall=wall,
        spans=spans,
        ledger=accountant.ledger,
        table=deployment.table,
    )


def summarise(
    counter: RequestCounter,
    *,
    instances: int,
    shards: int,
    handled: int,
    succeeded: int,
    invocations: dict[str, int],
    seconds: dict[str, float],
    cpu: dict[str, float],
    wall: float,
    spans: dict[str, tuple[int, float]] | None = None,
    ledger: Ledger | None = None,
    table: str = "",
) -> dict[str, Any]:
    """Per-shard figures and the price of a million shards (index writes counted when a
    `ledger` of `bench.indexwrites` is given)."""
    executions = instances * shards
    ddb = counter.requests("DynamoDB")
    sqs_calls = counter.requests("SQS")
    sqs_billed = sum(counter.sqs_billed.values())
    sns = counter.requests("SNS")
    lambdas = invocations["dispatcher"] + invocations["worker"]
    table_wru_requests = sum(counter.wru.values())  # bench.counting's own count (a cross-check)
    by_target = ledger.by_target() if ledger is not None else {}
    index_wru = sum(u for target, u in by_target.items() if target != table)
    table_wru = (
        by_target.get(table, table_wru_requests) if ledger is not None else table_wru_requests
    )
    wru = table_wru + index_wru
    rru = sum(counter.rru.values())
    # Lambda duration on AWS: the handlers' own CPU time here (the counter's hooks taken out)
    # plus each call they made at the assumed in-region round trip. On the emulator, as
    # measured, for comparison (its calls are slower than AWS's).
    waits = sum(
        n * aws_latency_s(service, operation)
        for (service, operation, phase), n in counter.calls.items()
        if phase in ("dispatcher", "worker")
    )
    aws_seconds = max(0.0, cpu["dispatcher"] + cpu["worker"] - counter.hook_seconds) + waits
    gb_s = aws_seconds * LAMBDA_MEMORY_GB
    emulator_gb_s = (seconds["dispatcher"] + seconds["worker"]) * LAMBDA_MEMORY_GB
    usd = {
        "dynamodb_writes": table_wru * PRICES["dynamodb_wru"],
        "dynamodb_index_writes": index_wru * PRICES["dynamodb_wru"],
        "dynamodb_reads": rru * PRICES["dynamodb_rru"],
        "sqs": sqs_billed * PRICES["sqs_request"],
        "lambda_requests": lambdas * PRICES["lambda_request"],
        "lambda_duration": gb_s * PRICES["lambda_gb_s_arm64"],
        "sns": sns * PRICES["sns_publish"],
    }
    emulator_duration_usd = emulator_gb_s * PRICES["lambda_gb_s_arm64"]
    per_million = {k: rounded(v / executions * 1e6, 4) for k, v in usd.items()}
    total = sum(usd.values()) / executions * 1e6
    per_shard = {
        "dynamodb": rounded(ddb / executions, 3),
        "sqs": rounded(sqs_billed / executions, 3),
        "lambda": rounded(lambdas / executions, 4),
        "sns": rounded(sns / executions, 4),
    }
    wru_per_shard = wru / executions
    rru_per_shard = rru / executions
    return {
        "instances": instances,
        "shards_per_instance": shards,
        "shard_executions": executions,
        "messages_handled": handled,
        "instances_succeeded": succeeded,
        "requests_per_shard": per_shard,
        "dynamodb_wru_per_shard": rounded(wru_per_shard, 3),
        "dynamodb_wru_per_shard_table": rounded(table_wru / executions, 3),
        "dynamodb_wru_per_shard_indexes": rounded(index_wru / executions, 3),
        "dynamodb_wru_per_shard_by_index": {
            t: rounded(u / executions, 3) for t, u in sorted(by_target.items()) if t != table
        },
        "table_wru_per_shard_by_request_counter": rounded(table_wru_requests / executions, 3),
        "dynamodb_rru_per_shard": rounded(rru_per_shard, 3),
        "wru_per_shard_by_phase": {
            k: rounded(v / executions, 3) for k, v in sorted(counter.wru.items())
        },
        "wru_per_shard_by_operation": {
            k: rounded(v / executions, 3) for k, v in sorted(counter.wru_by_operation.items())
        },
        "rru_per_shard_by_phase": {
            k: rounded(v / executions, 3) for k, v in sorted(counter.rru.items())
        },
        "calls_per_shard_by_phase": {
            phase: {op: rounded(n / executions, 3) for op, n in ops.items()}
            for phase, ops in counter.by_phase().items()
        },
        "calls": counter.by_operation(),
        "sqs_calls": sqs_calls,
        "sqs_billed_requests": sqs_billed,
        "http_attempts": sum(counter.attempts.values()),
        "api_calls": sum(counter.calls.values()),
        "conditional_failures": counter.conditional_failures,
        "largest_item_bytes": dict(sorted(counter.largest_item.items())),
        "lambda_invocations": dict(invocations),
        "lambda_seconds_on_emulator": {k: rounded(v, 2) for k, v in seconds.items()},
        "lambda_cpu_seconds": {k: rounded(v, 2) for k, v in cpu.items()},
        "counter_hook_seconds": rounded(counter.hook_seconds, 2),
        "assumed_aws_latency_ms": AWS_LATENCY_MS,
        "lambda_ms_per_shard_on_aws": rounded(aws_seconds / executions * 1000, 2),
        "lambda_cpu_ms_per_shard": rounded(
            max(0.0, cpu["dispatcher"] + cpu["worker"] - counter.hook_seconds) / executions * 1000,
            2,
        ),
        "lambda_ms_per_shard_on_emulator": rounded(
            (seconds["dispatcher"] + seconds["worker"]) / executions * 1000, 2
        ),
        "lambda_gb_s_per_shard": rounded(gb_s / executions, 5),
        "usd_per_million_shards": rounded(total, 3),
        "usd_per_million_with_emulator_duration": rounded(
            total + (emulator_duration_usd - usd["lambda_duration"]) / executions * 1e6, 3
        ),
        "usd_per_million_by_item": per_million,
        "prices": PRICE_NOTES,
        "wall_seconds": rounded(wall, 1),
        "emulator_per_shard": breakdown(spans or {}, executions),
        "targets": TARGETS,
        "met": {
            "dynamodb_wru": wru_per_shard <= TARGETS["dynamodb_wru"],
            "sqs": per_shard["sqs"] <= TARGETS["sqs"],
            "lambda": per_shard["lambda"] <= TARGETS["lambda"],
            "usd_per_million": total <= TARGETS["usd_per_million"],
        },
    }


#: The 30 s shards' target (USD per million, index writes counted).
TARGET_30S = 3.0


#: A deployment for shards of several minutes: each runs within one invocation (a function
#: timeout past the shard's length), the queue's visibility at six times that, as the
#: template requires.
LONG_WORK_PARAMETERS = {"WorkerTimeoutSeconds": "900", "ShardVisibilityTimeoutSeconds": "5400"}


def run_long(
    *, instances: int = 2, shards: int = 20, seconds: int = LONG_SHARD_S
) -> dict[str, Any]:
    """The scheduler's bill for shards that run `seconds` (30 by default) and heartbeat
    (bench.partitions' `heartbeat_30s` scenario, its shards' length set: a manual clock,
    renewals and heartbeats as in production; a length past what the template's function
    timeout allows deploys `LONG_WORK_PARAMETERS`):
    DynamoDB writes (index writes counted) and reads, SQS requests, Lambda invocations and SNS
    publishes. Not the handlers' own compute (30 s of Lambda duration is the handler's, not the
    scheduler's), so no Lambda duration is priced."""
    from bench import partitions

    sizes = {"long_instances": instances, "long_shards": shards}
    name = "heartbeat_30s"
    parameters = LONG_WORK_PARAMETERS if seconds > LONG_SHARD_S else None
    with emulator() as url:
        harness = Harness(url, parameters=parameters)
        with virtual_worker_time(harness.clock):
            _what, definitions, per_instance = partitions.scenarios(
                {
                    **dict.fromkeys(
                        (
                            "tick_tasks",
                            "instances",
                            "shards",
                            "reports",
                            "failing",
                            "capped_shards",
                            "rollout_shards",
                        ),
                        1,
                    ),
                    "failing_shards": 1,
                    **sizes,
                }
            )[name]
            for definition in definitions:
                definition["params"] = {**definition["params"], "seconds": seconds}
            ids = harness.run(definitions)
            statuses = {
                getattr(harness.services.instances.get_instance(i), "status", None) for i in ids
            }
    executions = len(ids) * per_instance
    ledger, counter = harness.accountant.ledger, harness.requests
    wru = ledger.total()
    index_wru = sum(u for t, u in ledger.by_target().items() if t != harness.deployment.table)
    rru = sum(counter.rru.values())
    sqs_billed = sum(counter.sqs_billed.values())
    lambdas = harness.invocations["dispatcher"] + harness.invocations["worker"]
    sns = counter.requests("SNS")
    usd = {
        "dynamodb_writes": (wru - index_wru) * PRICES["dynamodb_wru"],
        "dynamodb_index_writes": index_wru * PRICES["dynamodb_wru"],
        "dynamodb_reads": rru * PRICES["dynamodb_rru"],
        "sqs": sqs_billed * PRICES["sqs_request"],
        "lambda_requests": lambdas * PRICES["lambda_request"],
        "sns": sns * PRICES["sns_publish"],
    }
    total = sum(usd.values()) / executions * 1e6
    return {
        "instances": len(ids),
        "shards_per_instance": per_instance,
        "shard_executions": executions,
        "shard_seconds": seconds,
        "heartbeat_s": HEARTBEAT_S,
        "statuses": sorted(str(s) for s in statuses),
        "dynamodb_wru_per_shard": rounded(wru / executions, 3),
        "dynamodb_wru_per_shard_indexes": rounded(index_wru / executions, 3),
        "dynamodb_rru_per_shard": rounded(rru / executions, 3),
        "sqs_per_shard": rounded(sqs_billed / executions, 3),
        "lambda_invocations_per_shard": rounded(lambdas / executions, 4),
        "calls_per_shard_by_phase": {
            phase: {op: rounded(n / executions, 3) for op, n in ops.items()}
            for phase, ops in counter.by_phase().items()
        },
        "usd_per_million_by_item": {k: rounded(v / executions * 1e6, 4) for k, v in usd.items()},
        "usd_per_million_shards": rounded(total, 3),
        "what": (
            "the scheduler's requests only: DynamoDB (index writes counted), SQS, Lambda "
            "invocations, SNS; not the handler's own compute (no Lambda duration)"
        ),
        "target": TARGET_30S,
        "met": total <= TARGET_30S,
    }


if __name__ == "__main__":
    import json
    import sys

    count = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    sys.stdout.write(json.dumps(run(instances=count), indent=2) + "\n")
