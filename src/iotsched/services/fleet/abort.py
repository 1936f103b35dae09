"""Aborting an instance whose failed share reached its abort criteria (`abort`): fence its
shard starts, then end it `aborted` with its follow-ups.

The order is the guarantee. `close_starts` first: once it returns, no `take_start` of the
instance answers STARTED, so a worker that read the instance open just before the decision and
asks the gate just after does not start its shard. The end second: one conditional write
(`end_instance`, on the instance being open) that records the follow-ups (the
`instance_aborted` alert, the task's pause for `action: pause` or `pause_on_failure`, the hold,
the dependents), which `after_end` does and strikes off. A death between the two leaves the
fence closed and the instance open: the next completion or the sweeper (its open instances,
whose counts it reads anyway) decides again and ends it; closing twice is harmless. Exactly one
caller's end lands, so the instance alerts once however many workers decide together.

Running handlers see `ctx.cancelled()` (the instance is final) and their attempts end
`cancelled`; messages of shards never started find the instance ended (or the gate closed) and
start nothing. Their counter stays above zero, as a cancelled instance's does: nothing finalizes
an ended instance again, and the sweeper looks at open instances only.

It takes `LifecyclePorts`: the end goes on to the lifecycle's follow-ups.
"""

from __future__ import annotations

from iotsched.core.abort import AbortFigures
from iotsched.core.records import InstanceRecord, InstanceStatus
from iotsched.services.port_sets import LifecyclePorts
from iotsched.services.scheduling.lifecycle import end_early


def abort_instance(
    instance: InstanceRecord, figures: AbortFigures, services: LifecyclePorts
) -> bool:
    """Fence the starts of `instance` and end it `aborted` for `figures`; True if this call
    ended it (and did its follow-ups), False if it had ended already."""
    reason = figures.reason()
    instance_id = instance.instance_id
    if instance.remaining > 0:  # shards left that could start; with none, there is no race
        services.instances.close_starts(instance_id, reason)
        services.faults.at("starts_closed", instance_id)
    ended = end_early(instance, services, status=InstanceStatus.ABORTED, reason=reason, alert=True)
    return ended is not None
