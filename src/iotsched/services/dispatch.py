"""The tick: find due tasks, claim each (task, slot), plan shards, send shard messages.

The tick's event time, floored to the minute, is "now". Two deliveries of the same tick compute
the same due slots and collide on the same instance keys: exactly one claims each slot.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from iotsched.core.decisions import (
    Firing,
    business_date_for,
    data_interval_for,
    plan_firing,
)
from iotsched.core.records import (
    MAX_LISTED_COVERS,
    InstanceRecord,
    InstanceStatus,
    ShardMessage,
    TaskRecord,
    instance_id_for,
)
from iotsched.core.sharding import PlanningError, ShardPlan, plan_shards
from iotsched.core.timeutil import floor_minute
from iotsched.ports import MessageTooLargeError
from iotsched.services import Services
from iotsched.services.completion import alert_for

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
        services.tasks.advance_task(
            task.task_id,
            expected_next_fire=task.next_fire,
            next_fire=plan.next_fire,
            last_slot=plan.last_slot,
        )
    return report


def build_instance(
    task: TaskRecord, firing: Firing, *, claimed_at: datetime, dispatch_lease_s: int
) -> InstanceRecord:
    """The instance a firing claims, with its shard plan computed now and stored with it."""
    definition = task.definition
    status = firing.status
    reason = firing.reason
    try:
        plan = plan_shards(definition.sharding)
    except PlanningError as exc:
        plan = ShardPlan(strategy=definition.sharding.strategy, count=1)
        status, reason = InstanceStatus.FAILED, f"planning_failed: {exc}"
    open_ = status is InstanceStatus.PLANNING
    zone = definition.timezone
    start, end = data_interval_for(definition.business_date, firing.slot, zone)
    return InstanceRecord(
        instance_id=instance_id_for(definition.id, firing.slot),
        task_id=definition.id,
        tenant=definition.tenant,
        slot=firing.slot,
        trigger_kind=firing.kind,
        covers=firing.covers[:MAX_LISTED_COVERS],
        covers_count=len(firing.covers),
        business_date=business_date_for(definition.business_date, firing.slot, zone),
        data_interval_start=start,
        data_interval_end=end,
        status=status,
        reason=reason,
        plan=plan,
        remaining=plan.count if open_ else 0,
        task_version=task.version,
        handler=definition.handler,
        params=definition.params,
        timeout_s=definition.timeout_s,
        max_attempts=definition.retry.max_attempts,
        backoff_s=definition.retry.backoff_s,
        severity=definition.alerts.severity,
        created_at=claimed_at,
        finished_at=None if open_ else claimed_at,
        deadline=claimed_at + timedelta(seconds=definition.instance_timeout_s),
        dispatch_lease_until=claimed_at + timedelta(seconds=dispatch_lease_s) if open_ else None,
    )


def _fire(task: TaskRecord, firing: Firing, services: Services, report: TickReport) -> bool:
    """Claim one firing (or resume it); False while it waits on another dispatcher's send."""
    claimed_at = services.clock.now()
    instance = build_instance(
        task, firing, claimed_at=claimed_at, dispatch_lease_s=services.tuning.dispatch_lease_s
    )
    existing = services.instances.claim_instance(instance)
    if existing is None:
        if instance.status is InstanceStatus.PLANNING:
            report.claimed.append(instance.instance_id)
            services.faults.after_claim(instance.instance_id)
            send_shards(instance, services, report)
        elif instance.status is InstanceStatus.SKIPPED:
            report.skipped.append(instance.instance_id)
        else:
            report.failed.append(instance.instance_id)
            services.alerts.publish(alert_for(instance, []))
        return True
    report.duplicate_claims += 1
    if existing.status is not InstanceStatus.PLANNING:
        return True
    # The claimer died (or is slow) between claim and send: resume once its dispatch lease ends.
    if services.instances.take_dispatch(
        existing.instance_id,
        now=claimed_at,
        until=claimed_at + timedelta(seconds=services.tuning.dispatch_lease_s),
    ):
        report.resumed.append(existing.instance_id)
        send_shards(existing, services, report)
        return True
    return False


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
    ]


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
        return
    report.messages_sent += len(messages)
    services.instances.set_instance_status(
        instance.instance_id, expected=InstanceStatus.PLANNING, status=InstanceStatus.RUNNING
    )
