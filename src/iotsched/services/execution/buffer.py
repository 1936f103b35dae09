"""The completions of an invocation's finished shards, held and committed together
(`CompletionBuffer`).

It takes `LifecyclePorts`: a completion it writes may end the instance (`finalize`).
"""

from __future__ import annotations

import logging
import threading
import traceback
from collections.abc import Callable
from datetime import datetime, timedelta

from iotsched.ports.shards import (
    CompletionVerdict,
    StaleAttemptError,
)
from iotsched.services.execution.completion import (
    after_shards_ended,
    finalize,
)
from iotsched.services.execution.deadline import COMMIT_ALLOWANCE_S
from iotsched.services.execution.outcomes import (
    CompletionNotWrittenError,
    PendingShard,
    ShardOutcome,
)
from iotsched.services.execution.reads import InstanceReads
from iotsched.services.port_sets import LifecyclePorts
from iotsched.services.tenancy import pacing
from iotsched.services.wiring import Cancellable

log = logging.getLogger(__name__)

#: Seconds after which the message of a completion not written is delivered again (its lease
#: ended at once, so that the next delivery takes the shard over rather than waiting for it).
UNWRITTEN_RETURN_S = 2


class CompletionBuffer:
    """The final writes of an invocation's finished shards, held and committed together.

    `commit` writes the pending ones in one `complete_shards` transaction, reads each instance
    they touched once (strongly consistent) and finalizes those whose counter reached zero.
    The caller acknowledges a pending message only after `commit` gave it an outcome. An
    instance whose sends follow its tenant's cap is refilled from that read
    (`tenancy.pacing`).

    Finished shards wait for their commit only while later messages run, and never past their
    commit deadline: `COMMIT_ALLOWANCE_S` before the earliest pending lease ends or the
    invocation runs out of time (a function timeout must not take finished shards' completions
    with it), and `HOLD_S` after the first of them finished (so an instance's progress shows
    within seconds). When a message starts with shards pending (`guard`), a timer (a daemon
    thread) is set for that deadline; it commits them while the message's handler runs, or
    `guard` commits them first when the deadline has already come. So a batch of short shards
    commits once, whatever the tasks' `timeout_s` and the function's timeout, and a long shard
    never strands the shards finished before it. A heartbeat commits them too
    (`commit(block=False)`). Commits are serialized by a lock: the timer's, the heartbeat's and
    the caller's never overlap.
    """

    HOLD_S = 5.0

    def __init__(
        self,
        services: LifecyclePorts,
        *,
        reads: InstanceReads,
        timer: Callable[[float, Callable[[], object]], Cancellable],
        invocation_end: Callable[[], datetime | None],
        release: Callable[[str], bool],
    ) -> None:
        """`invocation_end()` says when the invocation runs out of time (None: not known);
        `release(receipt)` stops a record's visibility hold before its visibility is set
        otherwise (False: the record must be left alone)."""
        self._services = services
        self._reads = reads
        self._timer = timer
        self._invocation_end = invocation_end
        self._release = release
        self._lock = threading.Lock()
        self._scheduled: tuple[datetime, Cancellable] | None = None
        self.pending: list[PendingShard] = []

    def add(self, pending: PendingShard) -> None:
        """A shard that finished: its final write waits for a commit."""
        with self._lock:
            self.pending.append(pending)

    def commit_deadline(self) -> datetime | None:
        """When the pending shards must be committed by (None: none pending)."""
        with self._lock:
            pending = list(self.pending)
        if not pending:
            return None
        allowance = timedelta(seconds=COMMIT_ALLOWANCE_S)
        deadline = min(
            min(p.lease_until for p in pending) - allowance,
            min(p.finished_at for p in pending) + timedelta(seconds=self.HOLD_S),
        )
        end = self._invocation_end()
        if end is not None:
            deadline = min(deadline, end - allowance)
        return deadline

    def guard(self) -> None:
        """Before a message starts: commit now if the deadline came, else set the timer."""
        deadline = self.commit_deadline()
        if deadline is None:
            return
        delay_s = (deadline - self._services.clock.now()).total_seconds()
        if delay_s <= 0:
            self.commit()
            return
        with self._lock:
            if self._scheduled is not None:
                if self._scheduled[0] <= deadline:
                    return
                self._scheduled[1].cancel()
            self._scheduled = (deadline, self._timer(delay_s, self.commit_on_time))

    def commit_on_time(self) -> None:
        """The timer's call: commit what is still pending (the outcomes go to the records)."""
        try:
            self.commit()
        except Exception:  # a thread has no caller to raise to; the records keep their errors
            log.warning("timed commit failed", extra={"trace": traceback.format_exc()})

    def commit(self, *, block: bool = True) -> list[PendingShard]:
        """Write the pending shards' completions together; returns them, each settled.

        `block=False` (a heartbeat's) returns at once when another commit is in progress: it
        writes what is pending (nothing finishes while a handler runs), and a heartbeat must not
        wait on it past the handler's own timeout.
        """
        if not self._lock.acquire(blocking=block):
            return []
        try:
            if self._scheduled is not None:
                self._scheduled[1].cancel()
                self._scheduled = None
            pending, self.pending = self.pending, []
            try:
                if pending:
                    self._write(pending)
            finally:
                for p in pending:  # settled (or failed): those attempts are over
                    p.stop_renewing()
            return pending
        finally:
            self._lock.release()

    def _write(self, pending: list[PendingShard]) -> None:
        services = self._services
        try:
            verdicts = services.instances.complete_shards([p.completion for p in pending])
        except Exception as exc:  # nothing is known to be written: every message comes back
            log.warning("shard completions not written", extra={"trace": traceback.format_exc()})
            verdicts = [CompletionVerdict.UNWRITTEN] * len(pending)
            cause: Exception = exc
        else:
            cause = CompletionNotWrittenError("the shard's final write did not commit")
        written: dict[str, list[PendingShard]] = {}
        for p, verdict in zip(pending, verdicts, strict=True):
            if verdict is CompletionVerdict.COMMITTED:
                p.outcome = ShardOutcome(p.completion.status.value)
                written.setdefault(p.completion.instance_id, []).append(p)
            elif verdict is CompletionVerdict.STALE:
                p.outcome = ShardOutcome.STALE
            else:
                p.error = cause
                self._return_soon(p)
            p.report.outcome = p.outcome
        for instance_id, shards in written.items():
            try:
                # A child of the attempt span of the instance's last shard in this commit.
                with services.tracer.span(
                    "complete", parent=shards[-1].trace, instance_id=instance_id, shards=len(shards)
                ) as span:
                    instance = services.instances.get_instance(instance_id)
                    self._reads.remember(instance_id, instance)
                    if instance is not None:
                        span.annotate(task_id=instance.task_id, remaining=instance.remaining)
                    if instance is not None and instance.remaining == 0:
                        finalize(instance_id, services)
                    elif instance is not None and instance.abort is not None:
                        after_shards_ended(instance_id, services, instance=instance)  # abort?
            except Exception as exc:  # as one by one: these messages come back
                log.warning("finalize failed", extra={"trace": traceback.format_exc()})
                for p in shards:
                    p.error = exc
                continue
            if instance is not None and pacing.refill_due(instance, services.clock.now()):
                # Its window ran low: the next shards go now, not at the next sweep. A refill
                # never fails these shards' outcomes (it logs, and the sweeper refills).
                # The send path is loaded where a refill happens, not at a worker's cold start.
                from iotsched.services.scheduling.lifecycle import refill

                refill(instance_id, services)

    def _return_soon(self, pending: PendingShard) -> None:
        """A completion not written: end its lease now (fenced on its attempt) and have its
        message delivered again in seconds, where it would otherwise wait for its visibility
        timeout. The next delivery takes the shard over and runs it again (its effects went
        through the ledger). Where either step fails, the message still comes back later."""
        c = pending.completion
        # no renewal may move the lease on after this (one in flight that lands later leaves
        # a live lease: the message is then acknowledged, and the sweeper takes over)
        pending.stop_renewing()
        try:
            now = self._services.clock.now()
            self._services.instances.extend_lease(
                c.instance_id, c.index, attempt=c.attempt.number, until=now
            )
        except StaleAttemptError:
            return  # another attempt holds the shard: this message is not needed soon
        except Exception:
            log.warning("lease not ended after an unwritten completion", exc_info=True)
        if not self._release(pending.delivery.receipt_handle):
            return  # its hold lapsed: not ours to touch (the sweeper takes the ended lease)
        try:
            self._services.queue.extend_visibility(
                pending.delivery.receipt_handle, UNWRITTEN_RETURN_S
            )
        except Exception:
            log.warning("message not made visible soon", exc_info=True)
