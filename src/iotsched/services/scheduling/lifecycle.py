"""An instance's life once built: fired (claimed, started), sent, ended, followed up.

One module because these steps call one another: an end owes follow-ups, and a follow-up fires
or starts other instances (a dependent, a serial task's next queued one), which may end at once
in turn. The tick and the completion call it; it calls down to `send`, `build` and `fan_in`.

The verbs: `fire` (a claim through the task's blocking policy; a duplicate claim resumes),
`start`, `send_shards`, `resume_dispatch` (a stalled send whose dispatch lease ended),
`after_end` and `settle_followups` (what an ended instance owes), `release_hold` (a serial
task's hold passed on) and `trigger_dependents` (fan-in). The write that ends an instance
records its follow-ups and each follow-up is idempotent and struck off once done, so a death
anywhere between the end and the last follow-up loses none (docs/design.md, section 5).

Every verb takes `LifecyclePorts`: the verbs call one another, so each may reach every port
but the alert log, the handlers and the renewals.
"""

from __future__ import annotations

import logging
import traceback
from contextlib import AbstractContextManager
from datetime import datetime, timedelta

from iotsched.core.decisions import Firing, decide_follow_ups
from iotsched.core.instance_record import (
    FOLLOW_UP_ORDER,
    FollowUp,
    InstanceRecord,
    InstanceStatus,
)
from iotsched.core.messages import send_order
from iotsched.core.task_policies import BlockingPolicy
from iotsched.core.task_record import TaskRecord
from iotsched.ports.blocking import ClaimOutcome
from iotsched.ports.messaging import MessageTooLargeError
from iotsched.ports.tracing import Span
from iotsched.services.fleet import rollout
from iotsched.services.fleet.pausing import pause_after_end
from iotsched.services.notices.alert_policy import publish_instance_alert
from iotsched.services.port_sets import (
    LifecyclePorts,
    SendPorts,
)
from iotsched.services.scheduling.build import instance_for
from iotsched.services.scheduling.fan_in import dependents_due
from iotsched.services.scheduling.report import TickReport
from iotsched.services.scheduling.send import send_messages
from iotsched.services.tenancy import pacing
from iotsched.services.tenancy.slots import admit_instance

log = logging.getLogger(__name__)


# -- fire and start --------------------------------------------------------------------------


def fire(
    task: TaskRecord, instance: InstanceRecord, services: LifecyclePorts, report: TickReport
) -> bool:
    """Claim `instance` through the task's blocking policy and start it (or resume it, if
    another claimer's send stalled); False while it waits on another dispatcher's send."""
    if instance.exclusive and instance.status is InstanceStatus.PLANNING:
        return _fire_exclusive(task, instance, services, report)
    existing = services.instances.claim_instance(instance)
    if existing is None:
        if instance.status is InstanceStatus.PLANNING:
            start(instance, services, report)
        else:
            end_at_claim(instance, services, report)
        return True
    return _resume_duplicate(existing, services, report, instance.created_at)


def end_at_claim(instance: InstanceRecord, services: LifecyclePorts, report: TickReport) -> None:
    """After the claim of an instance that ends as it is claimed: skipped, or failed to plan."""
    if instance.status is InstanceStatus.SKIPPED:
        report.skipped.append(instance.instance_id)
    else:
        report.failed.append(instance.instance_id)  # its alert is an owed follow-up
    after_end(instance, services)


def fire_one(task: TaskRecord, firing: Firing, services: LifecyclePorts) -> TickReport:
    """Claim one firing outside the tick (manual runs, backfills), through the blocking policy."""
    report = TickReport(now=services.clock.now())
    fire(task, instance_for(task, firing, services), services, report)
    return report


def fire_built(task: TaskRecord, instance: InstanceRecord, services: LifecyclePorts) -> TickReport:
    """`fire_one` for an instance already built (`build_instance`), e.g. checked before."""
    report = TickReport(now=services.clock.now())
    fire(task, instance, services, report)
    return report


def start(instance: InstanceRecord, services: LifecyclePorts, report: TickReport) -> None:
    """Start a `planning` instance its caller just claimed: count it claimed, send it."""
    with claim_span(instance, services):
        report.claimed.append(instance.instance_id)
        services.faults.after_claim(instance.instance_id)
        send_shards(instance, services, report)


def claim_span(instance: InstanceRecord, services: SendPorts) -> AbstractContextManager[Span]:
    """The span of an instance its caller claimed, around the sending of its shard messages,
    which carry it (so each shard's attempt is its child: docs/design.md, section 16)."""
    return services.tracer.span(
        "claim",
        task_id=instance.task_id,
        instance_id=instance.instance_id,
        shards=len(send_order(instance)),
    )


def _resume_duplicate(
    existing: InstanceRecord | None, services: LifecyclePorts, report: TickReport, now: datetime
) -> bool:
    """The claim found the instance written already: count it, and resume its send if its
    claimer stalled; False while that claimer still holds the dispatch lease."""
    report.duplicate_claims += 1
    if existing is None or existing.status is not InstanceStatus.PLANNING:
        return True
    # The claimer died (or is slow) between claim and send: resume once its dispatch lease ends.
    if resume_dispatch(existing.instance_id, services, report, now):
        report.resumed.append(existing.instance_id)
        return True
    return False


def _fire_exclusive(
    task: TaskRecord, instance: InstanceRecord, services: LifecyclePorts, report: TickReport
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
            start(instance, services, report)
            return True
        if claim.outcome is ClaimOutcome.DUPLICATE:
            return _resume_duplicate(claim.existing, services, report, now)
        holder = claim.holder or "?"
        if _settle_holder(claim.holder, services):
            continue  # the holder had ended and its release was owed: decide again
        if blocking.policy is BlockingPolicy.DISCARD:
            _skip(instance, f"blocked by {holder}", services, report)
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
                return _resume_duplicate(queued.existing, services, report, now)
            if queued.outcome is ClaimOutcome.FULL:
                reason = f"queue_full: {blocking.max_queued} already wait behind {holder}"
                # its `queue_overflow` alert is an owed follow-up of the skipped record
                _skip(instance, reason, services, report, alert=True)
                return True
            continue  # FREE: the holder ended meanwhile
        # COVER: ask the holder to stop (it ends cancelled), then take its place. Its fence is
        # closed first, whatever its policies (not read here): one write per cover.
        covered = f"covered by {instance.instance_id}"
        services.instances.close_starts(holder, covered)
        services.instances.end_instance(
            holder,
            status=InstanceStatus.CANCELLED,
            reason=covered,
            finished_at=now,
            owed=decide_follow_ups(instance, alert=False),  # as its own: same task, exclusive
        )
        taken = services.blocking.take_over(instance, holder=holder)
        if taken.outcome is ClaimOutcome.CLAIMED:
            report.covered.append(holder)
            start(instance, services, report)
            _settle_holder(holder, services)  # its dependents (its release: a no-op)
            return True
        if taken.outcome is ClaimOutcome.DUPLICATE:
            return _resume_duplicate(taken.existing, services, report, now)
    return False  # still contended: the task stays due and the next tick decides


def _settle_holder(holder: str | None, services: LifecyclePorts) -> bool:
    """Do the follow-ups of a holder that ended but still owes them (its ender died before
    releasing the task), and hand its tenant's line over (a cover ends it without); True if it
    did any follow-up, so that the caller decides its claim again."""
    if holder is None:
        return False
    ended = services.instances.get_instance(holder)
    if ended is None or not ended.status.final:
        return False
    if pacing.in_line(ended):  # its ender did not hand its tenant's line over: a cover did
        hand_over(ended, services)
    if not ended.owed:
        return False
    return bool(settle_followups(ended, services))


def _skip(
    instance: InstanceRecord,
    reason: str,
    services: LifecyclePorts,
    report: TickReport,
    *,
    alert: bool = False,
) -> bool:
    """Claim `instance` as `skipped` for `reason` (blocked by the task's hold), then what
    follows its end; False if the claim found it written already."""
    skipped = instance.model_copy(
        update={
            "status": InstanceStatus.SKIPPED,
            "reason": reason,
            "remaining": 0,
            "finished_at": instance.created_at,
            "dispatch_lease_until": None,
        }
    )
    skipped = skipped.model_copy(
        update={"owed": decide_follow_ups(skipped, alert=alert, holds=False)}
    )
    if services.instances.claim_instance(skipped) is None:
        report.skipped.append(instance.instance_id)
        after_end(skipped, services)
        return True
    report.duplicate_claims += 1
    return False


# -- send and resume -------------------------------------------------------------------------


def send_shards(
    instance: InstanceRecord,
    services: LifecyclePorts,
    report: TickReport,
    *,
    budget_s: float | None = None,
) -> None:
    """Send the instance's shard messages from its cursor on, then mark it running
    (`iotsched.services.scheduling.send.send_messages`); a message too large for the queue ends the
    instance failed, and what follows its end is done. A paced instance whose window closed
    after it began sending (`window.on_close: cancel`) ends `cancelled` instead."""
    if rollout.paced(instance) and rollout.send_allowance(instance, services.clock.now()).cancel:
        end_window_closed(instance, services)
        return
    # A capped instance behind another in its tenant's line sends nothing yet, and takes no
    # seat of its tenant's instances per minute before its turn.
    behind = pacing.in_line(instance) and not pacing.my_turn(instance, services)
    if instance.tenant_rate is not None and instance.sent == 0 and not behind:
        # The tenant's `max_instances_per_minute`: counted before the first message; over it,
        # the instance waits (recorded) for a later minute.
        admitted = admit_instance(instance, services)
        if admitted is None:
            return
        instance = admitted
    try:
        send_messages(instance, services, report, budget_s=budget_s, behind=behind)
    except MessageTooLargeError as exc:
        _end_unsendable(instance, exc, services, report)


def hand_over(instance: InstanceRecord, services: LifecyclePorts) -> None:
    """`instance` ended: it gives its place in its tenant's line up
    (`tenancy.pacing.leave_line`), and the next in line sends now, not at the next sweep."""
    next_in_line = pacing.leave_line(instance, services)
    if next_in_line is not None:
        refill(next_in_line, services)


def _end_unsendable(
    instance: InstanceRecord,
    exc: MessageTooLargeError,
    services: LifecyclePorts,
    report: TickReport,
) -> None:
    """Permanent: no retry can send it. End the instance (remaining shards never run)."""
    ended_at = services.clock.now()
    owed = decide_follow_ups(instance, alert=True, ending=InstanceStatus.FAILED)
    if services.instances.set_instance_status(
        instance.instance_id,
        expected=InstanceStatus.PLANNING,
        status=InstanceStatus.FAILED,
        reason=f"enqueue_failed: {exc}",
        finished_at=ended_at,
        owed=owed,
    ):
        report.failed.append(instance.instance_id)
        failed = instance.model_copy(
            update={
                "status": InstanceStatus.FAILED,
                "reason": f"enqueue_failed: {exc}",
                "finished_at": ended_at,
                "owed": owed,
            }
        )
        after_end(failed, services)


def end_early(
    instance: InstanceRecord,
    services: LifecyclePorts,
    *,
    status: InstanceStatus,
    reason: str,
    alert: bool,
) -> InstanceRecord | None:
    """End an open instance before its shards did (an abort, a cancel, a window's close):
    `status` for `reason`, in one write that records its follow-ups; then what follows its
    end. Returns the ended instance, or None if it had ended already (nothing done).

    A fenced instance's starts are closed first (`rollout.close_fence`): no shard of it starts
    once its end is decided, whatever a worker's start was doing meanwhile."""
    rollout.close_fence(instance, services, reason)
    finished_at = services.clock.now()
    owed = decide_follow_ups(instance, alert=alert, ending=status)
    if not services.instances.end_instance(
        instance.instance_id, status=status, reason=reason, finished_at=finished_at, owed=owed
    ):
        return None
    ended = instance.model_copy(
        update={"status": status, "reason": reason, "finished_at": finished_at, "owed": owed}
    )
    after_end(ended, services)
    return ended


def end_window_closed(
    instance: InstanceRecord, services: LifecyclePorts, *, reason: str | None = None
) -> bool:
    """End an open instance whose maintenance window closed before its shards started
    (`window.on_close: cancel`): `cancelled`, reason `window_closed` (or `reason`, which names
    the device group whose own window closed); False if it had ended already."""
    why = reason or WINDOW_CLOSED
    ended = end_early(instance, services, status=InstanceStatus.CANCELLED, reason=why, alert=False)
    return ended is not None


#: The reason of an instance its window's close cancelled.
WINDOW_CLOSED = "window_closed"


def resume_dispatch(
    instance_id: str, services: LifecyclePorts, report: TickReport, now: datetime
) -> bool:
    """Take over a stalled dispatch (its lease ended: its dispatcher died, or paused at its
    budget) and send on from the instance's cursor; False if another dispatcher holds it.

    The cursor is read again after the lease is taken, strongly consistent: the record the
    caller found (an index's copy, a claim's answer) may predate the last step.
    """
    until = now + timedelta(seconds=services.tuning.dispatch_lease_s)
    if not services.instances.take_dispatch(instance_id, now=now, until=until):
        return False
    current = services.instances.get_instance(instance_id)
    if current is not None and current.status is InstanceStatus.PLANNING:
        send_shards(current, services, report)
    return True


def refill(instance_id: str, services: LifecyclePorts) -> bool:
    """Resume a capped instance's paced send now (`tenancy.pacing`: its window ran low, or its
    turn in its tenant's line came); False if another dispatch holds it. A failure is logged,
    never raised: the sweeper resumes the instance within a minute."""
    now = services.clock.now()
    try:
        return resume_dispatch(instance_id, services, TickReport(now=now), now)
    except Exception:
        log.warning(
            "capped send not refilled: the sweeper resumes it",
            extra={"instance_id": instance_id},
            exc_info=True,
        )
        return False


# -- end and follow-ups ----------------------------------------------------------------------


def after_end(instance: InstanceRecord, services: LifecyclePorts) -> None:
    """What follows an instance's end: the follow-ups its ending write recorded as owed.

    Called once per end, by the caller whose write ended it: the end is counted here.
    """
    services.ends.record(instance.status)
    services.faults.at("ended", instance.instance_id)
    if pacing.in_line(instance):
        hand_over(instance, services)  # the next of its tenant's line sends now
    settle_followups(instance, services)


def settle_followups(instance: InstanceRecord, services: LifecyclePorts) -> list[FollowUp]:
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


def _follow_up(step: FollowUp, instance: InstanceRecord, services: LifecyclePorts) -> None:
    if step is FollowUp.ALERT:
        publish_instance_alert(instance, services)
    elif step is FollowUp.PAUSE:
        pause_after_end(instance, services)
    elif step is FollowUp.RELEASE:
        release_hold(instance.task_id, instance.instance_id, services)
    else:
        trigger_dependents(instance, services)


def release_hold(task_id: str, instance_id: str, services: LifecyclePorts) -> str | None:
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
            send_shards(started, services, TickReport(now=services.clock.now()))
            return following
        current = services.instances.get_instance(following)
        if current is not None and not current.status.final:
            return None  # another caller started it: it holds the task now
        following = services.blocking.release_task(task_id, following)
    return None


def trigger_dependents(ended: InstanceRecord, services: LifecyclePorts) -> list[TickReport]:
    """Fire (or skip) the dependents of `ended`'s task for its business date, where due."""
    return [fire_one(child, firing, services) for child, firing in dependents_due(ended, services)]
