"""One attempt of a shard: take the lease, run the handler, decide the outcome
(`AttemptRunner`).

It takes `AttemptPorts`: the lifecycle's (a left lease ends its shard) and the handlers.
"""

from __future__ import annotations

import contextlib
import logging
import traceback
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any, Protocol, runtime_checkable

from iotsched.context import Handler, ResourceCache
from iotsched.core.attempt_record import (
    LISTED_KEYS,
    Attempt,
    AttemptOutcome,
)
from iotsched.core.decisions import LeaseVerdict, decide_lease
from iotsched.core.instance_record import InstanceRecord
from iotsched.core.plugins import Origin, PluginError
from iotsched.core.shard_message import ShardMessage
from iotsched.core.shard_record import ShardRecord, ShardStatus
from iotsched.core.timeutil import floor_minute
from iotsched.errors import FailShard, RetryShard
from iotsched.ports.logs import AttemptLogStore
from iotsched.ports.shards import (
    LeaseResult,
    ShardCompletion,
    StaleAttemptError,
)
from iotsched.ports.store_errors import StoreContendedError
from iotsched.registry import check_params, handler_for
from iotsched.services.execution.capture import (
    AttemptCapture,
    AttemptKeys,
    LogStream,
    capturing,
    keep_log,
)
from iotsched.services.execution.completion import finalize
from iotsched.services.execution.handler_context import (
    CancelWatch,
    checked_result,
    shard_context,
)
from iotsched.services.execution.leases import (
    end_exhausted,
    index_young_lease,
    left_lease,
)
from iotsched.services.execution.outcomes import (
    Delivery,
    PendingShard,
    RetryShardError,
    ShardOutcome,
    ShardReport,
)
from iotsched.services.execution.reads import InstanceReads
from iotsched.services.execution.renewal import LeaseRenewal
from iotsched.services.execution.schedules import Renewing
from iotsched.services.execution.timer import (
    AttemptTimeoutError,
    AttemptTimer,
)
from iotsched.services.fleet import rollout
from iotsched.services.fleet.rollout import (
    StartAction,
    StartDecision,
)
from iotsched.services.port_sets import LifecyclePorts
from iotsched.services.tenancy import slots as quotas
from iotsched.services.wiring import Cancellable

log = logging.getLogger(__name__)
MAX_ERROR_CHARS = 2000
#: The error of an attempt whose lease was taken after its instance's starts closed.
FENCED_OUT = "not started: the instance's starts closed before its handler began"
#: Why a start that met throttling (past the store's retries) waits; and for how long at least
#: (then up to as long again, spread by shard).
THROTTLED = "not started: throttled"
THROTTLED_RETRY_S = 5


@runtime_checkable
class AttemptPorts(LifecyclePorts, Protocol):
    """The lifecycle's ports and the handlers an attempt runs."""

    @property
    def handlers(self) -> Mapping[str, Handler]: ...

    @property
    def attempt_logs(self) -> AttemptLogStore | None: ...

    @property
    def resources(self) -> ResourceCache: ...


class AttemptRunner:
    """Runs the attempts of an invocation's messages, one at a time.

    Each attempt takes the shard's lease (or learns why not: a duplicate, an exhausted lease, an
    ended instance), keeps it renewed while it lives (`LeaseRenewal`, on `renewals`), runs the
    handler under its timer and cancel watch, and decides the outcome: a failure with attempts
    left releases the shard for a retry (`retry_later`), anything else is left pending for the
    batch's commit. A heartbeat commits the batch's finished shards (`commit_pending`, which
    never waits for a commit under way).
    """

    def __init__(
        self,
        services: AttemptPorts,
        *,
        worker: str,
        renewals: Callable[[Renewing], Cancellable],
        reads: InstanceReads,
        retry_later: Callable[[Delivery, ShardMessage, int, float | None], None],
        commit_pending: Callable[[], object],
        log_stream: LogStream | None = None,
    ) -> None:
        """`log_stream`: where the worker's own log goes (on AWS), named on each record."""
        self._services = services
        self._log_stream = log_stream
        self._worker = worker
        self._renewals = renewals
        self._reads = reads
        self._retry_later = retry_later
        self._commit_pending = commit_pending
        # Instances whose fence this invocation found closed: their later messages here start
        # nothing, without a lease, a read and a give-back each.
        self._fenced: set[str] = set()

    def run(
        self, delivery: Delivery, message: ShardMessage, report: ShardReport
    ) -> ShardOutcome | PendingShard:
        """Take the shard's lease and run its attempt; a shard that finished is returned pending
        (its final write is the batch's commit). Raises RetryShardError as `ShardBatch.run`."""
        slot: list[quotas.HeldSlot] = []  # the tenant's slot the start took, if it took one
        try:
            try:
                ready = self._before_lease(message, slot)
            except StoreContendedError as exc:
                return self._throttled(message, exc)
            if isinstance(ready, ShardOutcome):
                return ready
            instance, message = ready  # the message now holds the seat its start took
            return self._leased(delivery, message, report, instance, slot[0] if slot else None)
        finally:
            # The attempt ran (or never took the lease): its slot is free for the next shard.
            if slot:
                quotas.release_slot(slot[0], self._services)

    def _before_lease(
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
            return self._not_started(message, instance, waiting)
        seat = rollout.held_seat(message, floor_minute(now))
        if seat is not None and seat > floor_minute(now):
            # A copy early for its seat (a hop of a long wait): back later, no slot taken.
            return self._not_started(
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
                return self._not_started(message, instance, quotas.wait_for_slot(instance, message))
            slot.append(held)
            services.faults.at("start_slot", message.instance_id)
        if rollout.counted(instance, message):
            decision = rollout.count_start(instance, message, services)
            if decision.action is not StartAction.START:
                return self._not_started(message, instance, decision)
            message = message.model_copy(update={"seat": decision.seat})
            services.faults.at("start_counted", message.instance_id)
        return instance, message

    def _throttled(self, message: ShardMessage, exc: StoreContendedError) -> ShardOutcome:
        """A start step was throttled (or contended) past the store's retries, before the
        handler ran: the shard waits, as a rate's wait, never counted toward the DLQ."""
        delay = THROTTLED_RETRY_S + rollout.spread_s(
            message.instance_id, message.shard, THROTTLED_RETRY_S
        )
        log.warning("shard start throttled: deferred", extra={"error": str(exc), "delay_s": delay})
        return self._not_started(message, None, StartDecision(StartAction.WAIT, delay, THROTTLED))

    def _leased(
        self,
        delivery: Delivery,
        message: ShardMessage,
        report: ShardReport,
        instance: InstanceRecord,
        held: quotas.HeldSlot | None = None,
    ) -> ShardOutcome | PendingShard:
        """Take the shard's lease and run its attempt (the start is allowed; `held`: the
        tenant's slot it holds, kept as long as the attempt by its heartbeats)."""
        services = self._services
        now = services.clock.now()
        tuning = services.tuning
        # Short, and renewed while the attempt lives (LeaseRenewal); never longer than the attempt
        # may run before its first heartbeat.
        lease_s = min(tuning.shard_lease_s, message.timeout_s + tuning.lease_margin_s)
        try:
            lease = self._take_lease(message, now, lease_s)
        except StoreContendedError as exc:
            return self._throttled(message, exc)
        if lease.taken:
            services.faults.at("start_leased", message.instance_id)
            try:
                closed = rollout.fenced(instance) and rollout.starts_closed(instance, services)
            except StoreContendedError as exc:
                self._fenced_out(lease.shard, why=THROTTLED)
                return self._throttled(message, exc)
            if closed:
                self._fenced.add(message.instance_id)
                return self._fenced_out(lease.shard, why=FENCED_OUT)
        if not lease.taken:
            verdict = decide_lease(lease.shard, now=now, max_attempts=message.max_attempts)
            if verdict is LeaseVerdict.EXHAUSTED:
                # A last attempt lost (its worker died, perhaps between its lease and its
                # fence) on an instance whose starts closed since: the instance's end, not the
                # shard's failure.
                try:
                    closed = rollout.fenced(instance) and rollout.starts_closed(instance, services)
                except StoreContendedError as exc:
                    return self._throttled(message, exc)
                if closed:
                    return end_exhausted(
                        lease.shard,
                        services,
                        now,
                        status=ShardStatus.CANCELLED,
                        error="instance ended",
                        retention_days=instance.retention_days,
                        instance=instance,
                    )
                return end_exhausted(
                    lease.shard,
                    services,
                    now,
                    retention_days=instance.retention_days,
                    instance=instance,
                )
            if verdict is LeaseVerdict.BUSY:
                index_young_lease(lease.shard, services)
            # Finished, or under a live lease: another copy of the message (a dispatcher's resend,
            # a copy given back, a sweeper's fresh message, or the original shown again after its
            # visibility timeout while a taken-over attempt runs). Acknowledged: the lease, not
            # this message, carries the shard on; if its holder dies, the sweeper sends a fresh one.
            log.info(
                "duplicate delivery acknowledged",
                extra={"instance_id": message.instance_id, "shard": message.shard, "why": verdict},
            )
            if instance.remaining == 0:
                # Every shard is written but the instance is open: the worker that wrote the last
                # one died before its finalize (idempotent). Done here rather than left to the
                # sweeper; if it fails, the sweeper still does it.
                try:
                    finalize(message.instance_id, services)
                except Exception:
                    log.warning("finalize after a duplicate failed", exc_info=True)
            return ShardOutcome.DUPLICATE

        attempt = lease.shard.attempts[-1]
        report.attempt = attempt.number
        services.tracer.annotate(attempt=attempt.number)
        # The attempt before this one was lost: its worker died (or hung) and its lease expired.
        attempts = lease.shard.attempts
        report.taken_over = len(attempts) > 1 and attempts[-2].outcome is AttemptOutcome.LOST
        cancel = CancelWatch(message.instance_id, services)
        timer = AttemptTimer(message.timeout_s)
        assert lease.shard.lease_until is not None

        def lost() -> None:  # a renewal was refused: another attempt holds the shard
            cancel.stale = True
            timer.interrupt()

        renewal = LeaseRenewal(
            services,
            instance_id=message.instance_id,
            index=message.shard,
            attempt=attempt.number,
            until=lease.shard.lease_until,
            lease_s=lease_s,
            timeout_s=message.timeout_s,
            margin_s=tuning.lease_margin_s,
            started_at=attempt.started_at,
            on_lost=lost,
        )
        renewing: Cancellable | None = self._renewals(renewal)
        try:
            result = self._attempt(
                delivery,
                message,
                report,
                attempt,
                renewal,
                cancel,
                timer,
                retention_days=instance.retention_days,
                held=held,
            )
            if isinstance(result, PendingShard):
                result.renewing, renewing = renewing, None  # renewed until its commit settles
            return result
        finally:
            if renewing is not None:
                renewing.cancel()

    def _take_lease(self, message: ShardMessage, now: datetime, lease_s: float) -> LeaseResult:
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

    def _fenced_out(self, shard: ShardRecord, *, why: str) -> ShardOutcome:
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

    def _not_started(
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

    def _attempt(
        self,
        delivery: Delivery,
        message: ShardMessage,
        report: ShardReport,
        attempt: Attempt,
        renewal: LeaseRenewal,
        cancel: CancelWatch,
        timer: AttemptTimer,
        *,
        retention_days: int,
        held: quotas.HeldSlot | None = None,
    ) -> ShardOutcome | PendingShard:
        """Run the handler of an attempt that holds the lease; leave its final write pending."""
        services = self._services

        def keep(now: datetime) -> None:
            if held is not None:
                quotas.keep_slot(held, message, services, now)

        capture = AttemptCapture(
            AttemptKeys(message.instance_id, message.shard, attempt.number), services.clock
        )
        ctx = shard_context(
            message,
            attempt,
            services,
            renewal,
            cancel,
            timer,
            self._commit_pending,
            retention_days=retention_days,
            capture=capture,
            tracer=services.tracer,
            on_beat=None if held is None else keep,
            resources=services.resources,
        )
        error: str | None = None
        timed_out = False
        final = False  # no further attempt: FailShard, a deployment problem, bad params
        retry_delay_s: float | None = None
        result: Mapping[str, Any] | None = None
        origin: Origin | None = None  # the handler's package, recorded on the attempt
        try:
            loaded = handler_for(services.handlers, message.handler)
            origin = loaded.origin
            check_params(loaded.spec, ctx.params)
            with capturing(capture), timer.running():
                result = loaded.spec.call(ctx)
            result = checked_result(result)
        except StaleAttemptError:
            return ShardOutcome.STALE
        except AttemptTimeoutError as exc:
            timed_out = True
            error = str(exc)
            capture.failed(exc)
        except (FailShard, PluginError) as exc:
            final = True
            if isinstance(exc, PluginError):
                origin = exc.origin
            error = f"{type(exc).__name__}: {exc}"[:MAX_ERROR_CHARS]
            capture.failed(exc)
            log.warning("shard attempt failed, no further attempt", extra={"error": error})
        except RetryShard as exc:
            retry_delay_s = exc.delay_s
            error = f"{type(exc).__name__}: {exc}"[:MAX_ERROR_CHARS]
            capture.failed(exc)
            log.info("shard attempt asked for a retry", extra={"error": error})
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"[:MAX_ERROR_CHARS]
            capture.failed(exc)
            log.warning(
                "shard attempt failed", extra={"error": error, "trace": traceback.format_exc()}
            )
        renewal.handler_ended()
        if renewal.lost:  # a zombie that swallowed its interruption: its writes would be refused
            return ShardOutcome.STALE
        if cancel.seen:
            status = ShardStatus.CANCELLED
        elif error is None:
            status = ShardStatus.SUCCEEDED
        elif timed_out:
            status = ShardStatus.TIMED_OUT
        else:
            status = ShardStatus.FAILED
        # Before the record's write that names it: a record never points at a missing object.
        attempt_log = keep_log(
            capture,
            task_id=message.task_id,
            retention_days=retention_days,
            store=services.attempt_logs,
            stream=self._log_stream,
        )
        ended = services.clock.now()
        done = attempt.model_copy(
            update={
                "ended_at": ended,
                "duration_ms": int((ended - attempt.started_at).total_seconds() * 1000),
                "outcome": AttemptOutcome(status.value),
                "error": error,
                "keys": ctx.keys[:LISTED_KEYS],
                "key_count": len(ctx.keys),
                "log": attempt_log,
                "package": origin.package if origin else None,
                "version": origin.version if origin else None,
            }
        )
        report.duration_ms = done.duration_ms
        try:
            retryable = status in (ShardStatus.FAILED, ShardStatus.TIMED_OUT) and not final
            if retryable and attempt.number < message.max_attempts:
                services.instances.release_shard(
                    message.instance_id,
                    message.shard,
                    attempt=done,  # failed or timed_out; the shard goes back to pending
                )
                # Only an attempt that still held the shard (the fenced release passed) may delay
                # the message: a zombie's old receipt must not touch it.
                self._retry_later(delivery, message, attempt.number, retry_delay_s)
                report.retried = True
                raise RetryShardError(error)
        except StaleAttemptError:
            return ShardOutcome.STALE
        return PendingShard(
            delivery=delivery,
            completion=ShardCompletion(
                instance_id=message.instance_id,
                index=message.shard,
                status=status,
                attempt=done,
                error=error,
                result=result if status is ShardStatus.SUCCEEDED else None,
                expires_at=ended + timedelta(days=retention_days),  # the instance's retention
            ),
            report=report,
            lease_until=renewal.until,
        )
