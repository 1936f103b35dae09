"""One attempt of a shard: take the lease, run the handler, decide the outcome
(`AttemptRunner`).

It takes `AttemptPorts`: the lifecycle's (a left lease ends its shard) and the handlers.
"""

from __future__ import annotations

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
from iotsched.core.shard_record import ShardStatus
from iotsched.errors import FailShard, RetryShard
from iotsched.ports.logs import AttemptLogStore
from iotsched.ports.shards import (
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
    LEASE_EXPIRED,
    end_exhausted,
    index_young_lease,
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
from iotsched.services.execution.start import ShardStart
from iotsched.services.execution.timer import (
    AttemptTimeoutError,
    AttemptTimer,
)
from iotsched.services.port_sets import LifecyclePorts
from iotsched.services.tenancy import slots as quotas
from iotsched.services.wiring import Cancellable

log = logging.getLogger(__name__)
MAX_ERROR_CHARS = 2000


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
        self._start = ShardStart(services, worker=worker, reads=reads)

    def run(
        self, delivery: Delivery, message: ShardMessage, report: ShardReport
    ) -> ShardOutcome | PendingShard:
        """Take the shard's lease and run its attempt; a shard that finished is returned pending
        (its final write is the batch's commit). Raises RetryShardError as `ShardBatch.run`."""
        slot: list[quotas.HeldSlot] = []  # the tenant's slot the start took, if it took one
        if message.seat is not None and delivery.receive_count > 1:
            # A delivery after the first (a retry's, a lapsed hold's) is a new start: the seat
            # its body holds was used by the first, or lost with it.
            message = message.model_copy(update={"seat": None})
        try:
            try:
                ready = self._start.before_lease(message, slot)
            except StoreContendedError as exc:
                return self._start.throttled(message, exc)
            if isinstance(ready, ShardOutcome):
                return ready
            instance, message = ready  # the message now holds the seat its start took
            return self._leased(delivery, message, report, instance, slot[0] if slot else None)
        finally:
            # The attempt ran (or never took the lease): its slot is free for the next shard.
            if slot:
                quotas.release_slot(slot[0], self._services)

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
        start = self._start
        try:
            lease = start.take_lease(message, now, lease_s)
        except StoreContendedError as exc:
            return start.throttled(message, exc)
        if lease.taken and (fenced := start.fence(instance, message, lease)) is not None:
            return fenced
        if not lease.taken:
            verdict = decide_lease(lease.shard, now=now, max_attempts=message.max_attempts)
            if verdict is LeaseVerdict.EXHAUSTED:
                # A last attempt lost (its worker died, perhaps between its lease and its
                # fence) on an instance whose starts closed since is the instance's end, not
                # the shard's failure.
                try:
                    closed = start.closed(instance, message.shard)
                except StoreContendedError as exc:
                    return start.throttled(message, exc)
                status, error = (
                    (ShardStatus.CANCELLED, "instance ended")
                    if closed
                    else (ShardStatus.TIMED_OUT, LEASE_EXPIRED)
                )
                return end_exhausted(
                    lease.shard,
                    services,
                    now,
                    status=status,
                    error=error,
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
        # A running handler learns of its instance's end within one renewal period.
        cancel = CancelWatch(message.instance_id, services, interval_s=renewal.interval_s)
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
