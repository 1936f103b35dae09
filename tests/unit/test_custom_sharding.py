"""`sharding: {strategy: custom}`: planners registered by name, like handlers; an unknown one is
refused at `tasks apply`, a registered one plans the shards when the instance is claimed."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import pytest

from iotsched import bootstrap
from iotsched.clock import ManualClock
from iotsched.core.instance_record import InstanceStatus
from iotsched.core.sharding import register_planner
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.definitions.task_file import (
    TaskFileError,
    parse_task_file,
)
from iotsched.services.execution.batch import run_shard
from iotsched.services.execution.outcomes import Delivery
from iotsched.services.scheduling.send import shard_messages
from iotsched.services.scheduling.tick import dispatch_tick
from iotsched.tasklib import registry
from tests.support import T0, task

IID = "t@2026-11-29T12:00Z"


@register_planner("test-regions")
def regions(params: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [{"region": r} for r in params["regions"]]


def custom_file(planner: str, **params: Any) -> dict[str, Any]:
    return {
        "tasks": [
            {
                "id": "t",
                "handler": "noop",
                "trigger": {"rate": "1h"},
                "sharding": {"strategy": "custom", "planner": planner, "params": params},
            }
        ]
    }


def test_an_unknown_planner_is_refused_at_apply_naming_it() -> None:
    with pytest.raises(TaskFileError) as err:
        parse_task_file(custom_file("by-moon-phase"), handlers=registry())
    (problem,) = err.value.problems
    assert problem.startswith("task 't': sharding.planner: unknown planner 'by-moon-phase'")
    assert "hash_buckets" in problem and "test-regions" in problem


def test_a_registered_planner_is_accepted() -> None:
    (definition,) = parse_task_file(
        custom_file("test-regions", regions=["eu"]), handlers=registry()
    )
    assert definition.sharding.strategy == "custom"


def test_a_planner_failing_on_its_params_is_refused_at_apply_as_each_firing_would_fail() -> None:
    with pytest.raises(TaskFileError) as err:
        parse_task_file(custom_file("test-regions"), handlers=registry())
    assert err.value.problems == ["task 't': sharding: planner 'test-regions' failed: 'regions'"]


@pytest.mark.parametrize(
    ("sharding", "bounds"),
    [
        (
            {"strategy": "custom", "planner": "test-regions", "params": {"regions": ["eu", "us"]}},
            [{"region": "eu"}, {"region": "us"}],
        ),
        (
            {"strategy": "custom", "planner": "hash_buckets", "params": {"buckets": 3}},
            [{"key_space": "device_id", "bucket": i, "buckets": 3} for i in range(3)],
        ),
    ],
)
def test_a_custom_plan_fires_and_runs_every_shard(
    sharding: dict[str, Any], bounds: list[dict[str, Any]]
) -> None:
    clock = ManualClock(T0 + timedelta(seconds=5))
    services = bootstrap.build_memory(clock=clock)
    apply_tasks([task("t", sharding=sharding)], services.tasks, now=T0 - timedelta(hours=1))
    report = dispatch_tick(T0, services)
    assert (report.claimed, report.failed) == ([IID], [])
    instance = services.instances.get_instance(IID)
    assert instance is not None
    messages = shard_messages(instance)
    assert [m.bounds for m in messages] == bounds
    for message in messages:
        run_shard(
            Delivery(body=message.model_dump_json(), receipt_handle="rh"), services, worker="w"
        )
    ended = services.instances.get_instance(IID)
    assert ended is not None and ended.status is InstanceStatus.SUCCEEDED


def test_a_planner_that_fails_fails_its_instance_with_one_alert_naming_it() -> None:
    clock = ManualClock(T0 + timedelta(seconds=5))
    services = bootstrap.build_memory(clock=clock)
    sharding = {"strategy": "custom", "planner": "hash_buckets", "params": {"buckets": 0}}
    apply_tasks([task("t", sharding=sharding)], services.tasks, now=T0 - timedelta(hours=1))
    report = dispatch_tick(T0, services)
    assert report.failed == [IID]
    instance = services.instances.get_instance(IID)
    assert instance is not None and instance.status is InstanceStatus.FAILED
    assert "hash_buckets" in (instance.reason or "")
    (alert,) = services.alert_log.recent()
    assert alert.alert_id == f"{IID}#failed"
