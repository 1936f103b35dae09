"""A big instance's send: the requests of one 100,000-shard dispatch, and its time on AWS.

A task with `id_range` N shards is due; `dispatch_tick` (in this process, against the embedded
emulator) claims it and sends it in steps (`iotsched.services.scheduling.send.send_messages`). botocore
hooks count every request its dispatcher makes, by operation. The figure
`big_instance_send_s` is the send's critical path on AWS, from those counts and stated
latencies, not the emulator's time (it serves one request at a time):

    steps x (rounds per step x SendMessageBatch latency + one UpdateItem latency)

where a step's SendMessageBatch calls go `SEND_WORKERS` at a time (a round is one call per
thread) and each step but the last ends with the cursor's UpdateItem (the last: the running
mark). The dispatch's other DynamoDB requests (the due queries, the claim, the task's advance: those
counted beyond the send's writes) come once, one after another, and are added at the DynamoDB
latency. The model's request totals are checked against the counted ones.

Then the same dispatch dies mid-way (the queue fails after half the requests) and the sweeper
resumes it after the dispatch lease: the messages sent twice, and whether shard 0 was.

CPU is not in the figure. It is measured beside it: the CPU time of building, serialising and
signing 1,000 SendMessageBatch requests (10 messages each, through the SQS adapter) whose
responses a botocore hook answers locally, so that neither the network nor the emulator counts
(median of 3, before the emulator starts).
At 512 MB a Lambda has 512/1,769 of a vCPU: `cpu_s_at_512mb` is the send's CPU there, which the
send's threads overlap with the network waits (the send takes the larger of the two, roughly).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.common import deploy, emulator, median, rounded

T0 = datetime(2026, 12, 7, 0, 0, tzinfo=UTC)
TARGET_S = 60.0
SPEC_SHARDS = 100_000
#: Stated AWS latencies, in milliseconds, as (low, high): a SendMessageBatch of 10 from a
#: Lambda in the queue's region, and a single DynamoDB write.
SQS_MS = (10.0, 15.0)
DDB_MS = (5.0, 10.0)


class _Counter:
    """Requests by (service, operation), counted by botocore's before-call hook."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self._lock = threading.Lock()

    def attach(self, client: Any, service: str) -> None:
        def count(model: Any, **_: Any) -> None:
            with self._lock:
                self.calls[f"{service}.{model.name}"] += 1

        client.meta.events.register(f"before-call.{service.lower()}", count)


class _DiesAfter:
    """The shard queue, failing from its `after`-th SendMessageBatch on (a dispatcher dying
    mid-send), counting what went out per shard."""

    def __init__(self, inner: Any, after: int | None) -> None:
        self.inner = inner
        self.after = after
        self.requests = 0
        self.per_shard: Counter[int] = Counter()
        self._lock = threading.Lock()

    def send(self, messages: Sequence[Any]) -> int:
        made = 0
        for start in range(0, len(messages), 10):
            batch = messages[start : start + 10]
            with self._lock:
                if self.after is not None and self.requests >= self.after:
                    raise ConnectionError("the dispatcher died mid-send")
                self.requests += 1
            made += self.inner.send(batch)
            with self._lock:
                self.per_shard.update(m.shard for m in batch)
        return made

    def extend_visibility(self, receipt_handle: str, seconds: int) -> None:
        self.inner.extend_visibility(receipt_handle, seconds)

    def hold_visibility(self, receipt_handles: Sequence[str], seconds: int) -> set[str]:
        return set(self.inner.hold_visibility(receipt_handles, seconds))


def critical_path_s(
    shards: int, sqs_ms: float, ddb_ms: float, fixed: int = 0
) -> tuple[float, int, int]:
    """(seconds, SendMessageBatch calls, send-path writes) of the send's critical path, with
    `fixed` other DynamoDB requests made one after another."""
    from iotsched.services.scheduling.send import (
        CHUNK_MESSAGES,
        SEND_WORKERS,
        STEP_SHARDS,
    )

    seconds, calls, writes = 0.0, 0, 0
    for start in range(0, shards, STEP_SHARDS):
        step = min(STEP_SHARDS, shards - start)
        chunks = [
            min(CHUNK_MESSAGES, step - c) for c in range(0, step, CHUNK_MESSAGES)
        ]  # each chunk: its calls one after another on one thread
        per_chunk = [math.ceil(c / 10) for c in chunks]
        rounds = sum(
            max(per_chunk[i : i + SEND_WORKERS]) for i in range(0, len(chunks), SEND_WORKERS)
        )
        seconds += rounds * sqs_ms / 1000 + ddb_ms / 1000  # the cursor (or the running mark)
        calls += sum(per_chunk)
        writes += 1
    return seconds + fixed * ddb_ms / 1000, calls, writes


#: The Lambda memory size that comes with one full vCPU, and the template's.
VCPU_MB = 1769
LAMBDA_MB = 512


def cpu_ms_per_request(requests: int = 1_000) -> float:
    """CPU milliseconds per SendMessageBatch of 10 shard messages, built and signed in this
    thread, its response answered by a local hook (see the module docstring)."""
    import boto3
    from botocore.awsrequest import AWSResponse

    from iotsched.adapters.sqs import SQSShardQueue
    from iotsched.core.decisions import Firing
    from iotsched.core.instance_record import (
        InstanceStatus,
        TriggerKind,
    )
    from iotsched.core.messages import shard_messages
    from iotsched.core.task_definition import TaskDefinition
    from iotsched.core.task_record import TaskRecord
    from iotsched.services.scheduling.build import build_instance

    class _Body:
        def stream(self, **_: Any) -> Any:
            yield b"{}"

    def answered(request: Any, **_: Any) -> AWSResponse:
        return AWSResponse(request.url, 200, {}, _Body())  # type: ignore[arg-type]

    # Dummy keys: nothing leaves the process, the hook answers every request.
    client = boto3.client(
        "sqs",
        region_name="us-east-1",
        aws_access_key_id="bench",
        aws_secret_access_key="bench",  # noqa: S106
    )
    events: Any = client.meta.events
    events.register("before-send.sqs", answered)
    queue = SQSShardQueue(client, "https://sqs.us-east-1.amazonaws.com/123456789012/bench")
    definition = TaskDefinition.model_validate(
        {
            "id": "bigsend-cpu",
            "handler": "noop",
            "trigger": {"rate": "1h"},
            "sharding": {"strategy": "id_range", "shards": SPEC_SHARDS, "id_max": 1_000_000},
        }
    )
    instance = build_instance(
        TaskRecord(definition=definition, version=1, next_fire=T0, updated_at=T0),
        Firing(slot=T0, kind=TriggerKind.SCHEDULED, status=InstanceStatus.PLANNING),
        claimed_at=T0,
        dispatch_lease_s=60,
    )
    queue.send(shard_messages(instance, 0, 100))  # warm: the client's first request
    started = time.thread_time()
    for start in range(0, requests * 10, 1_000):
        queue.send(shard_messages(instance, start, start + 1_000))
    return (time.thread_time() - started) * 1000 / requests


def run(*, shards: int = SPEC_SHARDS) -> dict[str, Any]:
    """One dispatch of an N-shard instance counted, then one that dies mid-way and resumes."""
    from iotsched.services.scheduling import send as send_module

    counter = _Counter()
    budget = send_module.SEND_BUDGET_S
    died_after = math.ceil(shards / 10) // 2 + 5  # half-way, in the middle of a step
    # First, in a process that holds no emulator yet (its heap would slow the collector).
    cpu_ms = median([cpu_ms_per_request() for _ in range(3)])
    try:
        figures = _measure(shards, counter, died_after)
    finally:
        send_module.SEND_BUDGET_S = budget
    figures["cpu_ms_per_request"] = rounded(cpu_ms, 3)
    figures["cpu_s_at_512mb"] = rounded(
        cpu_ms * figures["send_message_batch"] / 1000 * VCPU_MB / LAMBDA_MB, 1
    )
    return figures


def _measure(shards: int, counter: _Counter, died_after: int) -> dict[str, Any]:
    from iotsched.bootstrap import build
    from iotsched.clock import ManualClock
    from iotsched.core.task_definition import TaskDefinition
    from iotsched.services.definitions.apply import apply_tasks
    from iotsched.services.execution.sweep import sweep
    from iotsched.services.scheduling import send as send_module
    from iotsched.services.scheduling.send import (
        CHUNK_MESSAGES,
        SEND_WORKERS,
        STEP_SHARDS,
    )
    from iotsched.services.scheduling.tick import dispatch_tick
    from iotsched.services.wiring import Wiring

    with emulator() as url:
        deployment = deploy(url)
        clients = deployment.clients
        counter.attach(clients.sqs(), "SQS")
        counter.attach(clients.dynamodb(), "DynamoDB")
        clock = ManualClock(T0)
        services = build(deployment.settings, clock=clock, clients=clients)
        sqs = clients.sqs()

        def due(name: str, at: datetime) -> None:
            definition = TaskDefinition.model_validate(
                {
                    "id": name,
                    "handler": "noop",
                    "trigger": {"at": at.isoformat()},
                    "sharding": {
                        "strategy": "id_range",
                        "shards": shards,
                        "id_max": max(1_000_000, shards),
                    },
                }
            )
            apply_tasks([definition], services.tasks, now=at - timedelta(minutes=1))
            clock.set(at)

        # 1. The normal case: every request of the dispatch counted. The send's time budget is
        # lifted: it is wall-clock time, and the emulator serves a request in about ten times
        # AWS's latency, so the send would pause and resume (see the crash's figures).
        send_module.SEND_BUDGET_S = math.inf
        due("bigsend", T0)
        counter.calls.clear()
        counting = _DiesAfter(services.queue, None)
        normal = Wiring(**{**services.__dict__, "queue": counting})
        started = time.perf_counter()
        report = dispatch_tick(T0, normal)
        emulator_s = time.perf_counter() - started
        calls = dict(counter.calls)
        if report.messages_sent != shards or sorted(counting.per_shard.values()) != [1] * shards:
            raise RuntimeError(f"sent {report.messages_sent} of {shards}, not each once")
        sqs.purge_queue(QueueUrl=deployment.queue_url)

        # 2. The dispatcher dies half-way, mid-step; the sweeper resumes it after the dispatch
        # lease (the tick's own error log is silenced: the death is the point).
        at = T0 + timedelta(hours=1)
        due("bigsend-crash", at)
        dying = _DiesAfter(services.queue, died_after)
        crashing = Wiring(**{**services.__dict__, "queue": dying})
        quiet = logging.getLogger("iotsched.services.scheduling.tick")
        level = quiet.level
        quiet.setLevel(logging.CRITICAL)
        try:
            dispatch_tick(at, crashing)
        except ConnectionError:
            pass
        finally:
            quiet.setLevel(level)
        stalled = next(
            i for i in services.instances.list_instances() if i.task_id == "bigsend-crash"
        )
        assert stalled.dispatch_lease_until is not None
        clock.set(stalled.dispatch_lease_until + timedelta(seconds=1))
        dying.after = None
        resumed = sweep(crashing).resumed
        sqs.purge_queue(QueueUrl=deployment.queue_url)

    sends = calls.get("SQS.SendMessageBatch", 0)
    _, model_calls, model_writes = critical_path_s(shards, SQS_MS[0], DDB_MS[0])
    dynamodb = sum(n for name, n in calls.items() if name.startswith("DynamoDB."))
    fixed = dynamodb - model_writes
    low, _, _ = critical_path_s(shards, SQS_MS[0], DDB_MS[0], fixed)
    high, _, _ = critical_path_s(shards, SQS_MS[1], DDB_MS[1], fixed)
    twice = sum(1 for c in dying.per_shard.values() if c > 1)
    return {
        "big_instance_send_s": rounded(high, 2),
        "big_instance_send_s_low": rounded(low, 2),
        "shards": shards,
        "target_s": TARGET_S,
        "met": high <= TARGET_S,
        "requests": calls,
        "send_message_batch": sends,
        "model": {
            "step_shards": STEP_SHARDS,
            "chunk_messages": CHUNK_MESSAGES,
            "send_workers": SEND_WORKERS,
            "sqs_ms": list(SQS_MS),
            "dynamodb_ms": list(DDB_MS),
            "send_message_batch": model_calls,
            "cursor_and_running_writes": model_writes,
            "other_dynamodb_requests": fixed,
            # The counted UpdateItems are the model's writes plus the task's advance.
            "counted_matches_model": sends == model_calls
            and calls.get("DynamoDB.UpdateItem", 0) == model_writes + 1,
        },
        "emulator_seconds": rounded(emulator_s, 1),
        "crash": {
            "died_after_requests": died_after,
            "resumed_by_sweep": resumed,
            "shards_sent": len(dying.per_shard),
            "shards_sent_twice": twice,
            "shard_0_sends": dying.per_shard.get(0, 0),
            "max_sends_per_shard": max(dying.per_shard.values(), default=0),
        },
    }
