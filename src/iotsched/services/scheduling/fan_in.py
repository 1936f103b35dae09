"""Fan-in by business date: a task with `trigger: {after: [a, b]}` fires for a business date
once every parent's instance for that date has succeeded, exactly once.

Decided here, fired by `lifecycle.trigger_dependents` whenever an instance ends: this module
reads the stores and never claims. The child's instance key is its business date
(`child@2026-11-28T00:00Z~after`), so parents ending at the same moment collide on one claim.
A parent that ends failed, timed out, aborted, cancelled or skipped makes the child's instance
for that date `skipped` with reason `upstream_failed: <parent> <status>`.

`dependents_due` takes `DependencyPorts` (tasks, instances); the others `InstancePorts`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, date, datetime, time
from typing import Protocol, runtime_checkable

from iotsched.core.decisions import Firing
from iotsched.core.instance_record import (
    InstanceRecord,
    InstanceStatus,
    TriggerKind,
    incarnation_of,
)
from iotsched.core.task_record import TaskRecord
from iotsched.core.task_triggers import AfterTrigger
from iotsched.services.port_sets import (
    InstancePorts,
    TaskPorts,
)

log = logging.getLogger(__name__)
SUFFIX = "after"


@runtime_checkable
class DependencyPorts(InstancePorts, TaskPorts, Protocol):
    """What deciding a task's dependents reads: the tasks and the instances."""


def dependents_due(
    ended: InstanceRecord, services: DependencyPorts
) -> Iterator[tuple[TaskRecord, Firing]]:
    """The dependents of `ended`'s task due for its business date, each with its firing (a
    skip if a parent did not succeed). Lazily: each child is decided when its turn comes, after
    the caller fired the ones before it (whose end may have fired it already)."""
    for child_id in services.tasks.children_of(ended.task_id):
        child = services.tasks.get_task(child_id)
        if child is None or not child.definition.enabled or child.paused:
            continue
        trigger = child.definition.trigger
        if not isinstance(trigger, AfterTrigger) or ended.task_id not in trigger.after:
            continue  # a stale edge: the child no longer depends on this task
        firing = decide_child(child, ended.business_date, services)
        if firing is not None:
            yield child, firing


def decide_child(child: TaskRecord, day: date, services: DependencyPorts) -> Firing | None:
    """`child`'s firing for `day` once every parent has ended; None while one runs. A parent's
    instances are its current incarnation's: one of a task that held its id before (of
    another tenant, perhaps) never fires or skips the child."""
    trigger = child.definition.trigger
    assert isinstance(trigger, AfterTrigger)
    outcomes: dict[str, InstanceStatus] = {}
    for parent in trigger.after:
        stored = services.tasks.get_task(parent)
        since = stored.incarnation if stored is not None else 1
        instance = latest_for_date(parent, day, services, incarnation=since)
        if instance is None or not instance.status.final:
            return None  # the last parent to end fires the child
        outcomes[parent] = instance.status
    failed = [(p, s) for p, s in outcomes.items() if s is not InstanceStatus.SUCCEEDED]
    return Firing(
        slot=datetime.combine(day, time(0), tzinfo=UTC),
        kind=TriggerKind.DEPENDENCY,
        status=InstanceStatus.SKIPPED if failed else InstanceStatus.PLANNING,
        reason=f"upstream_failed: {failed[0][0]} {failed[0][1].value}" if failed else None,
        suffix=SUFFIX,
        business_date=day,
    )


def latest_for_date(
    task_id: str, day: date, services: InstancePorts, *, incarnation: int = 1
) -> InstanceRecord | None:
    """The task's most recent instance for business date `day` (reruns included) of its
    incarnation `incarnation`, however old: a backfill of a date long past finds its
    parent's instance by key."""
    found = [
        i
        for i in services.instances.instances_for_date(task_id, day)
        if incarnation_of(i.instance_id) == incarnation
    ]
    return max(found, key=lambda i: i.created_at, default=None)
