"""The steps of a shard's start around its lease (`ShardStart`): the instance read, its window,
the tenant's slot, the rollout's seat, the lease, then the fence; and what a start that may not
go on does instead (a deferral, a give-back, an acknowledged duplicate).

Each step is taken only once the ones before it hold, so that a step refused costs none of the
ones after it (docs/design.md, section 11, the start path). A throttled step defers the shard:
nothing that never ran a handler is failed. It takes `AttemptPorts`' lifecycle half.
"""

from __future__ import annotations

import contextlib
import logging
from datetime import datetime, timedelta

from iotsched.core.decisions import LeaseVerdict, decide_lease
from iotsched.core.instance_record import InstanceRecord
from iotsched.core.shard_message import ShardMessage
from iotsched.core.shard_record import ShardRecord
from iotsched.core.timeutil import floor_minute
from iotsched.ports.shards import LeaseResult, StaleAttemptError
from iotsched.ports.store_errors import StoreContendedError
from iotsched.services.execution.leases import index_young_lease, left_lease
from iotsched.services.execution.outcomes import ShardOutcome
from iotsched.services.execution.reads import InstanceReads
from iotsched.services.fleet import rollout
from iotsched.services.fleet.rollout import StartAction, StartDecision
from iotsched.services.port_sets import LifecyclePorts
from iotsched.services.tenancy import slots as quotas

log = logging.getLogger(__name__)
#: Why an attempt whose lease was taken after its instance's starts closed did not run.
FENCED_OUT = "not started: the instance's starts closed before its handler began"
#: Why a start that met throttling (past the store's retries) waits; and for how long at least
#: (then up to as long again, spread by shard).
THROTTLED = "not started: throttled"
THROTTLED_RETRY_S = 5


class ShardStart:
    """The start steps of one worker invocation's messages (see the module docstring)."""

    def __init__(self, services: LifecyclePorts, *, worker: str, reads: InstanceReads) -> None:
        self._services = services
        self._worker = worker
        self._reads = reads
        # Instances whose fence this invocation found closed: their later messages here start
        # nothing, without a lease, a read and a give-back each.
        self._fenced: set[str] = set()

    def before_lease(
        self, message: ShardMessage, slot: list[quotas.HeldSlot]
    ) -> tuple[InstanceRecord, ShardMessage] | ShardOutcome:
        """The steps of a start before its lease, each taken only once the ones before it hold:
        the instance read, its window, the tenant's slot (appended to `slot` once taken), then
        the rate's seat (a start refused a slot takes none). The instance and the message
        (holding its seat, for a copy a later step may send) if the start goes on to its lease,
        else what became of the delivery."""
        services = self._services
        instance = self._reads.get(message.instance_id)
        if instance is None:
            return ShardOutcome.NOT_STARTED  # never claimed: nothing to start
        if instance.status.final:
            # Cancelled or timed out: the shard is not started, and a lease left on it ends.
            return left_lease(message, instance, services)
        if message.instance_id in self._fenced:
            return ShardOutcome.NOT_STARTED
        services.faults.at("start_read", message.instance_id)
        now = services.clock.now()
        waiting = rollout.window_decision(instance, message, now)
        if waiting is not None:
            return self.not_started(message, instance, waiting)
        seat = rollout.held_seat(message, floor_minute(now))
        if seat is not None and seat > floor_minute(now):
            # A copy early for its seat (a hop of a long wait): back later, no slot taken.
            return self.not_started(
                message, instance, rollout.seat_decision(instance, message, now, seat)
            )
        if quotas.capped(instance, message):
            held = quotas.take_slot(instance, message, services)
            if held is None:
                # A copy of a shard that runs (or ended) is acknowledged, not deferred: a
                # deferral would put a second live copy on the queue. One read, only here.
                if self._taken_elsewhere(message):
                    return ShardOutcome.DUPLICATE
                quotas.raise_quota_alert(
                    instance, services, quota=quotas.QUOTA, limit=instance.tenant_cap or 0
                )
                return self.not_started(message, instance, quotas.wait_for_slot(instance, message))
            slot.append(held)
            services.faults.at("start_slot", message.instance_id)
        if rollout.counted(instance, message):
            decision = rollout.count_start(instance, message, services)
            if decision.action is not StartAction.START:
                return self.not_started(message, instance, decision)
            message = message.model_copy(update={"seat": decision.seat})
            services.faults.at("start_counted", message.instance_id)
        return instance, message

    def throttled(self, message: ShardMessage, exc: StoreContendedError) -> ShardOutcome:
        """A start step was throttled (or contended) past the store's retries, before the
        handler ran: the shard waits, as a rate's wait, never counted toward the DLQ."""
        delay = THROTTLED_RETRY_S + rollout.spread_s(
            message.instance_id, message.shard, THROTTLED_RETRY_S
        )
        log.warning("shard start throttled: deferred", extra={"error": str(exc), "delay_s": delay})
        return self.not_started(message, None, StartDecision(StartAction.WAIT, delay, THROTTLED))

    def take_lease(self, message: ShardMessage, now: datetime, lease_s: float) -> LeaseResult:
        return self._services.instances.take_lease(
            message.instance_id,
            message.shard,
            bounds=message.bounds,
            worker=self._worker,
            now=now,
            lease_until=now + timedelta(seconds=lease_s),
            max_attempts=message.max_attempts,
            # The lease enters the index with its first renewal; until then the message's hold
            # (one `shard_lease_s`) covers a death. A lease shorter than that hold (a short
            # `timeout_s`) is indexed at once, so the sweeper takes it over when it ends.
            indexed=lease_s < self._services.tuning.shard_lease_s,
        )

    def fence(
        self, instance: InstanceRecord, message: ShardMessage, lease: LeaseResult
    ) -> ShardOutcome | None:
        """The start's last step, once its lease is taken: the fence, read strongly consistent
        for a fenced instance. None if the handler may run; else the lease was given back."""
        services = self._services
        services.faults.at("start_leased", message.instance_id)
        try:
            closed = self.closed(instance, message.shard)
        except StoreContendedError as exc:
            self.fenced_out(lease.shard, why=THROTTLED)
            return self.throttled(message, exc)
        if not closed:
            return None
        self._fenced.add(message.instance_id)
        return self.fenced_out(lease.shard, why=FENCED_OUT)

    def closed(self, instance: InstanceRecord, shard: int) -> bool:
        """Whether a fenced instance's starts are closed (a strongly consistent read of the
        fence its shard `shard` reads); False for an instance without a fence, unread.
        StoreContendedError if throttled."""
        return rollout.fenced(instance) and rollout.starts_closed(instance, shard, self._services)

    def _taken_elsewhere(self, message: ShardMessage) -> bool:
        """True if the shard is under another attempt's live lease, or ended: this delivery is
        a duplicate (a live lease not yet in the lease index is put there, as the lease path
        does for a duplicate)."""
        services = self._services
        shard = services.instances.get_shard(message.instance_id, message.shard)
        verdict = decide_lease(shard, now=services.clock.now(), max_attempts=message.max_attempts)
        if shard is not None and verdict is LeaseVerdict.BUSY:
            index_young_lease(shard, services)
        if verdict in (LeaseVerdict.BUSY, LeaseVerdict.FINISHED):
            log.info(
                "duplicate delivery acknowledged while the tenant holds its cap",
                extra={"instance_id": message.instance_id, "shard": message.shard},
            )
            return True
        return False

    def fenced_out(self, shard: ShardRecord, *, why: str) -> ShardOutcome:
        """The handler does not run after all, though the attempt took its lease: the instance's
        starts closed meanwhile, or the fence could not be read (`why`). The lease is given
        back (`give_back_lease`): the shard is pending again, as before the take, its attempts
        unused; the instance's counter and its abort figures do not count it."""
        # A refusal: another take holds the shard now, and meets the fence itself. A give-back
        # that cannot be written (throttled) leaves the lease to expire: the sweeper's
        # takeover, which spends an attempt.
        with contextlib.suppress(StaleAttemptError, StoreContendedError):
            self._services.instances.give_back_lease(shard)
        log.info(
            "shard start given back before its handler",
            extra={"instance_id": shard.instance_id, "shard": shard.index, "why": why},
        )
        return ShardOutcome.NOT_STARTED

    def not_started(
        self, message: ShardMessage, instance: InstanceRecord | None, decision: StartDecision
    ) -> ShardOutcome:
        """A shard that may not start now (its rate, its window) or ever (its instance's starts
        closed, its window closed under `on_close: cancel`); no lease is taken.

        WAIT sends a fresh copy delayed until the shard may try again and acknowledges this
        one (as a give-back: the copy's receive count starts again, so a shard waiting for its
        turn never reaches the DLQ). A send that fails raises: the record comes back with its
        visibility instead."""
        if decision.action is StartAction.WAIT:
            copy = (
                message
                if decision.seat is None
                else message.model_copy(update={"seat": decision.seat})
            )
            self._services.queue.send([copy], delays=[decision.delay_s])
            log.info(
                "shard start deferred",
                extra={
                    "instance_id": message.instance_id,
                    "shard": message.shard,
                    "why": decision.why,
                    "delay_s": decision.delay_s,
                },
            )
            return ShardOutcome.DEFERRED
        if decision.action is StartAction.CANCEL:
            # What follows an instance's end is loaded where it is needed, not at a cold start.
            from iotsched.services.scheduling.lifecycle import end_window_closed

            assert instance is not None  # a window's close is decided on the instance
            end_window_closed(instance, self._services, reason=decision.why)
        return ShardOutcome.NOT_STARTED
