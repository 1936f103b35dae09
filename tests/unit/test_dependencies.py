"""Fan-in by business date: `trigger: {after: [...]}`."""

from __future__ import annotations

import contextlib
from datetime import date, timedelta
from typing import Any, cast

import pytest

from iotsched import bootstrap
from iotsched.adapters.memory.queues import MemoryShardQueue
from iotsched.clock import ManualClock
from iotsched.core.instance_record import (
    InstanceStatus,
    TriggerKind,
)
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.definitions.dependencies import check_dependencies
from iotsched.services.definitions.task_file import TaskFileError
from iotsched.services.execution.batch import run_shard
from iotsched.services.execution.outcomes import (
    Delivery,
    RetryShardError,
)
from iotsched.services.scheduling.tick import dispatch_tick
from iotsched.services.wiring import Wiring
from tests.support import T0, task

DAY = date(2026, 11, 28)  # previous_day of the 2026-11-29 daily slot


def diamond(fail_c: bool = False) -> list[Any]:
    return [
        task("a", trigger={"cron": "0 12 * * *"}),
        task("b", trigger={"after": ["a"]}),
        task("c", trigger={"after": ["a"]}, params={"fail": fail_c}, retry={"max_attempts": 1}),
        task("d", trigger={"after": ["b", "c"]}),
    ]


def run_everything(services: Wiring) -> list[str]:
    """Work the queue off as workers would; returns the task ids in the order their shards ran."""
    queue = cast("MemoryShardQueue", services.queue)
    ran = []
    while queue.sent:
        message = queue.sent.pop(0)
        ran.append(message.task_id)
        with contextlib.suppress(RetryShardError):
            run_shard(
                Delivery(body=message.model_dump_json(), receipt_handle="rh"), services, worker="w"
            )
    return ran


def setup(definitions: list[Any]) -> Wiring:
    clock = ManualClock(T0 + timedelta(seconds=5))
    services = bootstrap.build_memory(clock=clock)
    check_dependencies(definitions, [])
    apply_tasks(definitions, services.tasks, now=T0 - timedelta(hours=1))
    return services


def test_a_diamond_runs_d_once_after_b_and_c() -> None:
    services = setup(diamond())
    dispatch_tick(T0, services)
    ran = run_everything(services)
    assert ran.index("d") > ran.index("b") and ran.index("d") > ran.index("c")
    assert ran.count("d") == 1
    (d,) = services.instances.list_instances(task_id="d")
    assert d.instance_id == "d@2026-11-28T00:00Z~after"
    assert (d.status, d.trigger_kind, d.business_date) == (
        InstanceStatus.SUCCEEDED,
        TriggerKind.DEPENDENCY,
        DAY,
    )
    assert len(services.instances.list_instances(task_id="b")) == 1


def test_a_failure_in_c_skips_d_naming_c() -> None:
    services = setup(diamond(fail_c=True))
    dispatch_tick(T0, services)
    ran = run_everything(services)
    assert "d" not in ran
    (c,) = services.instances.list_instances(task_id="c")
    assert c.status is InstanceStatus.FAILED
    (d,) = services.instances.list_instances(task_id="d")
    assert d.status is InstanceStatus.SKIPPED
    assert d.reason == "upstream_failed: c failed"


def test_unknown_parents_and_cycles_are_rejected_naming_them() -> None:
    with pytest.raises(TaskFileError, match="unknown parent 'ghost'"):
        check_dependencies([task("x", trigger={"after": ["ghost"]})], [])
    cycle = [
        task("p", trigger={"after": ["r"]}),
        task("q", trigger={"after": ["p"]}),
        task("r", trigger={"after": ["q"]}),
    ]
    with pytest.raises(TaskFileError) as caught:
        check_dependencies(cycle, [])
    (problem,) = caught.value.problems
    assert "dependency cycle" in problem
    assert problem.endswith("p -> r -> q -> p")
    # a parent already stored counts; the file's version of a task replaces the stored one
    check_dependencies([task("y", trigger={"after": ["stored"]})], [task("stored")])
    with pytest.raises(TaskFileError, match="cycle"):
        check_dependencies(
            [task("stored", trigger={"after": ["y"]})],
            [task("y", trigger={"after": ["stored"]})],
        )


def test_a_backfilled_date_older_than_the_parent_s_recent_runs_fires_the_child() -> None:
    from iotsched.services.scheduling.lifecycle import trigger_dependents
    from tests.support import instance

    services = setup(
        [task("a", trigger={"cron": "0 12 * * *"}), task("b", trigger={"after": ["a"]})]
    )
    day = timedelta(days=1)
    old = instance("a", T0 - 400 * day).model_copy(
        update={"status": InstanceStatus.SUCCEEDED, "remaining": 0}
    )
    assert services.instances.claim_instance(old) is None
    for k in range(1, 251):  # the parent ran every day since
        services.instances.claim_instance(instance("a", T0 - 400 * day + k * day))
    # The backfill of the old date ends: its child fires for that date.
    trigger_dependents(old, services)
    child = services.instances.get_instance(f"b@{old.business_date}T00:00Z~after")
    assert child is not None
    assert (child.business_date, child.trigger_kind) == (old.business_date, TriggerKind.DEPENDENCY)
    assert child.status is not InstanceStatus.SKIPPED


def test_a_parent_id_held_before_by_another_tenant_never_fires_the_child() -> None:
    from iotsched.services.definitions.control import delete_task

    services = setup([task("p", trigger={"cron": "0 12 * * *"}, tenant="acme")])
    dispatch_tick(T0, services)
    run_everything(services)
    (old,) = services.instances.list_instances(task_id="p")
    assert (old.status, old.business_date) == (InstanceStatus.SUCCEEDED, DAY)
    delete_task("p", services)
    # globex's own `p` (not due at T0), `q` due at T0, and `d` after both, for the same date
    globex = [
        task("p", trigger={"cron": "0 13 * * *"}, tenant="globex"),
        task("q", trigger={"cron": "0 12 * * *"}, tenant="globex"),
        task("d", trigger={"after": ["p", "q"]}, tenant="globex"),
    ]
    apply_tasks(globex, services.tasks, now=T0 - timedelta(hours=1))
    dispatch_tick(T0, services)
    assert run_everything(services) == ["q"]
    # acme's `p` of that date is not globex's: `d` waits for globex's own `p`
    assert services.instances.list_instances(task_id="d") == []
    assert services.instances.list_instances(task_id="p", incarnation=2) == []
