"""A tenant's in-flight cap (`max_concurrent_shards`) at a shard's start.

An instance claimed for a tenant with the cap carries it (`InstanceRecord.tenant_cap`); its
shards start only holding one of the tenant's slots (`InstanceStore.take_tenant_slot`),
leased for as long as an attempt may run before its lease lapses, and freed when the attempt
ends. A worker that dies holding one frees it when the lease ends. A shard that finds every
slot held is deferred as a rate's is: a fresh copy of its message comes back a little later,
never counted toward the DLQ. An instance without the cap (every tenant without quotas)
reads and writes nothing here.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import timedelta

from iotsched.core.records import InstanceRecord, ShardMessage
from iotsched.services.needs import SendPorts
from iotsched.services.rollout import StartAction, StartDecision, spread_s

log = logging.getLogger(__name__)

#: How long a shard that found its tenant's slots full stays away, before its own spread
#: (up to as long again, so that deferred shards do not all come back in the same second).
SLOT_RETRY_S = 15
#: The quota's name, as the deferral and its alert name it.
QUOTA = "max_concurrent_shards"


@dataclass(frozen=True)
class HeldSlot:
    """A slot a shard holds while its attempt runs."""

    tenant: str
    slot: int
    holder: str


def capped(instance: InstanceRecord, message: ShardMessage) -> bool:
    """True if the shard must hold one of its tenant's slots to start (a reduce touches no
    device and never waits for one)."""
    return instance.tenant_cap is not None and not message.reduce


def take_slot(
    instance: InstanceRecord, message: ShardMessage, services: SendPorts
) -> HeldSlot | None:
    """One of the tenant's slots for this shard's attempt, or None if the tenant holds its cap.

    The slot's lease lasts as long as the attempt may run before its shard lease lapses
    (`timeout_s` and the lease margin): a dead worker's slot is free again by then."""
    assert instance.tenant_cap is not None
    tenant = instance.tenant or "-"
    holder = f"{message.instance_id}#{message.shard}#{uuid.uuid4().hex[:12]}"
    now = services.clock.now()
    until = now + timedelta(seconds=message.timeout_s + services.tuning.lease_margin_s)
    slot = services.instances.take_tenant_slot(
        tenant, holder, cap=instance.tenant_cap, now=now, until=until
    )
    return None if slot is None else HeldSlot(tenant, slot, holder)


def wait_for_slot(instance: InstanceRecord, message: ShardMessage) -> StartDecision:
    """The deferral of a shard whose tenant holds its cap."""
    delay = SLOT_RETRY_S + spread_s(message.instance_id, message.shard, SLOT_RETRY_S)
    return StartDecision(StartAction.WAIT, delay, QUOTA)


def release_slot(held: HeldSlot, services: SendPorts) -> None:
    """Free the slot at the attempt's end. A release that fails is left to the slot's lease
    (it ends by itself): the attempt's own outcome is not changed by it."""
    try:
        services.instances.release_tenant_slot(held.tenant, held.slot, held.holder)
    except Exception:
        log.warning(
            "tenant slot not released: freed when its lease ends",
            extra={"tenant": held.tenant, "slot": held.slot},
            exc_info=True,
        )
