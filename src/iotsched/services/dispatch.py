"""The tick: find due tasks, claim each (task, slot), plan shards, send shard messages.

The tick's event time, floored to the minute, is "now". Two deliveries of the same tick compute
the same due slots and collide on the same instance keys: exactly one claims each slot.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from iotsched.core.decisions import (
    Firing,
    business_date_for,
    data_interval_for,
    data_interval_for_date,
    plan_firing,
)
from iotsched.core.model import BlockingPolicy, GroupsSharding, TaskDefinition
from iotsched.core.records import (
    MAX_LISTED_COVERS,
    Alert,
    InstanceRecord,
    InstanceStatus,
    ShardMessage,
    TaskRecord,
    instance_id_for,
)
from iotsched.core.sharding import PlanningError, ShardPlan, plan_shards
from iotsched.core.timeutil import floor_minute
from iotsched.ports import ClaimOutcome, DeviceDirectory, DirectoryError, MessageTooLargeError
from iotsched.services import Services
from iotsched.services.alerts import alert_for

log = logging.getLogger(__name__)


@dataclass
class TickReport:
    """What one tick did; logged and turned into metrics by the dispatcher Lambda."""

    now: datetime
    due_tasks: int = 0
    claimed: list[str] = field(default_factory=list)
    duplicate_claims: int = 0
    resumed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    queued: list[str] = field(default_factory=list)
    covered: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    messages_sent: int = 0
    send_requests: int = 0

    def as_dict(self) -> dict[str, object]:
        """JSON-able summary."""
        return {
            "now": self.now.isoformat(),
            "due_tasks": self.due_tasks,
            "claimed": self.claimed,
            "duplicate_claims": self.duplicate_claims,
            "resumed": self.resumed,
            "skipped": self.skipped,
            "queued": self.queued,
            "covered": self.covered,
            "failed": self.failed,
            "messages_sent": self.messages_sent,
            "send_requests": self.send_requests,
        }


def dispatch_tick(event_time: datetime, services: Services) -> TickReport:
    """Run one tick at `event_time` (floored to the minute)."""
    now = floor_minute(event_time)
    report = TickReport(now=now)
    for task in services.tasks.due_tasks(now):
        report.due_tasks += 1
        plan = plan_firing(
            task.definition, next_fire=task.next_fire, last_slot=task.last_slot, now=now
        )
        settled = [_fire(task, firing, services, report) for firing in plan.firings]
        # Advancing after the claims keeps a crash resumable: the task stays due, the next
        # delivery computes the same slots, collides on the claims and resumes them. For the
        # same reason the clock stays put while another dispatcher's send is unconfirmed.
        if not all(settled):
            continue
        advanced = services.tasks.advance_task(
            task.task_id,
            expected_next_fire=task.next_fire,
            next_fire=plan.next_fire,
            last_slot=plan.last_slot,
        )
        dropped = [f for f in plan.firings if f.reason == "catch_up_limit"]
        if advanced and dropped:  # only the dispatcher that moved the clock alerts: once
            services.alerts.publish(_catch_up_alert(task, dropped))
    for submission in services.instances.due_submissions(now):
        # A submitted one-time instance whose time has come: scheduled -> planning, then sent.
        if services.instances.set_instance_status(
            submission.instance_id,
            expected=InstanceStatus.SCHEDULED,
            status=InstanceStatus.PLANNING,
        ):
            started = submission.model_copy(update={"status": InstanceStatus.PLANNING})
            _start(started, services, report)
    return report


def _catch_up_alert(task: TaskRecord, dropped: list[Firing]) -> Alert:
    """One alert for the missed slots a catch-up left out (recorded skipped)."""
    count = sum(1 + len(f.covers) for f in dropped)
    first = instance_id_for(task.task_id, dropped[0].slot)
    return Alert(
        type="catch_up_dropped",
        severity=task.definition.alerts.severity,
        task_id=task.task_id,
        tenant=task.definition.tenant,
        instance_id=first,
        status=InstanceStatus.SKIPPED.value,
        reason=(
            f"{count} missed slot(s) beyond max_catch_up={task.definition.misfire.max_catch_up} "
            f"recorded skipped, from {dropped[0].slot.isoformat()}"
        ),
        alert_id=f"{first}#catch_up_dropped",
    )


def groups_for(
    definition: TaskDefinition, directory: DeviceDirectory | None
) -> list[dict[str, Any]] | None:
    """For `sharding: groups`, the groups' bounds as the Device Management System lists them
    now (the sharding's tenant, else the task's, else every tenant's); None for other shardings.

    Raises:
        PlanningError: no directory is configured, or it could not answer.
    """
    sharding = definition.sharding
    if not isinstance(sharding, GroupsSharding):
        return None
    if directory is None:
        raise PlanningError(
            "sharding 'groups' needs a device directory (IOTSCHED_DEVICE_TABLE or IOTSCHED_DMS_URL)"
        )
    try:
        groups = directory.groups(sharding.tenant or definition.tenant)
    except DirectoryError as exc:
        raise PlanningError(f"the device directory did not answer: {exc}") from exc
    return [g.bounds() for g in groups]


def build_instance(
    task: TaskRecord,
    firing: Firing,
    *,
    claimed_at: datetime,
    dispatch_lease_s: int,
    directory: DeviceDirectory | None = None,
) -> InstanceRecord:
    """The instance a firing claims, with its shard plan computed now and stored with it.

    A `groups` plan reads the groups from `directory` here, at fire time, and stores their
    bounds (tenant, group, id range) with the instance: reruns reuse them as they were.
    """
    definition = task.definition
    status = firing.status
    reason = firing.reason
    try:
        plan = plan_shards(definition.sharding, groups_for(definition, directory))
    except PlanningError as exc:
        plan = ShardPlan(strategy=definition.sharding.strategy, count=1)
        status, reason = InstanceStatus.FAILED, f"planning_failed: {exc}"
    open_ = status in (InstanceStatus.PLANNING, InstanceStatus.SCHEDULED)
    zone = definition.timezone
    if firing.business_date is not None:
        business_date = firing.business_date
        start, end = data_interval_for_date(business_date, zone)
    else:
        business_date = business_date_for(definition.business_date, firing.slot, zone)
        start, end = data_interval_for(definition.business_date, firing.slot, zone)
    suffix = f"~{firing.suffix}" if firing.suffix else ""
    return InstanceRecord(
        instance_id=instance_id_for(definition.id, firing.slot) + suffix,
        task_id=definition.id,
        tenant=definition.tenant,
        slot=firing.slot,
        trigger_kind=firing.kind,
        covers=firing.covers[:MAX_LISTED_COVERS],
        covers_count=len(firing.covers),
        business_date=business_date,
        data_interval_start=start,
        data_interval_end=end,
        status=status,
        reason=reason,
        plan=plan,
        remaining=plan.count if open_ else 0,
        task_version=task.version,
        handler=definition.handler,
        params={**definition.params, **(firing.params or {})},
        timeout_s=definition.timeout_s,
        max_attempts=definition.retry.max_attempts,
        backoff_s=definition.retry.backoff_s,
        severity=definition.alerts.severity,
        exclusive=definition.blocking.policy is not BlockingPolicy.PARALLEL,
        reduce=definition.reduce,
        created_at=claimed_at,
        finished_at=None if open_ else claimed_at,
        deadline=(firing.fire_at or claimed_at) + timedelta(seconds=definition.instance_timeout_s),
        dispatch_lease_until=(
            claimed_at + timedelta(seconds=dispatch_lease_s)
            if status is InstanceStatus.PLANNING
            else None
        ),
        fire_at=firing.fire_at,
    )


def _fire(task: TaskRecord, firing: Firing, services: Services, report: TickReport) -> bool:
    """Claim one firing (or resume it); False while it waits on another dispatcher's send."""
    claimed_at = services.clock.now()
    instance = build_instance(
        task,
        firing,
        claimed_at=claimed_at,
        dispatch_lease_s=services.tuning.dispatch_lease_s,
        directory=services.directory,
    )
    if instance.exclusive and instance.status is InstanceStatus.PLANNING:
        return _fire_exclusive(task, instance, services, report)
    existing = services.instances.claim_instance(instance)
    if existing is None:
        if instance.status is InstanceStatus.PLANNING:
            _start(instance, services, report)
        elif instance.status is InstanceStatus.SKIPPED:
            report.skipped.append(instance.instance_id)
            _after_end(instance, services)
        else:
            report.failed.append(instance.instance_id)
            services.alerts.publish(alert_for(instance, []))
            _after_end(instance, services)
        return True
    return _duplicate(existing, services, report, claimed_at)


def fire_one(task: TaskRecord, firing: Firing, services: Services) -> TickReport:
    """Claim one firing outside the tick (manual runs, backfills), through the blocking policy."""
    report = TickReport(now=services.clock.now())
    _fire(task, firing, services, report)
    return report


def _start(instance: InstanceRecord, services: Services, report: TickReport) -> None:
    report.claimed.append(instance.instance_id)
    services.faults.after_claim(instance.instance_id)
    send_shards(instance, services, report)


def _duplicate(
    existing: InstanceRecord | None, services: Services, report: TickReport, now: datetime
) -> bool:
    report.duplicate_claims += 1
    if existing is None or existing.status is not InstanceStatus.PLANNING:
        return True
    # The claimer died (or is slow) between claim and send: resume once its dispatch lease ends.
    if services.instances.take_dispatch(
        existing.instance_id,
        now=now,
        until=now + timedelta(seconds=services.tuning.dispatch_lease_s),
    ):
        report.resumed.append(existing.instance_id)
        send_shards(existing, services, report)
        return True
    return False


def _fire_exclusive(
    task: TaskRecord, instance: InstanceRecord, services: Services, report: TickReport
) -> bool:
    """Claim under a non-parallel blocking policy: the claim and the task's hold are atomic.

    discard: blocked firings are recorded skipped, naming the holder. serial: they queue,
    at most `max_queued`; overflow is recorded skipped and alerted. cover: the holder is
    cancelled and the new instance takes its place.
    """
    blocking = task.definition.blocking
    now = instance.created_at
    for _ in range(5):  # a hold released or moved between two reads: decide again
        claim = services.blocking.claim_exclusive(instance)
        if claim.outcome is ClaimOutcome.CLAIMED:
            _start(instance, services, report)
            return True
        if claim.outcome is ClaimOutcome.DUPLICATE:
            return _duplicate(claim.existing, services, report, now)
        holder = claim.holder or "?"
        if blocking.policy is BlockingPolicy.DISCARD:
            _record_skipped(instance, f"blocked by {holder}", services, report)
            return True
        if blocking.policy is BlockingPolicy.SERIAL:
            waiting = instance.model_copy(
                update={"status": InstanceStatus.QUEUED, "dispatch_lease_until": None}
            )
            queued = services.blocking.enqueue_instance(waiting, max_queued=blocking.max_queued)
            if queued.outcome is ClaimOutcome.CLAIMED:
                report.queued.append(instance.instance_id)
                return True
            if queued.outcome is ClaimOutcome.DUPLICATE:
                return _duplicate(queued.existing, services, report, now)
            if queued.outcome is ClaimOutcome.FULL:
                reason = f"queue_full: {blocking.max_queued} already wait behind {holder}"
                if _record_skipped(instance, reason, services, report):
                    services.alerts.publish(
                        alert_for(
                            instance.model_copy(
                                update={"status": InstanceStatus.SKIPPED, "reason": reason}
                            ),
                            [],
                            alert_type="queue_overflow",
                        )
                    )
                return True
            continue  # FREE: the holder ended meanwhile
        # COVER: ask the holder to stop (it ends cancelled), then take its place.
        services.instances.end_instance(
            holder,
            status=InstanceStatus.CANCELLED,
            reason=f"covered by {instance.instance_id}",
            finished_at=now,
        )
        taken = services.blocking.take_over(instance, holder=holder)
        if taken.outcome is ClaimOutcome.CLAIMED:
            report.covered.append(holder)
            _start(instance, services, report)
            return True
        if taken.outcome is ClaimOutcome.DUPLICATE:
            return _duplicate(taken.existing, services, report, now)
    return False  # still contended: the task stays due and the next tick decides


def _record_skipped(
    instance: InstanceRecord, reason: str, services: Services, report: TickReport
) -> bool:
    skipped = instance.model_copy(
        update={
            "status": InstanceStatus.SKIPPED,
            "reason": reason,
            "remaining": 0,
            "finished_at": instance.created_at,
            "dispatch_lease_until": None,
        }
    )
    if services.instances.claim_instance(skipped) is None:
        report.skipped.append(instance.instance_id)
        _after_end(skipped, services)
        return True
    report.duplicate_claims += 1
    return False


def _after_end(instance: InstanceRecord, services: Services) -> None:
    from iotsched.services.completion import after_end  # (a cycle otherwise)

    after_end(instance, services)


def shard_messages(instance: InstanceRecord) -> list[ShardMessage]:
    """One message per shard, built from the plan stored with the instance."""
    return [
        ShardMessage(
            instance_id=instance.instance_id,
            task_id=instance.task_id,
            tenant=instance.tenant,
            shard=index,
            bounds=bounds,
            handler=instance.handler,
            params=instance.params,
            business_date=instance.business_date,
            data_interval_start=instance.data_interval_start,
            data_interval_end=instance.data_interval_end,
            timeout_s=instance.timeout_s,
            max_attempts=instance.max_attempts,
            backoff_s=instance.backoff_s,
        )
        for index, bounds in enumerate(instance.plan.all_bounds())
        if instance.only is None or index in instance.only
    ]


def reduce_message(instance: InstanceRecord) -> ShardMessage:
    """The reduce's message: the instance's reduce handler, as shard number `plan.count`."""
    assert instance.reduce is not None
    return ShardMessage(
        instance_id=instance.instance_id,
        task_id=instance.task_id,
        tenant=instance.tenant,
        shard=instance.plan.count,
        bounds={"reduce": instance.reduce},
        handler=instance.reduce,
        params=instance.params,
        business_date=instance.business_date,
        data_interval_start=instance.data_interval_start,
        data_interval_end=instance.data_interval_end,
        timeout_s=instance.timeout_s,
        max_attempts=instance.max_attempts,
        backoff_s=instance.backoff_s,
        reduce=True,
    )


def send_shards(instance: InstanceRecord, services: Services, report: TickReport) -> None:
    """Send every shard message, then mark the instance running.

    Re-sending after a crash is safe: a duplicate message finds its shard leased or finished.
    """
    messages = shard_messages(instance)
    try:
        report.send_requests += services.queue.send(messages)
    except MessageTooLargeError as exc:
        # Permanent: no retry can send it. End the instance (remaining shards never ran).
        ended_at = services.clock.now()
        if services.instances.set_instance_status(
            instance.instance_id,
            expected=InstanceStatus.PLANNING,
            status=InstanceStatus.FAILED,
            reason=f"enqueue_failed: {exc}",
            finished_at=ended_at,
        ):
            report.failed.append(instance.instance_id)
            failed = instance.model_copy(
                update={"status": InstanceStatus.FAILED, "reason": f"enqueue_failed: {exc}"}
            )
            services.alerts.publish(alert_for(failed, []))
            _after_end(failed, services)
        return
    report.messages_sent += len(messages)
    services.instances.set_instance_status(
        instance.instance_id, expected=InstanceStatus.PLANNING, status=InstanceStatus.RUNNING
    )
