"""Abort criteria and pausing on failure: when an instance's failed share stops it, and when an
instance's end pauses its task.

Pure: the figures come from the instance's counter as its caller read it (`remaining`,
`failed_shards`) and from the plan stored with it; the stores make the decision stick with
the gate's fence and one conditional end (`iotsched.services.execution.abort`).
"""

from __future__ import annotations

from dataclasses import dataclass

from iotsched.core.instance_record import InstanceRecord, InstanceStatus
from iotsched.core.task_fleet_safety import Abort

#: The ends that pause a task with `pause_on_failure`.
FAILED_ENDS = frozenset({InstanceStatus.FAILED, InstanceStatus.TIMED_OUT, InstanceStatus.ABORTED})
#: The statuses in which shards may still start, hence in which an instance may be aborted
#: (a `reducing` instance's shards all succeeded).
ABORTABLE = frozenset({InstanceStatus.PLANNING, InstanceStatus.RUNNING})


@dataclass(frozen=True)
class AbortFigures:
    """What the decision was made on: shards ended (`executed`) and failed among them."""

    executed: int
    failed: int
    abort: Abort

    @property
    def percent(self) -> float:
        """The failed share of the ended shards, in percent."""
        return 100.0 * self.failed / self.executed if self.executed else 0.0

    @property
    def met(self) -> bool:
        """True once at least `min_executed` shards ended and the failed share reached
        `failure_percent` (compared without rounding: 2 of 10 meets 20)."""
        return (
            self.executed >= self.abort.min_executed
            and self.failed * 100 >= self.abort.failure_percent * self.executed
        )

    def reason(self) -> str:
        """The instance's reason, with the figures: `3 of 10 ended shards failed (30%): at or
        above 20% after at least 10`."""
        return (
            f"{self.failed} of {self.executed} ended shards failed ({_pct(self.percent)}%): "
            f"at or above {_pct(self.abort.failure_percent)}% after at least "
            f"{self.abort.min_executed}"
        )


def _pct(value: float) -> str:
    """A percentage as people write it: `30`, `33.3`."""
    return f"{round(value, 1):g}"


def abort_figures(instance: InstanceRecord) -> AbortFigures | None:
    """The figures the abort decision reads, from the instance's counter as read with it; None
    for an instance without abort criteria.

    A shard ended is one whose final write the counter counts: `executed` is the shards the
    instance sends less `remaining`, `failed` its `failed_shards` (failed or timed out; a
    failure with attempts left is not an end and counts nothing yet; a cancel is not a
    failure), both less `unrun_shards` (dead-lettered before any handler ran).
    """
    if instance.abort is None:
        return None
    # the length of `core.messages.send_order` (not imported: the worker's cold start reads
    # this module, and the messages' builders only where an instance is sent)
    only = instance.only
    planned = (
        instance.plan.count if only is None else sum(0 <= i < instance.plan.count for i in only)
    )
    # Shards dead-lettered before any handler ran are neither: no device answered for them.
    unrun = instance.unrun_shards
    executed = max(0, planned - instance.remaining - unrun)
    failed = max(0, instance.failed_shards - unrun)
    return AbortFigures(executed=executed, failed=min(failed, executed), abort=instance.abort)


def decide_abort(instance: InstanceRecord) -> AbortFigures | None:
    """The figures that abort `instance` now, or None: no criteria, criteria not met, or the
    instance is past the point where shards start (ended, reducing, queued, scheduled)."""
    if instance.status not in ABORTABLE:
        return None
    figures = abort_figures(instance)
    return figures if figures is not None and figures.met else None


def owes_pause(instance: InstanceRecord, status: InstanceStatus) -> bool:
    """Whether `instance` ending `status` pauses its task: an abort with `action: pause`, or
    `pause_on_failure` and a failed, timed-out or aborted end (whatever the trigger kind:
    a manual run or a rerun that fails pauses the task as a scheduled one does)."""
    aborts_to_pause = instance.abort is not None and instance.abort.action == "pause"
    if status is InstanceStatus.ABORTED and aborts_to_pause:
        return True
    return instance.pause_on_failure and status in FAILED_ENDS


def pause_note(instance: InstanceRecord) -> str:
    """The note the scheduler pauses a task with, naming the instance and why it ended."""
    if instance.status is InstanceStatus.ABORTED:
        return f"aborted {instance.instance_id}: {instance.reason or 'abort criteria met'}"
    note = f"{instance.instance_id} ended {instance.status.value}"
    return f"{note}: {instance.reason}" if instance.reason else note
