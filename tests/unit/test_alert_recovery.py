"""The recovery notice, end to end on the in-memory services: ticks fire a task, workers run
its shards, and the first success after a failure alert raises one `recovered` alert."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any, cast

from iotsched import bootstrap
from iotsched.adapters.memory.queues import (
    MemoryAlertSink,
    MemoryShardQueue,
)
from iotsched.clock import ManualClock
from iotsched.context import ShardContext
from iotsched.core.instance_record import InstanceStatus
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.definitions.task_file import parse_task_file
from iotsched.services.execution.batch import run_shard
from iotsched.services.execution.outcomes import Delivery
from iotsched.services.notices.alert_policy import publish_instance_alert
from iotsched.services.scheduling.tick import dispatch_tick
from iotsched.tasklib import registry
from tests.support import T0

M = timedelta(minutes=1)


def test_the_first_success_after_failures_raises_one_recovery_notice() -> None:
    clock = ManualClock(T0 - M)
    failing = {"now": True}

    def flaky(ctx: ShardContext) -> Mapping[str, Any] | None:
        if failing["now"]:
            raise RuntimeError("device unreachable")
        return None

    services = bootstrap.build_memory(clock=clock, handlers={**registry(), "flaky": flaky})
    tasks = parse_task_file(
        {
            "tasks": [
                {
                    "id": "probe",
                    "handler": "flaky",
                    "trigger": {"rate": "1m"},
                    "retry": {"max_attempts": 1},
                    "alerts": {"recovery": True},
                }
            ]
        },
        handlers=services.handlers,
    )
    apply_tasks(tasks, services.tasks, now=clock.now())
    queue = cast("MemoryShardQueue", services.queue)
    sink = cast("MemoryAlertSink", services.alerts)

    def minute(fails: bool) -> str:
        failing["now"] = fails
        clock.advance(M)
        dispatch_tick(clock.now(), services)
        (message,) = queue.sent[-1:]
        run_shard(
            Delivery(body=message.model_dump_json(), receipt_handle="r"), services, worker="w"
        )
        found = services.instances.get_instance(message.instance_id)
        assert found is not None and found.status.final
        return message.instance_id

    first = minute(fails=True)
    minute(fails=True)
    recovered_by = minute(fails=False)
    minute(fails=False)  # still fine: no notice
    again = minute(fails=True)
    minute(fails=False)
    types = [(a.type, a.instance_id) for a in sink.published]
    assert [t for t, _ in types] == [
        "instance_failed",
        "instance_failed",
        "recovered",
        "instance_failed",
        "recovered",
    ]
    recoveries = [a for a in sink.published if a.type == "recovered"]
    assert [(a.recovered_from, a.alert_id) for a in recoveries] == [
        (first, f"{first}#recovered"),
        (again, f"{again}#recovered"),
    ]
    assert recoveries[0].instance_id == recovered_by
    # the success's alert step done again (the sweeper's retry of its follow-up): no second one
    succeeded = services.instances.get_instance(recovered_by)
    assert succeeded is not None and succeeded.status is InstanceStatus.SUCCEEDED
    publish_instance_alert(succeeded, services)
    assert len([a for a in sink.published if a.type == "recovered"]) == 2


def test_a_task_without_a_policy_owes_nothing_on_success() -> None:
    clock = ManualClock(T0 - M)
    services = bootstrap.build_memory(clock=clock)
    tasks = parse_task_file(
        {"tasks": [{"id": "plain", "handler": "noop", "trigger": {"rate": "1m"}}]},
        handlers=services.handlers,
    )
    apply_tasks(tasks, services.tasks, now=clock.now())
    clock.advance(M)
    dispatch_tick(clock.now(), services)
    (message,) = cast("MemoryShardQueue", services.queue).sent
    run_shard(Delivery(body=message.model_dump_json(), receipt_handle="r"), services, worker="w")
    found = services.instances.get_instance(message.instance_id)
    assert found is not None and found.status is InstanceStatus.SUCCEEDED
    assert found.alert_policy is None and found.owed == []
