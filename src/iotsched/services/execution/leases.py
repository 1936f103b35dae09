"""Leases a delivery did not take: one its worker left expired is ended (`end_exhausted`, the
sweeper's too), a young one that may not be in the lease index yet is put there.

`left_lease` and `end_exhausted` take `LifecyclePorts` (an ended shard may end its instance);
`index_young_lease` takes `LeaseIndexPorts`.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Protocol, runtime_checkable

from iotsched.core.instance_record import InstanceRecord
from iotsched.core.shard_message import ShardMessage
from iotsched.core.shard_record import (
    ShardRecord,
    ShardStatus,
)
from iotsched.core.task_policies import DEFAULT_RETENTION_DAYS
from iotsched.ports.shards import StaleAttemptError
from iotsched.services.execution.completion import after_shards_ended
from iotsched.services.execution.outcomes import ShardOutcome
from iotsched.services.port_sets import (
    InstancePorts,
    LifecyclePorts,
)
from iotsched.services.wiring import Tuning

#: The error of a shard ended because its last attempt's lease expired with its worker gone.
LEASE_EXPIRED = "lease expired with no attempts left"


@runtime_checkable
class LeaseIndexPorts(InstancePorts, Protocol):
    """Indexing a young lease: the instance store and the shard lease's length."""

    @property
    def tuning(self) -> Tuning: ...


def left_lease(
    message: ShardMessage, instance: InstanceRecord, services: LifecyclePorts
) -> ShardOutcome:
    """The instance ended before this delivery: nothing starts. A lease that a dead worker left
    on the shard may not be in the lease index (it died before its first renewal, and this is
    its message, back), where the sweeper would end it: an expired one ends `cancelled` here,
    as the sweeper ends it, a live one is indexed for the sweeper. One read per message of an
    ended instance."""
    shard = services.instances.get_shard(message.instance_id, message.shard)
    if shard is None or shard.status is not ShardStatus.RUNNING or shard.lease_until is None:
        return ShardOutcome.NOT_STARTED
    now = services.clock.now()
    if shard.lease_until > now:
        index_young_lease(shard, services)
        return ShardOutcome.NOT_STARTED
    ended = end_exhausted(
        shard,
        services,
        now,
        status=ShardStatus.CANCELLED,
        error="instance ended",
        retention_days=instance.retention_days,
    )
    return ShardOutcome.NOT_STARTED if ended is ShardOutcome.DUPLICATE else ended


def index_young_lease(shard: ShardRecord, services: LeaseIndexPorts) -> None:
    """A delivery found a live lease that may not be in the lease index yet: put it there.

    An attempt's lease enters the index with its first renewal, a third of a lease after the
    take (a shard that ends sooner never writes the index). Until then only its message
    covers a worker's death: held on a one-lease visibility, it comes back within a lease,
    perhaps before the dead attempt's lease has ended, and this delivery is then the last
    one. So a delivery that finds a lease whose end is still the take's (never moved, hence
    perhaps not indexed) moves that end to itself, fenced on the attempt and the end read:
    the lease is then in the index, and if its worker is gone, the sweeper sends a fresh
    message once it expires. A renewal since the read means the lease is indexed already.
    """
    attempt = shard.attempts[-1] if shard.attempts else None
    if attempt is None or shard.lease_until is None:
        return
    if shard.lease_until > attempt.started_at + timedelta(seconds=services.tuning.shard_lease_s):
        return  # moved past the take's end: renewed, so in the index
    try:
        services.instances.extend_lease(
            shard.instance_id,
            shard.index,
            attempt=shard.attempt,
            until=shard.lease_until,
            was=shard.lease_until,
        )
    except StaleAttemptError:
        return  # renewed, ended or taken over since the read: nothing left to cover
    # Anything else raises: the message must not be acknowledged (it comes back, held, within
    # a lease, and is decided again).


def end_exhausted(
    shard: ShardRecord,
    services: LifecyclePorts,
    now: datetime,
    *,
    status: ShardStatus = ShardStatus.TIMED_OUT,
    error: str = LEASE_EXPIRED,
    retention_days: int | None = None,
    instance: InstanceRecord | None = None,
) -> ShardOutcome:
    """End a shard whose lease expired with its worker gone, fenced on that last attempt.

    timed_out when no attempt is left (a later delivery of its message, or the sweeper);
    cancelled when its instance has ended meanwhile (the sweeper). The record expires after
    its instance's retention (`retention_days`, read from the instance when not given). The
    instance (`instance`, as read by the caller, or read here for its retention) decides its
    abort criteria on the counts this write returns.
    """
    ended = shard.attempts[-1].lost(now)  # the shard ends `status`; its attempt was lost
    if retention_days is None:
        if instance is None:
            instance = services.instances.get_instance(shard.instance_id)
        retention_days = instance.retention_days if instance else DEFAULT_RETENTION_DAYS
    try:
        result = services.instances.complete_shard(
            shard.instance_id,
            shard.index,
            status=status,
            attempt=ended,
            error=error,
            expires_at=now + timedelta(days=retention_days),
        )
    except StaleAttemptError:
        return ShardOutcome.DUPLICATE
    after_shards_ended(shard.instance_id, services, instance=instance, counts=result)
    return ShardOutcome(status.value)
