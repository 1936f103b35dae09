"""The dispatcher, worker and sweeper functions publish Powertools metrics (EMF): the documents they print
are read back here, with their namespace from the environment, names, units and values."""

from __future__ import annotations

import importlib
import json
import time
from collections.abc import Iterator
from datetime import timedelta
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from iotsched import bootstrap
from iotsched.adapters.memory.queues import (
    MemoryDispatchQueue,
    MemoryShardQueue,
)
from iotsched.adapters.sqs import tick_body
from iotsched.clock import ManualClock
from iotsched.context import ShardContext
from iotsched.core.alert_message import Alert
from iotsched.core.decisions import decide_follow_ups
from iotsched.core.instance_record import (
    InstanceRecord,
    InstanceStatus,
)
from iotsched.local.delivery import scheduled_event
from iotsched.local.host import FakeLambdaContext
from iotsched.ports.shards import CompletionVerdict
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.execution.batch import ShardBatch
from iotsched.services.operations.actions import cancel_instance
from iotsched.services.operations.on_demand import run_now
from iotsched.services.wiring import Wiring
from tests.support import T0, task

NAMESPACE = "iotsched-metrics-test"
STEP = timedelta(milliseconds=1500)


def emf_documents(out: str) -> list[dict[str, Any]]:
    """The EMF documents among the function's stdout lines (the logger prints JSON too)."""
    documents = []
    for line in out.splitlines():
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict) and "_aws" in data:
            documents.append(data)
    return documents


def metrics_of(document: dict[str, Any]) -> dict[str, tuple[str, list[float]]]:
    """Metric name -> (unit, values) of one EMF document, checked against its directive."""
    (directive,) = document["_aws"]["CloudWatchMetrics"]
    assert directive["Namespace"] == NAMESPACE
    found = {}
    for metric in directive["Metrics"]:
        raw = document[metric["Name"]]
        found[metric["Name"]] = (metric["Unit"], raw if isinstance(raw, list) else [raw])
    return found


def load(monkeypatch: pytest.MonkeyPatch, name: str, services: Wiring) -> ModuleType:
    """The function module, re-imported under the test's environment (Metrics reads its
    namespace when created), with its container's wiring replaced by `services`."""
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", NAMESPACE)
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", name)
    module = importlib.reload(importlib.import_module(f"functions.{name}.app"))
    # Powertools keeps the metrics of every Metrics object in one process-wide set: what an
    # earlier test's handler added without flushing must not reach this document.
    module.metrics.clear_metrics()
    monkeypatch.setattr(module.container, "wiring", lambda: services)
    monkeypatch.setattr(module.container, "settings", lambda: SimpleNamespace(worker_id="w-1"))
    return module


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
def services(clock: ManualClock) -> Iterator[Wiring]:
    def step(ctx: ShardContext) -> None:
        """Takes 1.5 s of the manual clock; shard 2 always fails."""
        clock.advance(STEP)
        if ctx.shard == 2:
            raise RuntimeError("shard 2 fails")

    yield bootstrap.build_memory(clock=clock, handlers={"step": step, "noop": step})


def fire_scan(
    services: Wiring, handler: str, **fields: Any
) -> tuple[InstanceRecord, MemoryShardQueue]:
    """`scan` (3 id-range shards, `handler`) run now: its instance and the queue it went to."""
    definition = task(
        "scan",
        handler=handler,
        sharding={"strategy": "id_range", "shards": 3, "key_space": "device_id", "id_max": 30},
        timeout_s=60,
        **fields,
    )
    apply_tasks([definition], services.tasks, now=T0)
    instance, _ = run_now("scan", services)
    queue = services.queue
    assert isinstance(queue, MemoryShardQueue)
    return instance, queue


def sqs_event(queue: MemoryShardQueue, shards: list[int]) -> dict[str, Any]:
    records = []
    for message in queue.sent:
        if message.shard in shards:
            records.append(
                {
                    "messageId": f"m-{message.shard}",
                    "receiptHandle": f"rh-{message.shard}",
                    "body": message.model_dump_json(),
                    "attributes": {"ApproximateReceiveCount": "1"},
                    "messageAttributes": {},
                    "md5OfBody": "",
                    "eventSource": "aws:sqs",
                    "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:shards",
                    "awsRegion": "us-east-1",
                }
            )
    return {"Records": records}


def test_the_worker_publishes_shard_outcomes_retries_takeovers_and_durations(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    clock: ManualClock,
    services: Wiring,
) -> None:
    instance, queue = fire_scan(services, "step", retry={"max_attempts": 2, "backoff_s": 0})
    # shard 1's first attempt never ends: its worker died holding the lease, which expires
    services.instances.take_lease(
        instance.instance_id,
        1,
        bounds={},
        worker="dead-worker",
        now=clock.now(),
        lease_until=clock.now() + timedelta(seconds=10),
        max_attempts=2,
    )
    clock.advance(timedelta(seconds=30))
    worker = load(monkeypatch, "worker", services)
    capsys.readouterr()

    first = worker.lambda_handler(sqs_event(queue, [0, 1, 2]), FakeLambdaContext("worker", 60))

    assert first == {"batchItemFailures": [{"itemIdentifier": "m-2"}]}  # shard 2 comes back
    (document,) = emf_documents(capsys.readouterr().out)
    assert metrics_of(document) == {
        "ShardsSucceeded": ("Count", [1, 1]),  # shard 0, and shard 1 on its second attempt
        "ShardsTakenOver": ("Count", [1]),  # shard 1
        "ShardsRetried": ("Count", [1]),  # shard 2, attempt 1 of 2
        "ShardDuration": ("Milliseconds", [1500, 1500, 1500]),
    }
    assert document["service"] == "worker"

    second = worker.lambda_handler(sqs_event(queue, [2]), FakeLambdaContext("worker", 60))

    assert second == {"batchItemFailures": []}  # the last attempt failed: acknowledged
    (document,) = emf_documents(capsys.readouterr().out)
    assert metrics_of(document) == {
        "ShardsFailed": ("Count", [1]),
        "ShardDuration": ("Milliseconds", [1500]),
        "InstancesFailed": ("Count", [1]),  # its last shard's completion ended the instance
    }
    again = worker.lambda_handler(sqs_event(queue, [0]), FakeLambdaContext("worker", 60))
    assert again == {"batchItemFailures": []}
    (document,) = emf_documents(capsys.readouterr().out)
    # a redelivered message of a finished instance: nothing ran, and its end is not counted again
    assert metrics_of(document) == {"ShardsNotStarted": ("Count", [1])}


def test_the_dispatcher_publishes_instances_fired_and_duplicate_claims_rejected(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    clock: ManualClock,
    services: Wiring,
) -> None:
    apply_tasks(
        [
            task("a", trigger={"rate": "1m"}, misfire={"grace_s": 60}),
            task(
                "b",
                trigger={"rate": "1m"},
                misfire={"grace_s": 60},
                sharding={"strategy": "static", "shards": [{"n": 1}, {"n": 2}]},
            ),
        ],
        services.tasks,
        now=T0 - timedelta(minutes=1),
    )
    dispatcher = load(monkeypatch, "dispatcher", services)
    ticks = MemoryDispatchQueue()
    monkeypatch.setattr(dispatcher.container, "queue", lambda: ticks)
    monkeypatch.setattr(
        dispatcher.container,
        "settings",
        lambda: SimpleNamespace(index_buckets=32, batch_reports=False, tracing="off"),
    )
    tick = scheduled_event(T0, rule="iotsched-TickFunction-Tick")
    capsys.readouterr()

    dispatcher.tick_handler(tick, FakeLambdaContext("tick", 30))
    (sent,) = (metrics_of(d) for d in emf_documents(capsys.readouterr().out))
    assert sent == {"BucketTicksSent": ("Count", [32])}
    event = {
        "Records": [
            {
                "messageId": f"m-{t.bucket}",
                "receiptHandle": f"rh-{t.bucket}",
                "body": tick_body(t),
                "attributes": {"ApproximateReceiveCount": "1"},
                "messageAttributes": {},
                "md5OfBody": "",
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:dispatch",
                "awsRegion": "us-east-1",
            }
            for t in ticks.sent
        ]
    }
    # The first delivery's invocation dies after its claims, before releasing its buckets; the
    # message comes back once their leases ended, and its dispatch read the due index before
    # the first advanced the tasks' clocks, so its claims collide.
    seen_due = services.tasks.due_tasks(T0)
    release = services.tasks.release_tick
    monkeypatch.setattr(services.tasks, "release_tick", lambda *a, **k: True)
    dispatcher.lambda_handler(event, FakeLambdaContext("dispatcher", 60))
    monkeypatch.setattr(services.tasks, "release_tick", release)
    clock.advance(timedelta(seconds=120))
    monkeypatch.setattr(services.tasks, "due_tasks", lambda now, **options: seen_due)
    dispatcher.lambda_handler(event, FakeLambdaContext("dispatcher", 60))
    # A third delivery, once the second ended: every bucket's minute is done, absorbed.
    assert dispatcher.lambda_handler(event, FakeLambdaContext("dispatcher", 60)) == {
        "batchItemFailures": []
    }

    first, duplicate, absorbed = (metrics_of(d) for d in emf_documents(capsys.readouterr().out))
    assert first["InstancesFired"] == ("Count", [2])
    assert first["DuplicateClaimsRejected"] == ("Count", [0])
    assert first["ShardMessagesSent"] == ("Count", [3])
    assert first["BucketsDispatched"] == ("Count", [32])
    assert duplicate["InstancesFired"] == ("Count", [0])
    # the stale view hands both tasks to each bucket: 32 buckets collide on 2 claims each
    assert duplicate["DuplicateClaimsRejected"] == ("Count", [64])
    assert duplicate["ShardMessagesSent"] == ("Count", [0])
    assert absorbed["BucketTicksAbsorbed"] == ("Count", [32])
    assert absorbed["BucketsDispatched"] == ("Count", [0])
    assert set(first) == {
        "InstancesFired",
        "DuplicateClaimsRejected",
        "InstancesSkipped",
        "InstancesQueued",
        "InstancesResumed",
        "InstancesFailedToStart",
        "ShardMessagesSent",
        "DueTasks",
        "BucketsDispatched",
        "BucketTicksAbsorbed",
        "BucketTicksWaiting",
    }


def test_the_worker_acknowledges_a_finished_shard_only_once_its_completion_committed(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    clock: ManualClock,
    services: Wiring,
) -> None:
    """The batch's completions commit together after the last record; one not written comes
    back as a batch item failure (and counts in no outcome metric), the others are counted."""
    instance, queue = fire_scan(services, "step")
    store = services.instances
    commits: list[list[int]] = []
    original = store.complete_shards

    def complete_shards(completions: Any) -> list[CompletionVerdict]:
        commits.append([c.index for c in completions])
        verdicts = original([c for c in completions if c.index != 1])
        return [
            CompletionVerdict.UNWRITTEN if c.index == 1 else verdicts.pop(0) for c in completions
        ]

    monkeypatch.setattr(store, "complete_shards", complete_shards)
    worker = load(monkeypatch, "worker", services)
    capsys.readouterr()

    # (the second shard starts within the first's 5 s hold: the two commit together)
    response = worker.lambda_handler(sqs_event(queue, [0, 1]), FakeLambdaContext("worker", 300))

    assert response == {"batchItemFailures": [{"itemIdentifier": "m-1"}]}
    assert commits == [[0, 1]]  # one commit for the batch
    (document,) = emf_documents(capsys.readouterr().out)
    assert metrics_of(document) == {
        "ShardsSucceeded": ("Count", [1]),
        "ShardDuration": ("Milliseconds", [1500, 1500]),
    }
    found = store.get_instance(instance.instance_id)
    assert found is not None and found.remaining == 2
    assert [s.status.value for s in store.list_shards(instance.instance_id)] == [
        "succeeded",
        "running",  # its message comes back: the lease/attempt logic takes it from here
    ]


def test_the_worker_sends_back_what_it_cannot_start_before_its_timeout(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], clock: ManualClock
) -> None:
    def slow(ctx: ShardContext) -> None:
        """Shard 0 runs until the closing timer (1 s into the invocation) sent the rest back."""
        if ctx.shard == 0:
            deadline = time.monotonic() + 10
            while len(queue.sent) < 5 and time.monotonic() < deadline:
                time.sleep(0.02)

    services = bootstrap.build_memory(clock=clock, handlers={"slow": slow})
    instance, queue = fire_scan(services, "slow")
    worker = load(monkeypatch, "worker", services)
    capsys.readouterr()
    context = FakeLambdaContext("worker", ShardBatch.COMMIT_ALLOWANCE_S + 1)

    response = worker.lambda_handler(sqs_event(queue, [0, 1, 2]), context)

    # shards 1 and 2 were sent back as fresh copies: their records are acknowledged
    assert response == {"batchItemFailures": []}
    assert [m.shard for m in queue.sent] == [0, 1, 2, 1, 2]
    (document,) = emf_documents(capsys.readouterr().out)
    found = metrics_of(document)
    assert found["ShardsGivenBack"] == ("Count", [1, 1])
    assert found["ShardsSucceeded"] == ("Count", [1])
    shards = services.instances.list_shards(instance.instance_id)
    assert [(s.index, s.status.value) for s in shards] == [(0, "succeeded")]


def test_the_sweeper_publishes_cancelled_shards_follow_ups_and_republished_alerts(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    clock: ManualClock,
    services: Wiring,
) -> None:
    # a shard's worker died holding its lease, and its instance was cancelled meanwhile
    cancelled, _ = fire_scan(services, "step")
    services.instances.take_lease(
        cancelled.instance_id,
        1,
        bounds={},
        worker="dead-worker",
        now=clock.now(),
        lease_until=clock.now() + timedelta(seconds=10),
        max_attempts=3,
    )
    # renewed once (in the lease index), then its worker died
    services.instances.extend_lease(
        cancelled.instance_id, 1, attempt=1, until=clock.now() + timedelta(seconds=10)
    )
    cancel_instance(cancelled.instance_id, services)
    # an instance whose ender died after the write that ended it, its alert still owed
    apply_tasks([task("other", handler="step")], services.tasks, now=T0)
    failed, _ = run_now("other", services)
    assert services.instances.end_instance(
        failed.instance_id,
        status=InstanceStatus.FAILED,
        reason="boom",
        finished_at=clock.now(),
        owed=decide_follow_ups(failed, alert=True),
    )
    # an alert recorded whose publish was never confirmed (the in-memory log publishes in one
    # step, so it stands in for the DynamoDB log's answer)
    unconfirmed = Alert(
        type="instance_timed_out",
        severity="high",
        task_id="third",
        tenant=None,
        instance_id="third@2026-11-29T11:00Z",
        status="timed_out",
        alert_id="third@2026-11-29T11:00Z#timed_out",
        raised_at=clock.now(),
    )
    monkeypatch.setattr(
        services.alert_log, "unpublished", lambda *, before, limit=100: [unconfirmed]
    )
    clock.advance(timedelta(minutes=1))
    # what the test's own calls ended (the API's process, on AWS) is no sweep's figure
    services.ends.drain()
    sweeper = load(monkeypatch, "sweeper", services)
    capsys.readouterr()

    report = sweeper.lambda_handler(
        scheduled_event(clock.now(), rule="iotsched-SweeperFunction-Sweep"),
        FakeLambdaContext("sweeper", 60),
    )

    assert report["cancelled_shards"] == [f"{cancelled.instance_id}#1"]
    assert report["followed_up"] == [failed.instance_id]
    assert report["republished_alerts"] == [unconfirmed.alert_id]
    (document,) = emf_documents(capsys.readouterr().out)
    assert metrics_of(document) == {
        "InstancesTimedOut": ("Count", [0]),
        "ShardsTimedOut": ("Count", [0]),
        "ShardsRequeued": ("Count", [0]),
        "DispatchesResumed": ("Count", [0]),
        "InstancesFinalized": ("Count", [0]),
        "ShardsCancelled": ("Count", [1]),
        "InstancesFollowedUp": ("Count", [1]),
        "AlertsRepublished": ("Count", [1]),
        "TasksMissed": ("Count", [0]),
    }
    assert document["service"] == "sweeper"
