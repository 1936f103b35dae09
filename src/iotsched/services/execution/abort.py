"""Abort an instance whose failed share reached its abort criteria (`abort_instance`): fence its
shard starts, then end it `aborted` with its follow-ups.

The order is the guarantee: once `close_starts` returns, no shard of the instance starts, and
exactly one caller's end lands, so the instance alerts once however many workers decide
together. A death between the two leaves the fence closed and the instance open: the next
completion or the sweeper decides again; closing twice is harmless (docs/design.md, section 11).

It takes `LifecyclePorts`: the end goes on to the lifecycle's follow-ups.
"""

from __future__ import annotations

from iotsched.core.abort import AbortFigures
from iotsched.core.instance_record import (
    InstanceRecord,
    InstanceStatus,
)
from iotsched.services.port_sets import LifecyclePorts
from iotsched.services.scheduling.lifecycle import end_early


def abort_instance(
    instance: InstanceRecord, figures: AbortFigures, services: LifecyclePorts
) -> bool:
    """Fence the starts of `instance` and end it `aborted` for `figures`; True if this call
    ended it (and did its follow-ups), False if it had ended already."""
    # end_early closes the instance's starts before its end (the fence of `rollout.fenced`, which
    # an abort criterion makes): a death between the two leaves the fence closed.
    ended = end_early(
        instance, services, status=InstanceStatus.ABORTED, reason=figures.reason(), alert=True
    )
    return ended is not None
