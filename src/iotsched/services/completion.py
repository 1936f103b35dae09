"""How an instance ends: exactly one finalizer, and follow-ups that survive a death.

The write that makes an instance final also records what it still owes (`FollowUp`: publish
its alert, pass the task's hold on, fire its dependents). Whoever finds a follow-up owed does
it and strikes it off with its own conditional write: the ender right away, the next finalizer
or dispatcher that reads the instance, the sweeper (`owing_instances`) otherwise. Each step is
idempotent (the alert is deduplicated by id, only the holder can release, a dependent's
instance key is its business date), so doing one twice changes nothing, and a death anywhere
between the end and the last follow-up loses none of them:

    finalize_instance(status, owed={alert, release, dependents})   one conditional write
      ├─ publish alert ──► settle(alert)
      ├─ release hold  ──► settle(release)
      └─ dependents    ──► settle(dependents)     (the last one leaves the owing index)
"""

from __future__ import annotations

import logging
import traceback
from datetime import timedelta

from iotsched.core.decisions import decide_follow_ups, decide_instance_outcome
from iotsched.core.records import (
    FOLLOW_UP_ORDER,
    FollowUp,
    InstanceRecord,
    InstanceStatus,
)
from iotsched.services import Services
from iotsched.services.alerts import instance_alert

log = logging.getLogger(__name__)


def finalize(instance_id: str, services: Services) -> InstanceStatus | None:
    """End the instance if its remaining counter is zero; returns the status if this call did.

    Only the caller whose conditional write moves the instance out of planning/running records
    the follow-ups, so a failed instance alerts once however many workers race here. A caller
    that finds the instance final with follow-ups still owed (its finalizer died) does them.
    """
    instance = services.instances.get_instance(instance_id)
    if instance is None:
        return None
    if instance.status.final:
        if instance.owed:
            settle_followups(instance, services)
        return None
    if instance.remaining != 0:
        return None
    if (
        instance.reduce is not None
        and instance.failed_shards == 0
        and instance.status is not InstanceStatus.REDUCING
    ):
        # Every shard succeeded: exactly one caller moves the instance to `reducing` and sends
        # the reduce message (a crash after the move is resumed by the sweeper).
        now = services.clock.now()
        if not services.instances.start_reduce(
            instance_id, now=now, until=now + timedelta(seconds=services.tuning.dispatch_lease_s)
        ):
            return None
        from iotsched.services.dispatch import reduce_message  # a worker's cold start needs none

        services.queue.send([reduce_message(instance)])
        return InstanceStatus.REDUCING
    status = decide_instance_outcome(instance.failed_shards)
    owed = decide_follow_ups(instance, alert=status is not InstanceStatus.SUCCEEDED)
    finished_at = services.clock.now()
    if not services.instances.finalize_instance(
        instance_id, status=status, finished_at=finished_at, owed=owed
    ):
        return None
    ended = instance.model_copy(update={"status": status, "finished_at": finished_at, "owed": owed})
    after_end(ended, services)
    return status


def after_end(instance: InstanceRecord, services: Services) -> None:
    """What follows an instance's end: the follow-ups its ending write recorded as owed."""
    services.faults.at("ended", instance.instance_id)
    settle_followups(instance, services)


def settle_followups(instance: InstanceRecord, services: Services) -> list[FollowUp]:
    """Do each follow-up `instance` owes, striking each off once done; returns those done.

    A step that fails (e.g. the hold's release gives up on contention) keeps its mark and does
    not hold the others back: the sweeper does it later.
    """
    done: list[FollowUp] = []
    for step in FOLLOW_UP_ORDER:
        if step not in instance.owed:
            continue
        try:
            _follow_up(step, instance, services)
        except Exception:
            log.warning(
                "follow-up failed; the sweeper retries it",
                extra={
                    "instance": instance.instance_id,
                    "step": step.value,
                    "trace": traceback.format_exc(),
                },
            )
            continue
        services.faults.at(f"{step.value}_done", instance.instance_id)
        services.instances.settle_followup(instance.instance_id, step)
        services.faults.at(f"{step.value}_settled", instance.instance_id)
        done.append(step)
    return done


def _follow_up(step: FollowUp, instance: InstanceRecord, services: Services) -> None:
    if step is FollowUp.ALERT:
        shards = services.instances.list_shards(instance.instance_id)
        services.alerts.publish(instance_alert(instance, shards))
    elif step is FollowUp.RELEASE:
        release_hold(instance.task_id, instance.instance_id, services)
    else:
        from iotsched.services.dependencies import trigger_dependents  # (a cycle otherwise)

        trigger_dependents(instance, services)


def release_hold(task_id: str, instance_id: str, services: Services) -> str | None:
    """After `instance_id` ended: pass the task's hold to the oldest queued instance and start it.

    A queued instance that ended while waiting (cancelled, timed out) passes the hold on in
    turn. Returns the instance started, if any. Idempotent: only the holder can release, and
    a holder still `queued` (the hold was passed to it by a caller that died before starting
    it) is started by whoever comes next.
    """
    following = services.blocking.release_task(task_id, instance_id)
    if following is None:
        task = services.tasks.get_task(task_id)
        if task is not None and task.active is not None and task.active != instance_id:
            holder = services.instances.get_instance(task.active)
            if holder is not None and holder.status is InstanceStatus.QUEUED:
                following = holder.instance_id
            elif holder is not None and holder.status.final:
                # The hold was passed to a queued instance that had ended meanwhile, by a
                # caller that died before passing it on: it never runs, so it passes it on.
                following = services.blocking.release_task(task_id, holder.instance_id)
    while following is not None:
        if services.instances.set_instance_status(
            following, expected=InstanceStatus.QUEUED, status=InstanceStatus.PLANNING
        ):
            started = services.instances.get_instance(following)
            assert started is not None
            from iotsched.services.dispatch import TickReport, send_shards  # (as reduce_message)

            send_shards(started, services, TickReport(now=services.clock.now()))
            return following
        current = services.instances.get_instance(following)
        if current is not None and not current.status.final:
            return None  # another caller started it: it holds the task now
        following = services.blocking.release_task(task_id, following)
    return None
