"""The shard messages of one worker invocation (`ShardBatch`), and one message alone
(`run_shard`).

It keeps `Wiring`: a batch hands it to every part it builds (the runner takes the handlers,
the buffer the lifecycle, the renewals their schedule), so it needs nearly the whole bag.
"""

from __future__ import annotations

import logging
import math
import traceback
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from datetime import datetime

from iotsched.core.decisions import backoff_delay_s
from iotsched.core.instance_record import InstanceRecord
from iotsched.core.shard_message import ShardMessage
from iotsched.services.execution.attempt import AttemptRunner
from iotsched.services.execution.buffer import CompletionBuffer
from iotsched.services.execution.capture import LogStream
from iotsched.services.execution.deadline import (
    COMMIT_ALLOWANCE_S,
    InvocationDeadline,
)
from iotsched.services.execution.hold import VisibilityHold
from iotsched.services.execution.outcomes import (
    SHARD_ENDED,
    CompletionNotWrittenError,
    Delivery,
    GivenBackError,
    PendingShard,
    ShardOutcome,
    ShardReport,
)
from iotsched.services.execution.reads import InstanceReads
from iotsched.services.execution.schedules import (
    Renewing,
    thread_renewals,
    thread_timer,
)
from iotsched.services.port_sets import QueuePorts
from iotsched.services.wiring import Cancellable, Wiring

log = logging.getLogger(__name__)


class ShardBatch:
    """The shard messages of one worker invocation, run one by one and completed together.

    Built per invocation from its parts, each its own object: `attempts` runs a message's
    attempt up to its final write (`AttemptRunner`), which it leaves pending in `completions`,
    whose `commit` writes the pending ones together (`CompletionBuffer`); `deadline` gives the
    records not started back before the function's timeout (`InvocationDeadline`); `hold` keeps
    the records on a short visibility while the invocation runs (`VisibilityHold`); `reads`
    shares the reads of an instance between its messages (`InstanceReads`). The caller
    acknowledges a pending message only after `commit` gave it an outcome (`may_acknowledge`).
    `run` handles one message as `run_shard` does up to the final write.
    """

    COMMIT_ALLOWANCE_S = COMMIT_ALLOWANCE_S  # read here; `deadline` sets it

    def __init__(
        self,
        services: Wiring,
        *,
        worker: str,
        parse: Callable[[str], ShardMessage] = ShardMessage.model_validate_json,
        time_left_s: Callable[[], float] | None = None,
        timer: Callable[[float, Callable[[], object]], Cancellable] = thread_timer,
        renewals: Callable[[Renewing], Cancellable] | None = None,
        log_stream: LogStream | None = None,
    ) -> None:
        """`log_stream` names the worker's own log on each attempt's record (on AWS);
        `time_left_s` (if given) says how long the invocation may still run; `timer`
        schedules the deadline commit and the give-back (a thread timer; tests pass one they
        fire by hand); `renewals` keeps each attempt's lease while it lives (default: the
        services', else a daemon thread; tests pass one they step by hand)."""
        self._services = services
        self.renewals: Callable[[Renewing], Cancellable] = (
            renewals or services.renewals or thread_renewals
        )
        self._parse = parse
        self.hold: VisibilityHold | None = None  # the records' short visibility (expect)
        self._holding: Cancellable | None = None
        self._expected: list[Delivery] = []
        self._begun: set[str] = set()  # receipts of the records `run` was given
        self.reads = InstanceReads(services)
        self.deadline = InvocationDeadline(
            services,
            parse=parse,
            time_left_s=time_left_s,
            timer=timer,
            release=self._release,
            on_close=self._commit_on_time,
        )
        self.completions = CompletionBuffer(
            services,
            reads=self.reads,
            timer=timer,
            invocation_end=self.deadline.ends,
            release=self._release,
        )
        self.attempts = AttemptRunner(
            services,
            worker=worker,
            renewals=self.renewals,
            reads=self.reads,
            retry_later=self.retry_later,
            # a heartbeat never waits for a commit under way
            commit_pending=lambda: self.completions.commit(block=False),
            log_stream=log_stream,
        )

    @property
    def pending(self) -> list[PendingShard]:
        """The finished shards waiting for a commit."""
        return self.completions.pending

    def expect(self, deliveries: Sequence[Delivery]) -> None:
        """The invocation's records. Each, a lone one too, is kept on a visibility of one lease
        until the invocation ends (`VisibilityHold`: the first change is made now), so that a
        worker's death brings the records back within a lease: those not started, and the one
        running, whose lease is not in the lease index before its first renewal. With
        `time_left_s`, those not started by `COMMIT_ALLOWANCE_S` before its end go back to the
        queue (see `InvocationDeadline`)."""
        self._expected = list(deliveries)
        if deliveries and self.hold is None:
            self.hold = VisibilityHold(
                self._services,
                [d.receipt_handle for d in deliveries],
                max(1, math.ceil(self._services.tuning.shard_lease_s)),
            )
            self.hold.step()  # before anything runs: a death from here on is bounded
            self._holding = self.renewals(self.hold)
        self.deadline.arm(deliveries)

    def end(self) -> list[PendingShard]:
        """The invocation is over: call its timers off (waiting for a closing timer that has
        begun giving records back: a frozen sandbox must not hold them) and commit."""
        self.deadline.end()
        try:
            return self.commit()
        finally:
            if self._holding is not None:  # the event source deletes or releases them now
                self._holding.cancel()
                self._holding = None

    def may_acknowledge(self, receipt_handle: str, outcome: ShardOutcome) -> bool:
        """May this record's message be deleted now, given what handling it amounted to?

        Yes where its shard or instance is final by what this invocation saw (nothing will
        need the message again), or where the record's visibility was held without a gap (the
        receipt is still the message's own). Otherwise (a duplicate, a stale attempt, a copy
        given back, with the hold lapsed) the message may be in another consumer's hands, one
        whose retry would come from it, and a delete through this older receipt can still
        delete it on SQS: the record is reported failed instead, which leaves it alone.
        """
        if outcome in SHARD_ENDED or self.hold is None:
            return True
        return self.hold.intact(receipt_handle)

    def retry_later(
        self,
        delivery: Delivery,
        message: ShardMessage,
        attempt: int,
        delay_s: float | None = None,
    ) -> None:
        """The attempt failed with attempts left (the shard is pending again): have its message
        come back after the backoff (`delay_s` instead: a handler's `RetryShard`). Where the record's hold lapsed, its message may be with
        another consumer, who may delete it as a duplicate: a fresh copy carries the retry
        (at once; the lease lets one delivery run)."""
        if self.hold is None or self.hold.release(delivery.receipt_handle):
            _retry_later(delivery, message, attempt, self._services, delay_s)
            return
        message = message.model_copy(update={"seat": None})  # a retry is a start: its own seat
        try:
            if delay_s is None:
                self._services.queue.send([message])
            else:
                self._services.queue.send([message], delays=[math.ceil(delay_s)])
        except Exception:  # the original may still come back after its visibility
            log.warning("retry copy not sent", extra={"trace": traceback.format_exc()})

    def _release(self, receipt_handle: str) -> bool:
        """Before setting a record's visibility otherwise: False where it must be left alone."""
        return self.hold is None or self.hold.release(receipt_handle)

    def _commit_on_time(self) -> None:
        """The closing timer's commit of what is pending (the outcomes go to the records)."""
        self.completions.commit_on_time()

    def instance(self, instance_id: str) -> InstanceRecord | None:
        """The instance, read at most once per `InstanceReads.INSTANCE_READ_S` by this batch."""
        return self.reads.get(instance_id)

    def run(
        self, delivery: Delivery, *, report: ShardReport | None = None
    ) -> ShardOutcome | PendingShard:
        """Handle one message; a shard that finished is returned pending (see `commit`).

        Raises:
            pydantic.ValidationError: a malformed body (made visible at once: it goes to the
                DLQ after maxReceiveCount receives).
            RetryShardError: the attempt failed and the shard will be retried after its backoff.
            GivenBackError: not started, the invocation being about to run out of time, and
                no copy could be sent (it was made visible again instead).
        """
        report = report if report is not None else ShardReport()
        self._begun.add(delivery.receipt_handle)
        try:
            given_back = self.deadline.may_start(delivery)
        except GivenBackError:
            report.given_back = True
            raise
        if given_back is not None:
            report.given_back = True
            report.outcome = given_back
            return given_back
        try:
            message = self._parse(delivery.body)
        except Exception:
            self._hasten_to_dead_letters(delivery)
            raise
        self.completions.guard()
        running = _RUNNING.set(self)
        try:
            # A child of the claim's span the message carries; the runner annotates the attempt.
            with self._services.tracer.span(
                "attempt",
                parent=message.trace,
                task_id=message.task_id,
                instance_id=message.instance_id,
                shard=message.shard,
            ) as span:
                result = self.attempts.run(delivery, message, report)
                done = result.value if isinstance(result, ShardOutcome) else "pending"
                span.annotate(outcome=done)
        finally:
            _RUNNING.reset(running)
        if isinstance(result, PendingShard):
            result.trace = span.carrier  # its completion's span joins this trace
            self.completions.add(result)
        else:
            report.outcome = result
        return result

    def _hasten_to_dead_letters(self, delivery: Delivery) -> None:
        """A malformed body can never run: it is made visible at once (its hold released), so
        that it reaches the DLQ after maxReceiveCount quick receives rather than as many
        leases, and its alert goes out in seconds. Best effort: otherwise it comes back when
        its hold ends, as before."""
        if not self._release(delivery.receipt_handle):
            return  # another consumer may hold it: left alone
        try:
            self._services.queue.extend_visibility(delivery.receipt_handle, 0)
        except Exception:
            log.warning(
                "malformed record not made visible", extra={"trace": traceback.format_exc()}
            )

    def waiting(self) -> list[tuple[str, int]]:
        """The (instance, shard) of the expected records not yet given to `run`."""
        found = []
        for d in self._expected:
            if d.receipt_handle in self._begun:
                continue
            try:
                message = self._parse(d.body)
            except Exception:  # noqa: S112 - a malformed body names no shard
                continue
            found.append((message.instance_id, message.shard))
        return found

    def commit_deadline(self) -> datetime | None:
        """When the pending shards must be committed by (None: none pending)."""
        return self.completions.commit_deadline()

    def commit(self, *, block: bool = True) -> list[PendingShard]:
        """Write the pending shards' completions together; returns them, each settled (see
        `CompletionBuffer.commit`)."""
        return self.completions.commit(block=block)


#: The batch whose record runs on this thread (see `waiting_records`).
_RUNNING: ContextVar[ShardBatch | None] = ContextVar("running_batch", default=None)


def waiting_records() -> list[tuple[str, int]]:
    """Diagnostics for the handler running now: the records of its invocation not started yet
    (the chaos handler logs them as it kills its process, to measure how soon they run)."""
    batch = _RUNNING.get()
    return batch.waiting() if batch is not None else []


def run_shard(
    delivery: Delivery,
    services: Wiring,
    *,
    worker: str,
    parse: Callable[[str], ShardMessage] = ShardMessage.model_validate_json,
    report: ShardReport | None = None,
    renewals: Callable[[Renewing], Cancellable] | None = None,
) -> ShardOutcome:
    """Handle one message as a batch of one; `report` (if given) receives what happened;
    `renewals` as for `ShardBatch`.

    Raises:
        pydantic.ValidationError: a malformed body (the batch reports it; after
            maxReceiveCount SQS moves it to the DLQ).
        RetryShardError: the attempt failed and the shard will be retried after its backoff.
        Exception: the final write or the finalizer failed (the message must come back).
    """
    batch = ShardBatch(services, worker=worker, parse=parse, renewals=renewals)
    result = batch.run(delivery, report=report)
    if isinstance(result, PendingShard):
        batch.commit()
        if result.error is not None:
            raise result.error
        if result.outcome is None:  # the commit itself was interrupted
            raise CompletionNotWrittenError("the shard's final write did not commit")
        return result.outcome
    return result


def _retry_later(
    delivery: Delivery,
    message: ShardMessage,
    attempt: int,
    services: QueuePorts,
    delay_s: float | None = None,
) -> None:
    """Hide the message for the backoff, or `delay_s` (0: at once), counted from now, then
    report failure."""
    delay = backoff_delay_s(attempt, message.backoff_s) if delay_s is None else math.ceil(delay_s)
    try:
        services.queue.extend_visibility(delivery.receipt_handle, delay)
    except Exception:  # the default visibility timeout still brings the message back
        log.warning("could not set the retry backoff", extra={"trace": traceback.format_exc()})
