"""One due task on its own: claim each of its firings (or resume it), then advance its clock.

This is the tick's small path, and the fallback of a page whose batched claim a task lost. A
task whose dispatch raises is recorded, alerted once per slot and left due, so it never holds
back the tick's other tasks. The clock moves only after every firing is claimed and settled,
so a crash leaves the task due and the next delivery collides on the same claims.

Its functions take `LifecyclePorts`: firing an instance reaches the whole lifecycle.
"""

from __future__ import annotations

import logging
from datetime import datetime
from itertools import islice

from iotsched.core.alert_message import (
    MAX_ALERT_SLOTS,
    Alert,
)
from iotsched.core.decisions import Firing, FiringPlan, business_date_for, plan_firing
from iotsched.core.instance_record import (
    InstanceRecord,
    InstanceStatus,
    instance_id_for,
)
from iotsched.core.task_record import TaskRecord
from iotsched.core.timeutil import slot_text
from iotsched.ports.store_errors import UnreadableRecordError
from iotsched.services.notices.alert_policy import publish_under
from iotsched.services.port_sets import LifecyclePorts
from iotsched.services.scheduling.build import instance_for
from iotsched.services.scheduling.lifecycle import fire
from iotsched.services.scheduling.report import TickReport

log = logging.getLogger(__name__)


def dispatch_task(
    task: TaskRecord,
    now: datetime,
    services: LifecyclePorts,
    report: TickReport,
    instances: list[InstanceRecord] | None = None,
    *,
    errors: list[Exception],
) -> None:
    """Claim `task`'s firings and advance its clock, isolated: a task whose dispatch raises (a
    claim DynamoDB refuses, a bug in its planning) is recorded, alerted once per slot and added
    to `errors` (raised once the whole tick ran), and never holds back the other tasks of the
    tick. It stays due: the next tick tries it again.

    `instances` are the firings' instances if the caller built them already (a page whose
    batched claim this task did not win), so that a `groups` plan reads the directory once.
    """
    try:
        _claim_and_advance(task, now, services, report, instances)
    except Exception as exc:
        log.exception("task dispatch failed", extra={"task": task.task_id})
        errors.append(exc)
        report.failed_tasks.append(task.task_id)
        try:
            publish_under(
                task.definition.alerts,
                _dispatch_failed_alert(task, exc),
                task.next_fire or services.clock.now(),
                services.alerts,
            )
        except Exception:
            log.exception("dispatch failure alert not published", extra={"task": task.task_id})


def unreadable_task_alert(
    record: UnreadableRecordError, now: datetime, services: LifecyclePorts
) -> None:
    """A due task whose stored record cannot be decoded is left out of the tick (the others
    fire): one `task_dispatch_failed` alert a day names it and says how to remove it."""
    task_id = record.key.split(" / ", 1)[0].removeprefix("TASK#")
    alert = Alert(
        type="task_dispatch_failed",
        severity="high",
        task_id=task_id,
        tenant=None,
        instance_id=task_id,
        status="not_dispatched",
        reason=(
            f"{record}: the task is not fired (the others are); apply it again or delete it "
            f"(`iotsched tasks delete {task_id} --force`)"
        )[:1000],
        alert_id=f"{task_id}#unreadable#{now.date().isoformat()}",
    )
    log.error("due task not fired: its record cannot be read", extra={"key": record.key})
    try:
        services.alerts.publish(alert)
    except Exception:
        log.exception("unreadable task alert not published", extra={"task": task_id})


def _dispatch_failed_alert(task: TaskRecord, exc: Exception) -> Alert:
    """One alert per task and slot (its clock does not move, so the next ticks find the same
    slot and the alert id deduplicates them)."""
    slot = task.next_fire or task.last_slot
    first = (
        instance_id_for(task.task_id, slot, task.incarnation) if slot is not None else task.task_id
    )
    return Alert(
        type="task_dispatch_failed",
        severity=task.definition.alerts.severity,
        retention_days=task.definition.retention.days,
        task_id=task.task_id,
        tenant=task.definition.tenant,
        instance_id=first,
        status="not_dispatched",
        reason=f"{type(exc).__name__}: {str(exc)[:500]} (the task stays due; other tasks go on)",
        alert_id=f"{first}#dispatch_failed",
    )


def _claim_and_advance(
    task: TaskRecord,
    now: datetime,
    services: LifecyclePorts,
    report: TickReport,
    instances: list[InstanceRecord] | None = None,
) -> None:
    """Claim each firing (or resume it), then advance the task's clock."""
    plan = plan_for(task, now)
    if instances is None:
        instances = [instance_for(task, firing, services) for firing in plan.firings]
    settled = [fire(task, instance, services, report) for instance in instances]
    # Advancing after the claims keeps a crash resumable: the task stays due, the next
    # delivery computes the same slots, collides on the claims and resumes them. For the
    # same reason the clock stays put while another dispatcher's send is unconfirmed.
    if not all(settled):
        return
    advanced = services.tasks.advance_task(
        task.task_id,
        expected_next_fire=task.next_fire,
        next_fire=plan.next_fire,
        last_slot=plan.last_slot,
        runs=plan.runs,
    )
    if advanced:
        alert_dropped(task, plan.firings, services)


def plan_for(task: TaskRecord, now: datetime) -> FiringPlan:
    """The task's firing plan at `now`, from its stored clock, run count and calendars."""
    return plan_firing(
        task.definition,
        next_fire=task.next_fire,
        last_slot=task.last_slot,
        now=now,
        calendars=task.calendars,
        runs=task.runs,
    )


def alert_dropped(task: TaskRecord, firings: list[Firing], services: LifecyclePorts) -> None:
    """Alert the slots a catch-up left out of `firings`; called by the caller whose advance of
    the task's clock landed."""
    dropped = [f for f in firings if f.reason == "catch_up_limit"]
    if dropped:  # only the dispatcher that moved the clock alerts: once
        publish_under(
            task.definition.alerts,
            _catch_up_alert(task, dropped),
            services.clock.now(),
            services.alerts,
        )


def _catch_up_alert(task: TaskRecord, dropped: list[Firing]) -> Alert:
    """One alert for the missed slots a catch-up left out (recorded skipped): the business
    date of the first, and the first MAX_ALERT_SLOTS of them with their business dates."""
    count = sum(1 + len(f.covers) for f in dropped)
    first = instance_id_for(task.task_id, dropped[0].slot, task.incarnation)
    rule, zone = task.definition.business_date, task.definition.timezone
    listed = islice((s for f in dropped for s in (f.slot, *f.covers)), MAX_ALERT_SLOTS)
    slots = [
        {"slot": slot_text(s), "business_date": business_date_for(rule, s, zone).isoformat()}
        for s in listed
    ]
    return Alert(
        type="catch_up_dropped",
        severity=task.definition.alerts.severity,
        retention_days=task.definition.retention.days,
        task_id=task.task_id,
        tenant=task.definition.tenant,
        instance_id=first,
        business_date=business_date_for(rule, dropped[0].slot, zone),
        slots=slots,
        status=InstanceStatus.SKIPPED.value,
        reason=(
            f"{count} missed slot(s) beyond max_catch_up={task.definition.misfire.max_catch_up} "
            f"recorded skipped, from {dropped[0].slot.isoformat()}"
        ),
        alert_id=f"{first}#catch_up_dropped",
    )
