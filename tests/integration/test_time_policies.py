"""Acceptance tests for time and policies, on the local runtime with a manual clock.

Each task here is hourly; the test delivers ticks at chosen instants, as `iotsched local tick`
does, to replay an outage deterministically.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from iotsched.adapters.aws import AwsClients
from iotsched.core.records import InstanceStatus, TriggerKind
from iotsched.local.runtime import LocalRuntime
from iotsched.services.definitions.apply import (
    apply_tasks,
    parse_task_file,
)
from iotsched.services.operations.actions import pause_task
from iotsched.services.wiring import Wiring
from iotsched.tasklib import registry
from tests.support import wait_swept

pytestmark = [pytest.mark.slow, pytest.mark.moto]

H = timedelta(hours=1)


def _apply(services: Wiring, tasks: list[dict[str, Any]], now: datetime) -> None:
    apply_tasks(parse_task_file({"tasks": tasks}, handlers=registry()), services.tasks, now=now)


def _alerts(runtime: LocalRuntime) -> list[dict[str, Any]]:
    sqs = AwsClients(region="us-east-1", endpoint_url=runtime.endpoint_url).sqs()
    inbox = runtime.deployment.alert_inbox_url
    assert inbox is not None
    found = []
    for _ in range(10):
        batch = sqs.receive_message(QueueUrl=inbox, MaxNumberOfMessages=10).get("Messages", [])
        if not batch:
            break
        for m in batch:
            found.append(json.loads(json.loads(m["Body"])["Message"]))
            sqs.delete_message(QueueUrl=inbox, ReceiptHandle=m["ReceiptHandle"])
    return found


def test_an_outage_of_24_hourly_slots_under_each_misfire_policy(
    runtime: LocalRuntime, services: Wiring
) -> None:
    # given three hourly tasks whose last tick was 2026-02-01T00:00Z ...
    start = datetime(2026, 2, 1, 0, 0, tzinfo=UTC)
    base = {"handler": "noop", "trigger": {"rate": "1h"}, "timeout_s": 2}
    _apply(
        services,
        [
            {**base, "id": "m-skip", "misfire": {"policy": "skip", "grace_s": 300}},
            {**base, "id": "m-once", "misfire": {"policy": "fire_once", "grace_s": 300}},
            {
                **base,
                "id": "m-catch",
                "misfire": {"policy": "catch_up", "max_catch_up": 5, "grace_s": 300},
            },
        ],
        start - timedelta(minutes=30),
    )
    deaths = runtime.timeouts + runtime.respawns
    runtime.tick(start, repeat=2)
    _alerts(runtime)  # start from an empty inbox
    # ... when the dispatcher was down for 24 slots and comes back at 2026-02-02T00:00:20Z
    back = start + 24 * H
    runtime.tick(back + timedelta(seconds=20), repeat=2)
    # (two concurrent deliveries may each claim part of the outage; then neither moves the
    # task's clock and the next minute's tick does: it finds every slot claimed)
    runtime.tick(back + timedelta(minutes=1, seconds=20))

    def instances(task_id: str) -> list[Any]:
        return [i for i in services.instances.list_instances(task_id=task_id) if i.slot > start]

    assert wait_swept(
        runtime,
        lambda: all(i.status.final for t in ("m-skip", "m-once", "m-catch") for i in instances(t)),
        deaths=deaths,
    )
    # skip: 23 missed slots recorded skipped (reason misfire); the on-time slot ran
    skip = instances("m-skip")
    assert Counter(i.status for i in skip) == {
        InstanceStatus.SKIPPED: 23,
        InstanceStatus.SUCCEEDED: 1,
    }
    assert {i.reason for i in skip if i.status is InstanceStatus.SKIPPED} == {"misfire"}
    assert [i.slot for i in skip if i.status is InstanceStatus.SUCCEEDED] == [back]
    # fire_once: one instance for the latest slot, covering the 23 others
    (once,) = instances("m-once")
    assert (once.slot, once.status, once.covers_count) == (back, InstanceStatus.SUCCEEDED, 23)
    # catch_up (max 5): the 5 oldest missed slots ran, 18 were recorded skipped, the latest ran
    catch = sorted(instances("m-catch"), key=lambda i: i.slot)
    ran = [i for i in catch if i.status is InstanceStatus.SUCCEEDED]
    assert [i.slot for i in ran] == [start + n * H for n in (1, 2, 3, 4, 5)] + [back]
    assert [i.trigger_kind for i in ran[:5]] == [TriggerKind.CATCH_UP] * 5
    dropped = [i for i in catch if i.status is InstanceStatus.SKIPPED]
    assert len(dropped) == 18 and {i.reason for i in dropped} == {"catch_up_limit"}
    # with one alert for the dropped catch-ups, though the tick came twice
    alerts = [a for a in _alerts(runtime) if a["type"] == "catch_up_dropped"]
    assert len(alerts) == 1 and alerts[0]["task_id"] == "m-catch"
    assert alerts[0]["reason"].startswith("18 missed slot(s)")


def test_serial_with_max_queued_one_and_three_overlapping_slots(
    runtime: LocalRuntime, services: Wiring
) -> None:
    # given an hourly task whose instances take longer than the ticks come (in January: the
    # other tasks of this module are not due then, so its shard has a worker's batch to itself)
    start = datetime(2026, 1, 10, 0, 0, tzinfo=UTC)
    _apply(
        services,
        [
            {
                "id": "serial",
                "handler": "noop",
                "trigger": {"rate": "1h"},
                "blocking": {"policy": "serial", "max_queued": 1},
                "timeout_s": 3,
                "params": {"seconds": 1},
            }
        ],
        start - timedelta(minutes=30),
    )
    deaths = runtime.timeouts + runtime.respawns
    # The three ticks come while the first instance still runs, however slow the machine: the
    # shard queue's event source is disabled until they are delivered (its message waits).
    with runtime.workers_paused():
        reports = [runtime.tick(start + n * H + timedelta(seconds=10))[0].report for n in range(3)]

    def mine(report: dict[str, Any], key: str) -> int:  # other tests' tasks tick too
        return len([i for i in report[key] if i.startswith("serial@")])

    assert [mine(r, "claimed") for r in reports] == [1, 0, 0]
    assert [mine(r, "queued") for r in reports] == [0, 1, 0]
    assert [mine(r, "skipped") for r in reports] == [0, 0, 1]
    ids = [f"serial@{start + n * H:%Y-%m-%dT%H:%MZ}" for n in range(3)]

    def final(instance_id: str) -> bool:
        found = services.instances.get_instance(instance_id)
        return found is not None and found.status.final

    # (a worker killed by this module's 4 s worker timeout may leave an instance to the sweeper)
    assert wait_swept(runtime, lambda: final(ids[0]) and final(ids[1]), deaths=deaths)
    first, second, third = (services.instances.get_instance(i) for i in ids)
    assert first is not None and second is not None and third is not None
    assert (first.status, second.status) == (InstanceStatus.SUCCEEDED, InstanceStatus.SUCCEEDED)
    assert third.status is InstanceStatus.SKIPPED and (third.reason or "").startswith("queue_full")
    assert first.finished_at is not None and second.finished_at is not None
    assert second.finished_at > first.finished_at  # one after the other, never together
    overflow = [a for a in _alerts(runtime) if a["type"] == "queue_overflow"]
    assert [a["instance_id"] for a in overflow] == [ids[2]]
    pause_task("serial", services)  # the later tests' ticks would fire it into their batches
