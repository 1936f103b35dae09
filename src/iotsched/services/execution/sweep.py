"""The sweeper: end what nobody else will end, so that no instance stays open forever.

Run every minute by its own EventBridge rule. Each step is idempotent and races safely with
workers and dispatchers, because every write it makes is the same conditional write they make.

It takes `SweepPorts`: the lifecycle's (it ends, resumes and follows up) and the alert log;
nearly the whole bag, named so that the handlers and renewals stay out.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol, runtime_checkable

from iotsched.core.alertpolicy import MISSED_FLOOR_S
from iotsched.core.decisions import decide_follow_ups
from iotsched.core.instance_record import (
    InstanceRecord,
    InstanceStatus,
)
from iotsched.core.messages import message_of
from iotsched.core.shard_message import ShardMessage
from iotsched.core.shard_record import (
    ShardRecord,
    ShardStatus,
)
from iotsched.ports.messaging import AlertLog
from iotsched.ports.shards import StaleAttemptError
from iotsched.services.execution.completion import after_shards_ended
from iotsched.services.execution.leases import end_exhausted
from iotsched.services.fleet import rollout
from iotsched.services.notices.alert_policy import (
    alert_missed_run,
    overdue,
)
from iotsched.services.port_sets import LifecyclePorts
from iotsched.services.scheduling.lifecycle import (
    after_end,
    resume_dispatch,
    settle_followups,
)
from iotsched.services.scheduling.report import TickReport
from iotsched.services.scheduling.send import reduce_message

log = logging.getLogger(__name__)


@dataclass
class SweepReport:
    """What one sweep did."""

    now: datetime
    resumed: list[str] = field(default_factory=list)
    timed_out_instances: list[str] = field(default_factory=list)
    timed_out_shards: list[str] = field(default_factory=list)
    requeued_shards: list[str] = field(default_factory=list)
    cancelled_shards: list[str] = field(default_factory=list)
    finalized: list[str] = field(default_factory=list)  # ended at zero, or aborted
    followed_up: list[str] = field(default_factory=list)
    republished_alerts: list[str] = field(default_factory=list)
    missed_runs: list[str] = field(default_factory=list)  # `missed_run` alert ids raised

    def as_dict(self) -> dict[str, object]:
        """JSON-able summary."""
        return {
            "now": self.now.isoformat(),
            "resumed": self.resumed,
            "timed_out_instances": self.timed_out_instances,
            "timed_out_shards": self.timed_out_shards,
            "requeued_shards": self.requeued_shards,
            "cancelled_shards": self.cancelled_shards,
            "finalized": self.finalized,
            "followed_up": self.followed_up,
            "republished_alerts": self.republished_alerts,
            "missed_runs": self.missed_runs,
        }


@runtime_checkable
class SweepPorts(LifecyclePorts, Protocol):
    """The lifecycle's ports and the alert log the sweeper republishes from."""

    @property
    def alert_log(self) -> AlertLog: ...


def sweep(services: SweepPorts, *, requeue_after_s: int = 0) -> SweepReport:
    """One sweep at the clock's now.

    Expired leases are read from the lease index (every `LEASE#<k>` bucket, in the order of
    the lease ends' minutes, then of the ends of those read), which holds a lease from its attempt's first renewal on: a worker that died before
    it is covered by its held message instead (see `iotsched.services.execution.VisibilityHold`).

    1. Expired leases with no attempts left end `timed_out` (the worker died on its last try),
       one lease period after they expired (a late renewal still keeps them).
    2. Expired leases of instances that ended meanwhile end `cancelled`.
       Expired leases with attempts left get a fresh shard message as soon as they have been
       expired for `requeue_after_s` (0: at once): their worker stopped renewing them (it
       died or hung), and its message would reappear only after the queue's visibility
       timeout (30 minutes by default). The fresh message's worker takes the shard over as
       the next attempt. The lease's end moves to now, fenced on the attempt and on the end
       read, so one expiry gets one message however many sweeps overlap, and a shard taken
       over or renewed since the read is left alone; a later sweep that still finds it
       expired sends again (at most once per sweep: the template sweeps every minute, three
       default leases).
    3. Open instances past their deadline end `timed_out`; their unfinished shards never start.
    4. Instances stuck in `planning` after their dispatch lease are resumed, and so are
       instances in `reducing` whose reduce never started (its message lost).
    5. Open instances whose counter is zero are finalized (a worker died between its last
       shard's write and the finalize), and open ones whose abort criteria are met aborted.
    6. Ended instances whose follow-ups are still owed get them done, and alerts whose
       publish was never confirmed are published again (`_follow_up`).
    7. Tasks whose fire time passed by more than their grace with no dispatcher advancing it
       raise `missed_run`, once per task and fire time (`_missed_runs`).
    """
    now = services.clock.now()
    report = SweepReport(now=now)
    # Each item is swept alone: one that fails (a throttled write that ran out of retries, a
    # record that cannot be read) is logged and retried next minute, never aborting the others.
    for shard in services.instances.expired_leases(now):
        try:
            _sweep_lease(shard, services, report, now, requeue_after_s)
        except Exception:
            log.exception(
                "sweep of an expired lease failed",
                extra={"instance_id": shard.instance_id, "shard": shard.index},
            )
    tick = TickReport(now=now)
    for instance in services.instances.open_instances():
        try:
            _sweep_instance(instance, services, report, tick, now)
        except Exception:
            log.exception(
                "sweep of an open instance failed", extra={"instance_id": instance.instance_id}
            )
    _follow_up(services, now, report)
    _missed_runs(services, now, report)
    return report


def _sweep_lease(
    shard: ShardRecord,
    services: SweepPorts,
    report: SweepReport,
    now: datetime,
    requeue_after_s: int,
) -> None:
    name = f"{shard.instance_id}#{shard.index}"
    if shard.attempt >= shard.max_attempts:
        # No takeover can follow a last attempt: its end is final, so a worker that is alive but
        # late renewing (throttled, paused) gets one more lease period before it is given up.
        assert shard.lease_until is not None
        if now - shard.lease_until < timedelta(seconds=services.tuning.shard_lease_s):
            return
        end_exhausted(shard, services, now)
        report.timed_out_shards.append(name)
        return
    instance = services.instances.get_instance(shard.instance_id)
    if instance is None or instance.status.final:
        # Cancelled or timed out while its worker was gone: nobody else will end it.
        end_exhausted(shard, services, now, status=ShardStatus.CANCELLED, error="instance ended")
        report.cancelled_shards.append(name)
        return
    assert shard.lease_until is not None
    if now - shard.lease_until < timedelta(seconds=requeue_after_s):
        return
    message = message_for(instance, shard.index)
    if message is None:
        log.warning(
            "expired lease of a shard the instance has no message for", extra={"shard": name}
        )
        return
    # The lease's end moves to now (still expired: the fresh message's worker takes it
    # over), fenced on the attempt and on the end read: of sweeps that read the same expiry,
    # one sends; a shard taken over or renewed since the read is left alone. Dying between
    # this write and the send delays the message to the next sweep; it does not lose it.
    try:
        services.instances.extend_lease(
            shard.instance_id,
            shard.index,
            attempt=shard.attempt,
            until=now,
            was=shard.lease_until,
        )
    except StaleAttemptError:
        if not _moved_by_us(shard, services, now):
            return
    services.queue.send([message])
    report.requeued_shards.append(name)


def _moved_by_us(shard: ShardRecord, services: SweepPorts, now: datetime) -> bool:
    """After a refused move: did the move land anyway (its response lost, the retry refused
    because the end was no longer the one read)? Then the message is still owed."""
    current = services.instances.get_shard(shard.instance_id, shard.index)
    return (
        current is not None
        and current.status is ShardStatus.RUNNING
        and current.attempt == shard.attempt
        and current.lease_until is not None
        and abs(current.lease_until - now) < timedelta(milliseconds=1)  # stored in ms
    )


def message_for(instance: InstanceRecord, index: int) -> ShardMessage | None:
    """The message of shard `index` (the reduce's at `plan.count`), built alone: a rerun
    sends only the shards it re-runs."""
    return message_of(instance, index)


def _sweep_instance(
    instance: InstanceRecord,
    services: SweepPorts,
    report: SweepReport,
    tick: TickReport,
    now: datetime,
) -> None:
    if instance.deadline <= now:
        rollout.close_fence(instance, services, "instance_timeout")
        owed = decide_follow_ups(instance, alert=True, ending=InstanceStatus.TIMED_OUT)
        if services.instances.end_instance(
            instance.instance_id,
            status=InstanceStatus.TIMED_OUT,
            reason="instance_timeout",
            finished_at=now,
            owed=owed,
        ):
            report.timed_out_instances.append(instance.instance_id)
            ended = instance.model_copy(
                update={
                    "status": InstanceStatus.TIMED_OUT,
                    "reason": "instance_timeout",
                    "finished_at": now,
                    "owed": owed,
                }
            )
            after_end(ended, services)  # its alert, release and dependents
        return
    if instance.status is InstanceStatus.REDUCING and instance.remaining == 1:
        # (one record read: a large instance's shards are never listed here)
        started = services.instances.get_shard(instance.instance_id, instance.plan.count)
        if started is None and services.instances.take_dispatch(
            instance.instance_id,
            now=now,
            until=now + timedelta(seconds=services.tuning.dispatch_lease_s),
        ):
            services.queue.send([reduce_message(instance)])
            report.resumed.append(instance.instance_id)
        return
    # A dispatch lease the read shows live is left alone without a write: its take would be
    # refused (a write unit of the instance item each sweep, for as long as a paced instance
    # waits for its next minute or its window's opening).
    lease = instance.dispatch_lease_until
    if (
        instance.status is InstanceStatus.PLANNING
        and (lease is None or lease <= now)
        and resume_dispatch(instance.instance_id, services, tick, now)
    ):
        report.resumed.append(instance.instance_id)
        return
    # A drained counter is finalized (its last worker died before); an instance whose abort
    # criteria its counts meet is aborted (its decider died between the fence and the end).
    if after_shards_ended(instance.instance_id, services, instance=instance) is not None:
        report.finalized.append(instance.instance_id)


#: How long an ended instance's follow-ups, or an alert's publish, are left to their own caller
#: before the sweeper does them (they normally take milliseconds).
FOLLOW_UP_GRACE_S = 30


def _follow_up(services: SweepPorts, now: datetime, report: SweepReport) -> None:
    """6. Ended instances that still owe follow-ups (their ender died, or a step failed) have
    them done; alerts recorded but never confirmed published are published again."""
    grace = now - timedelta(seconds=FOLLOW_UP_GRACE_S)
    for instance in services.instances.owing_instances():
        if (instance.finished_at or instance.created_at) > grace:
            continue
        try:
            if settle_followups(instance, services):
                report.followed_up.append(instance.instance_id)
        except Exception:
            log.exception(
                "follow-ups of an ended instance failed",
                extra={"instance_id": instance.instance_id},
            )
    for alert in services.alert_log.unpublished(before=grace):
        try:
            services.alerts.publish(alert)
        except Exception:
            log.exception("republishing an alert failed", extra={"alert_id": alert.alert_id})
            continue
        report.republished_alerts.append(alert.alert_id)


def _missed_runs(services: SweepPorts, now: datetime, report: SweepReport) -> None:
    """7. Tasks still due well past their fire time: no dispatcher fired and advanced them.

    The due index holds exactly the enabled, unpaused tasks by fire time, and a dispatcher
    moves a task past `now` each time it fires it; so the entries older than the floor are the
    only candidates (one query per bucket, normally empty), each then held to its own grace.
    The alert id names the fire time: every sweep of one outage raises the same alert, and the
    dispatcher, once back, fires the slot by its misfire policy and moves the task on.
    """
    behind = now - timedelta(seconds=MISSED_FLOOR_S)
    for task in services.tasks.due_tasks(behind):
        if not overdue(task, now):
            continue
        try:
            report.missed_runs.append(alert_missed_run(task, services.alerts))
        except Exception:
            log.exception("a missed-run alert failed", extra={"task_id": task.task_id})
