"""End to end on the local runtime: real processes, real SIGKILL, real SQS redrive."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from iotsched.adapters.aws import AwsClients
from iotsched.core.instance_record import InstanceStatus
from iotsched.core.shard_record import ShardStatus
from iotsched.local.runtime import LocalRuntime
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.definitions.task_file import parse_task_file
from iotsched.services.scheduling.send import shard_messages
from iotsched.services.wiring import Wiring
from iotsched.tasklib import registry
from tests.support import PATIENCE_S

pytestmark = [pytest.mark.slow, pytest.mark.moto]


def _apply(services: Wiring, tasks: list[dict[str, object]], now: datetime) -> None:
    defs = parse_task_file({"tasks": tasks}, handlers=registry())
    apply_tasks(defs, services.tasks, now=now)


def _final(services: Wiring, instance_id: str) -> bool:
    inst = services.instances.get_instance(instance_id)
    return inst is not None and inst.status.final


def test_tick_runs_every_shard_once_with_stored_bounds(
    runtime: LocalRuntime, services: Wiring
) -> None:
    # given a task with 6 id-range shards, due at 10:00
    start = datetime(2026, 1, 5, 9, 58, tzinfo=UTC)
    _apply(
        services,
        [
            {
                "id": "scan-six",
                "handler": "noop",
                "trigger": {"rate": "1h"},
                "sharding": {"strategy": "id_range", "shards": 6, "id_max": 60000},
                "timeout_s": 2,
            }
        ],
        start,
    )
    # when the 10:00 tick is delivered four times, two at a time
    results = runtime.tick(datetime(2026, 1, 5, 10, 0, 20, tzinfo=UTC), repeat=4)
    instance_id = "scan-six@2026-01-05T10:00Z"
    assert runtime.wait_for(lambda: _final(services, instance_id), PATIENCE_S)
    # then one instance was claimed, and it succeeded with one attempt per shard
    assert sum(len(r.report["claimed"]) for r in results) == 1
    inst = services.instances.get_instance(instance_id)
    assert inst is not None and inst.status is InstanceStatus.SUCCEEDED
    shards = services.instances.list_shards(instance_id)
    assert [s.index for s in shards] == list(range(6))
    for shard in shards:
        assert shard.status is ShardStatus.SUCCEEDED
        assert shard.bounds == inst.plan.bounds(shard.index)
        assert len(shard.attempts) == 1
        attempt = shard.attempts[0]
        assert attempt.worker.startswith("WorkerFunction-")
        assert attempt.ended_at is not None and attempt.duration_ms is not None
        assert attempt.outcome == "succeeded"


def test_malformed_message_goes_to_dlq_while_siblings_succeed(
    runtime: LocalRuntime, services: Wiring
) -> None:
    # given a claimed instance of three shards
    start = datetime(2026, 1, 7, 9, 58, tzinfo=UTC)
    _apply(
        services,
        [
            {
                "id": "three",
                "handler": "noop",
                "trigger": {"rate": "1h"},
                "sharding": {"strategy": "static", "shards": [{"t": "a"}, {"t": "b"}, {"t": "c"}]},
                "timeout_s": 2,
            }
        ],
        start,
    )
    # (claimed by the test itself, so that it can send the three real shard messages in one
    # batch together with a poison one, as a broken producer would)
    from iotsched.core.decisions import Firing
    from iotsched.core.instance_record import TriggerKind
    from iotsched.services.scheduling.build import build_instance

    task = services.tasks.get_task("three")
    assert task is not None
    instance = build_instance(
        task,
        Firing(
            slot=datetime(2026, 1, 7, 10, 0, tzinfo=UTC),
            kind=TriggerKind.MANUAL,
            status=InstanceStatus.PLANNING,
        ),
        claimed_at=datetime.now(UTC),
        dispatch_lease_s=60,
    )
    assert services.instances.claim_instance(instance) is None
    sqs = AwsClients(region="us-east-1", endpoint_url=runtime.endpoint_url).sqs()
    queue = runtime.settings().shard_queue_url
    entries = [
        {"Id": str(n), "MessageBody": m.model_dump_json()}
        for n, m in enumerate(shard_messages(instance))
    ]
    entries.insert(
        1, {"Id": "poison", "MessageBody": '{"instance_id": "three@x", "shard": "not-a-number"'}
    )
    sqs.send_message_batch(QueueUrl=queue, Entries=entries)  # type: ignore[arg-type]
    # then the three real shards succeed and the instance ends succeeded
    assert runtime.wait_for(lambda: _final(services, instance.instance_id), PATIENCE_S)
    final = services.instances.get_instance(instance.instance_id)
    assert final is not None and final.status is InstanceStatus.SUCCEEDED
    # and the poison message reaches the DLQ after maxReceiveCount receives, where the DLQ
    # handler (it cannot name a shard) drops it with one alert
    alerts = _wait_for_alerts(
        runtime, lambda a: a["type"] == "malformed_dead_letter", 1, PATIENCE_S
    )
    assert len(alerts) == 1
    assert "not-a-number" in alerts[0]["reason"]


def _wait_for_alerts(
    runtime: LocalRuntime, match: Callable[[dict[str, Any]], bool], want: int, timeout: float
) -> list[dict[str, Any]]:
    """Alerts from the local alert inbox that `match`, waiting until `want` arrived."""
    sqs = AwsClients(region="us-east-1", endpoint_url=runtime.endpoint_url).sqs()
    inbox = runtime.deployment.alert_inbox_url
    assert inbox is not None
    found: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and len(found) < want:
        for m in sqs.receive_message(QueueUrl=inbox, MaxNumberOfMessages=10).get("Messages", []):
            alert = json.loads(json.loads(m["Body"])["Message"])
            if match(alert):
                found.append(alert)
            else:  # another test's alert: leave it for that test
                sqs.change_message_visibility(
                    QueueUrl=inbox, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0
                )
                continue
            sqs.delete_message(QueueUrl=inbox, ReceiptHandle=m["ReceiptHandle"])
        time.sleep(0.3)
    return found


def test_failed_instance_publishes_exactly_one_alert(
    runtime: LocalRuntime, services: Wiring
) -> None:
    start = datetime(2026, 1, 8, 9, 58, tzinfo=UTC)
    _apply(
        services,
        [
            {
                "id": "fails-once",
                "tenant": "acme",
                "handler": "noop",
                "trigger": {"rate": "1h"},
                "sharding": {"strategy": "static", "shards": [{"r": 1}, {"r": 2}]},
                "retry": {"max_attempts": 1},
                "timeout_s": 2,
                "alerts": {"severity": "critical"},
                "params": {"fail": [1]},
            }
        ],
        start,
    )
    runtime.tick(datetime(2026, 1, 8, 10, 0, tzinfo=UTC), repeat=2)
    instance_id = "fails-once@2026-01-08T10:00Z"
    assert runtime.wait_for(lambda: _final(services, instance_id), PATIENCE_S)
    inst = services.instances.get_instance(instance_id)
    assert inst is not None and inst.status is InstanceStatus.FAILED
    sqs = AwsClients(region="us-east-1", endpoint_url=runtime.endpoint_url).sqs()
    inbox = runtime.deployment.alert_inbox_url
    assert inbox is not None
    alerts = []
    # until the alert came (however slow), then 3 s more for a duplicate
    deadline = time.monotonic() + PATIENCE_S
    while time.monotonic() < deadline:
        if alerts:
            deadline = min(deadline, time.monotonic() + 3)
        received = sqs.receive_message(QueueUrl=inbox, MaxNumberOfMessages=10, WaitTimeSeconds=1)
        for m in received.get("Messages", []):
            envelope = json.loads(m["Body"])
            alert = json.loads(envelope["Message"])
            if alert["instance_id"] == instance_id:
                alerts.append((alert, envelope["MessageAttributes"]))
    assert len(alerts) == 1
    alert, attributes = alerts[0]
    assert alert["failed_shards"][0]["shard"] == 1
    assert "noop asked to fail" in alert["failed_shards"][0]["error"]
    assert alert["business_date"] == "2026-01-07"
    assert {k: v["Value"] for k, v in attributes.items()} == {
        "type": "instance_failed",
        "severity": "critical",
        "tenant": "acme",
        "task": "fails-once",
        "silenced": "no",
    }


def test_the_event_source_switch_reaches_a_worker_that_was_starting(
    runtime: LocalRuntime,
) -> None:
    """Disabling and enabling the shard queue's event source while a replacement worker starts:
    the switch reaches it once it has reported in, and never kills it (a signal sent before its
    interpreter installed the handler would, by the signal's default action)."""
    worker = runtime.workers[0]

    def replacement_starting(killed_pid: int) -> Callable[[], bool]:
        return lambda: worker.pid != killed_pid and worker.state == "starting" and worker.alive

    # when it is disabled while a killed worker's replacement starts ...
    killed = runtime.kill_worker(0).pid
    assert killed is not None
    assert runtime.wait_for(replacement_starting(killed), PATIENCE_S, 0.002)
    started = (worker.pid, worker.generation)
    with runtime.workers_paused():
        # ... that same process reports paused
        assert (worker.pid, worker.generation, worker.state) == (*started, "paused")
        # and when it is enabled again while the next replacement starts ...
        killed = runtime.kill_worker(0).pid
        assert killed is not None
        assert runtime.wait_for(replacement_starting(killed), PATIENCE_S, 0.002)
        started = (worker.pid, worker.generation)
    # ... that process polls the queue, and lives
    assert runtime.wait_for(lambda: worker.state in ("ready", "idle", "busy"), PATIENCE_S)
    assert (worker.pid, worker.generation) == started
    assert worker.alive and not worker.paused
