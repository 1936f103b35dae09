"""Instances an operator asks for: run now, submit for later, backfill a range of dates.

Each goes through the same claim (and the task's blocking policy) as the tick, so a manual run
racing the schedule, or a backfill overlapping it, never doubles a slot.

Planning and binding take small sets (`TaskPorts`, `CheckPorts`, `SubmitPorts`,
`BackfillPlanPorts`); running fires through the lifecycle (`LifecyclePorts`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any, Protocol, runtime_checkable

from iotsched.core.audit import Verb
from iotsched.core.decisions import Firing, SlotDates, slots_for_business_dates
from iotsched.core.instance_record import (
    InstanceRecord,
    InstanceStatus,
    TriggerKind,
    incarnation_key,
    incarnation_mark,
    instance_id_for,
)
from iotsched.core.payload_limits import (
    instance_problem,
    largest_instance_message,
    message_problem,
    params_problem,
)
from iotsched.core.sharding import PlanningError, plan_shards
from iotsched.core.task_definition import Priority
from iotsched.core.task_record import TaskRecord
from iotsched.core.tenant_scope import run_params_problem
from iotsched.core.timeutil import floor_minute, parse_slot, require_aware
from iotsched.core.value_types import business_date_problem
from iotsched.ports.devices import DeviceDirectory
from iotsched.services.definitions.control import TaskNotFoundError
from iotsched.services.notices.audit import (
    UNNAMED,
    audited,
)
from iotsched.services.port_sets import (
    BuildPorts,
    InstancePorts,
    LifecyclePorts,
    RecordClockPorts,
    TaskPorts,
)
from iotsched.services.scheduling.build import (
    build_instance,
    groups_for,
)
from iotsched.services.scheduling.lifecycle import (
    fire_built,
    fire_one,
)
from iotsched.services.scheduling.report import TickReport

REQUEST_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
SUBMIT_WINDOW_PAST = timedelta(days=1)
SUBMIT_WINDOW_AHEAD = timedelta(days=366)


class ManualRunError(ValueError):
    """The request cannot be served as asked (bad range, no slots, unplannable task)."""


@runtime_checkable
class CheckPorts(BuildPorts, InstancePorts, Protocol):
    """Building a requested instance and binding it to its request id."""


@runtime_checkable
class SubmitPorts(CheckPorts, TaskPorts, RecordClockPorts, Protocol):
    """Submitting an instance to be dispatched: its task, built and bound, claimed."""


@runtime_checkable
class BackfillPlanPorts(TaskPorts, Protocol):
    """Planning a backfill: the task and the device directory its shard plan reads."""

    @property
    def directory(self) -> DeviceDirectory | None: ...


def _task(task_id: str, services: TaskPorts) -> TaskRecord:
    task = services.tasks.get_task(task_id)
    if task is None:
        raise TaskNotFoundError(task_id)
    return task


def _bound(
    services: InstancePorts, task: TaskRecord, request_id: str | None, kind: str, slot: datetime
) -> tuple[datetime, str]:
    """The slot and key suffix of a request's instance: bound to its client request id once,
    so a retry (even minutes later) finds the same instance. Request ids are the task
    incarnation's own: one the task that held the id before used binds nothing here."""
    if request_id is None:
        return slot, ""
    mark = incarnation_mark(task.incarnation)
    proposed = _instance_id(task, slot, _suffix(kind, request_id))
    key = f"{incarnation_key(task.task_id, task.incarnation)}#{request_id}"
    bound = services.instances.record_request(key, proposed)
    slot_text, _, suffix = bound.rpartition("@")[2].partition("~")
    return parse_slot(slot_text), suffix.removeprefix(f"{mark[1:]}~") if mark else suffix


def _suffix(kind: str, request_id: str | None) -> str:
    if request_id is None:
        return ""
    if not REQUEST_ID.fullmatch(request_id):
        raise ManualRunError(f"request id {request_id!r}: use 1-64 of A-Z a-z 0-9 . _ -")
    return f"{kind}-{request_id}"


def _build(task: TaskRecord, firing: Firing, services: BuildPorts) -> InstanceRecord:
    """The instance `firing` claims, refused as bad input (naming the limit) if it would not
    fit its item or its shard messages the queue, if its params name another tenant than the
    task's, or if its business date is out of range: params and dates are the caller's."""
    problem = run_params_problem(task.definition, firing.params)
    if problem is None and firing.business_date is not None:
        problem = business_date_problem(firing.business_date)
    if problem is not None:
        raise ManualRunError(problem)
    instance = build_instance(
        task,
        firing,
        claimed_at=services.clock.now(),
        dispatch_lease_s=services.tuning.dispatch_lease_s,
        directory=services.directory,
    )
    problem = (
        params_problem(instance.params)
        or instance_problem(instance)
        or message_problem(largest_instance_message(instance))
    )
    if problem is not None:
        raise ManualRunError(problem)
    return instance


def _checked(
    task: TaskRecord, firing: Firing, services: CheckPorts, request_id: str | None, kind: str
) -> InstanceRecord:
    """The checked instance of a request, under the slot and suffix its request id is bound
    to; checked before the binding is recorded, so a refused request records nothing."""
    firing = firing.model_copy(update={"suffix": _suffix(kind, request_id) or firing.suffix})
    instance = _build(task, firing, services)
    slot, suffix = _bound(services, task, request_id, kind, firing.slot)
    if request_id is None or (slot, suffix) == (firing.slot, firing.suffix):
        return instance
    fire_at = slot if firing.fire_at is not None else None  # a retry of an earlier request
    again = firing.model_copy(update={"slot": slot, "suffix": suffix, "fire_at": fire_at})
    return _build(task, again, services)


def run_now(
    task_id: str,
    services: LifecyclePorts,
    *,
    business_date: date | None = None,
    params: dict[str, Any] | None = None,
    request_id: str | None = None,
    priority: Priority | None = None,
    actor: str = UNNAMED,
) -> tuple[InstanceRecord, TickReport]:
    """A manual instance for the current minute (trigger kind `manual`).

    Without a request id it takes the current slot's key, so it collides with (and never
    doubles) a scheduled firing of the same minute. With one, it is a separate instance, and
    running it again with the same request id returns the first instance. Params that would
    not fit the instance's item or its shard messages are refused (ManualRunError).
    """
    task = _task(task_id, services)
    firing = Firing(
        slot=floor_minute(services.clock.now()),
        kind=TriggerKind.MANUAL,
        status=InstanceStatus.PLANNING,
        business_date=business_date,
        params=params,
        priority=priority,
    )
    instance = _checked(task, firing, services, request_id, "manual")
    with audited(
        Verb.RUN,
        task_id,
        services,
        actor=actor,
        tenant=task.definition.tenant,
        instance_ids=[instance.instance_id],
        version=task.version,
        diff=_params_diff(params),
    ):
        report = fire_built(task, instance, services)
    stored = services.instances.get_instance(instance.instance_id)
    assert stored is not None
    return stored, report


def submit(
    task_id: str,
    services: SubmitPorts,
    *,
    at: datetime,
    business_date: date | None = None,
    params: dict[str, Any] | None = None,
    request_id: str | None = None,
    priority: Priority | None = None,
    actor: str = UNNAMED,
) -> InstanceRecord:
    """A one-time instance that the tick fires once `at` has come (stored, status scheduled;
    trigger kind `submitted`). Params that would not fit are refused as by `run_now`."""
    task = _task(task_id, services)
    at = floor_minute(require_aware(at))
    now = services.clock.now()
    if not now - SUBMIT_WINDOW_PAST <= at <= now + SUBMIT_WINDOW_AHEAD:
        raise ManualRunError(
            f"a submission is due between a day ago and 366 days ahead, not at {at.isoformat()}"
        )
    firing = Firing(
        slot=at,
        kind=TriggerKind.SUBMITTED,
        status=InstanceStatus.SCHEDULED,
        suffix=f"submit-{now:%Y%m%d%H%M%S%f}",
        business_date=business_date,
        params=params,
        fire_at=at,
        priority=priority,
    )
    instance = _checked(task, firing, services, request_id, "submit")
    if instance.status is not InstanceStatus.SCHEDULED:
        raise ManualRunError(instance.reason or "the task cannot be planned")
    with audited(
        Verb.SUBMIT,
        task_id,
        services,
        actor=actor,
        tenant=task.definition.tenant,
        instance_ids=[instance.instance_id],
        version=task.version,
        diff=_params_diff(params),
    ) as change:
        change.detail = f"at {at.isoformat()}"
        existing = services.instances.claim_instance(instance)
    return existing or instance


def _params_diff(params: dict[str, Any] | None) -> dict[str, list[Any]]:
    """A run's own params, as the difference from the task's (none: the task's)."""
    return {"params": [None, params]} if params else {}


def _instance_id(task: TaskRecord, slot: datetime, suffix: str) -> str:
    return instance_id_for(task.task_id, slot, task.incarnation) + (f"~{suffix}" if suffix else "")


@dataclass(frozen=True)
class BackfillPlan:
    """What a backfill would do: its slots (each with the business date and data interval its
    instance works on), their shards, and the AWS requests to expect."""

    task_id: str
    slots: list[SlotDates]
    shards_per_instance: int
    estimated_requests: dict[str, int]


# Requests per shard execution by service (lease + completion transaction + record read, one
# message receive/delete share of a batch of 10) and per instance (claim, status writes).
_PER_SHARD = {"dynamodb": 4, "sqs": 1}
_PER_INSTANCE = {"dynamodb": 3, "sqs": 0}


def plan_backfill(
    task_id: str, services: BackfillPlanPorts, *, start: date, end: date
) -> BackfillPlan:
    """The task's slots whose business date lies in [start, end], both inclusive.

    Operators backfill the data of given days: with `business_date: previous_day`, the daily
    00:05 slot of 12-01 works on 11-30, so the range 11-30..12-02 selects the slots of 12-01 to
    12-03 (local dates). Every slot of an hourly or rate task whose business date is in the
    range is selected.
    """
    if end < start:
        raise ManualRunError(f"--to {end} is before --from {start}")
    if problem := business_date_problem(start) or business_date_problem(end):
        raise ManualRunError(problem)
    if (end - start).days + 1 > 366:  # both ends are business dates of the backfill
        raise ManualRunError("a backfill covers at most 366 days")
    task = _task(task_id, services)
    slots = slots_for_business_dates(task.definition, start, end)
    if not slots:
        raise ManualRunError(f"task {task_id!r} has no slot for business dates {start} to {end}")
    try:
        shards = plan_shards(
            task.definition.sharding, groups_for(task.definition, services.directory)
        ).count
    except PlanningError as exc:
        raise ManualRunError(str(exc)) from None
    estimate = {
        service: len(slots) * (_PER_INSTANCE[service] + shards * _PER_SHARD[service])
        for service in _PER_SHARD
    }
    estimate["sqs"] += len(slots) * -(-shards // 10)  # SendMessageBatch of 10
    return BackfillPlan(task_id, slots, shards, estimate)


def backfill_slots(
    plan: BackfillPlan,
    services: LifecyclePorts,
    *,
    priority: Priority = Priority.LOW,
    actor: str = UNNAMED,
) -> Iterator[tuple[str, str]]:
    """Claim each slot of the plan (trigger kind backfill), oldest first; yields each slot's
    instance id (`<task>@<slot>`, marked with a task created again's incarnation) and what
    happened.

    Its instances run at `priority`, low unless asked otherwise: a backfill's backlog never
    holds up another task's scheduled work (docs/design.md, section 12).

    A slot that already has an instance (scheduled earlier, or an earlier backfill) is not
    doubled: it is reported `exists`. The caller paces the claims (max concurrent instances).
    One audit record covers the backfill: `pending` before the first claim, settled with the
    instances claimed once the caller stops (at the end, or earlier).
    """
    task = _task(plan.task_id, services)
    first, last = plan.slots[0].business_date, plan.slots[-1].business_date
    with audited(
        Verb.BACKFILL,
        plan.task_id,
        services,
        actor=actor,
        tenant=task.definition.tenant,
        version=task.version,
    ) as change:
        change.detail = f"business dates {first} to {last}, {len(plan.slots)} slot(s)"
        try:
            for slot, outcome in _claim_slots(plan, task, services, priority):
                instance_id = _instance_id(task, slot, "")
                if outcome in ("claimed", "queued"):
                    change.instance_ids.append(instance_id)
                yield instance_id, outcome
        except GeneratorExit:  # the caller stopped early: what it claimed is the change
            change.detail += f", stopped after {len(change.instance_ids)} claimed"


def _claim_slots(
    plan: BackfillPlan, task: TaskRecord, services: LifecyclePorts, priority: Priority
) -> Iterator[tuple[datetime, str]]:
    for dates in plan.slots:
        slot = dates.slot
        report = fire_one(
            task,
            Firing(
                slot=slot,
                kind=TriggerKind.BACKFILL,
                status=InstanceStatus.PLANNING,
                priority=priority,
            ),
            services,
        )
        if report.claimed:
            yield slot, "claimed"
        elif report.queued:
            yield slot, "queued"
        elif report.skipped:
            yield slot, "skipped"
        elif report.failed:
            yield slot, "failed"
        else:
            yield slot, "exists"
