"""One shard message: take the lease, run the handler, write the record, maybe finalize.

The messages of one worker invocation (an SQS batch of up to 10) run one after another in a
`ShardBatch`, and the final writes of those that finished commit together: one transaction of
every shard's fenced write plus one counter decrement per instance, then one read per instance
to learn `remaining` (about 3.45 write units per shard at batch size 10, against 7 one by one).
`run_shard` is a batch of one.
"""

from __future__ import annotations

import json
import logging
import math
import signal
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Protocol

from iotsched.context import ShardContext
from iotsched.core.decisions import LeaseVerdict, backoff_delay_s, decide_lease
from iotsched.core.model import DEFAULT_RETENTION_DAYS, EFFECT_RETENTION_FLOOR_DAYS
from iotsched.core.records import (
    LISTED_KEYS,
    Attempt,
    AttemptOutcome,
    InstanceRecord,
    ShardMessage,
    ShardRecord,
    ShardStatus,
)
from iotsched.ports import CompletionVerdict, ShardCompletion, StaleAttemptError
from iotsched.services import Cancellable, Services
from iotsched.services.completion import finalize

log = logging.getLogger(__name__)
MAX_ERROR_CHARS = 2000


class ShardOutcome(StrEnum):
    """What handling one message amounted to (the message is acknowledged in every case)."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"  # the final attempt failed: the shard ended failed
    TIMED_OUT = "timed_out"  # an expired lease with no attempts left was ended
    CANCELLED = "cancelled"  # the instance ended while the shard ran; the handler stopped
    NOT_STARTED = "not_started"  # the instance had already ended: nothing ran
    DUPLICATE = "duplicate"  # finished, or under a live lease: nothing ran
    STALE = "stale"  # this attempt lost its lease while running; its writes were refused
    GIVEN_BACK = "given_back"  # not started, the invocation nearly out of time: a copy was sent


#: Outcomes after which the shard (or its instance) is final: no delivery will run it again, so
#: its message may be deleted through any receipt (`ShardBatch.may_acknowledge`).
SHARD_ENDED = frozenset(
    {
        ShardOutcome.SUCCEEDED,
        ShardOutcome.FAILED,
        ShardOutcome.TIMED_OUT,
        ShardOutcome.CANCELLED,
        ShardOutcome.NOT_STARTED,
    }
)


class RetryShardError(Exception):
    """The attempt failed and attempts remain: report a batch item failure so SQS redelivers."""


@dataclass(frozen=True)
class Delivery:
    """One received message, as the event source mapping hands it over."""

    body: str
    receipt_handle: str
    receive_count: int = 1


@dataclass
class ShardReport:
    """What handling one message did, for the worker function's metrics.

    The services ring publishes no metrics itself (no Powertools here): `run_shard` fills the
    report its caller hands in, and the function layer turns it into EMF.
    """

    outcome: ShardOutcome | None = None  # None: the message raised (retry, malformed)
    attempt: int = 0  # the attempt this message ran (0: none ran)
    duration_ms: int | None = None  # the handler's run, when one ran to an end
    retried: bool = False  # the attempt failed with attempts left: released for a retry
    taken_over: bool = False  # this attempt took the lease of one that never ended
    given_back: bool = False  # not started, the invocation nearly out of time (sent back, or
    # made visible again at once where sending a copy failed)


class GivenBackError(Exception):
    """The message was not started, the invocation being about to run out of time, and no copy
    of it could be sent: it was made visible again at once (a batch item failure)."""


class CompletionNotWrittenError(Exception):
    """The shard finished but its final write did not commit (contention, an AWS error): the
    message must come back; its next delivery finds the shard final, or fenced and retaken."""


#: Seconds after which the message of a completion not written is delivered again (its lease
#: ended at once, so that the next delivery takes the shard over rather than waiting for it).
UNWRITTEN_RETURN_S = 2


@dataclass
class PendingShard:
    """A shard whose attempt ended and whose final write waits for its batch's commit.

    `ShardBatch.commit` sets `outcome` (the status written, or STALE when the attempt had lost
    its fence), or `error` when the write did not commit: then the message must come back.
    """

    delivery: Delivery
    completion: ShardCompletion
    report: ShardReport
    lease_until: datetime
    outcome: ShardOutcome | None = None
    error: Exception | None = None
    renewing: Cancellable | None = None  # the lease's renewal, stopped once the commit settled

    def stop_renewing(self) -> None:
        """The attempt is over (its final write settled): its lease is no longer renewed."""
        if self.renewing is not None:
            self.renewing.cancel()
            self.renewing = None

    @property
    def finished_at(self) -> datetime:
        """When its attempt ended (the start of its wait for the commit)."""
        ended = self.completion.attempt.ended_at
        assert ended is not None, "a pending shard's attempt has ended"
        return ended


def thread_timer(delay_s: float, call: Callable[[], object]) -> Cancellable:
    """Run `call` on a daemon thread after `delay_s` seconds, unless cancelled first."""
    timer = threading.Timer(delay_s, call)
    timer.daemon = True
    timer.start()
    return timer


class RenewalTimeoutError(Exception):
    """A lease renewal got no answer within its own timeout (it may still land)."""


def call_within(call: Callable[[], object], timeout_s: float) -> None:
    """Run `call` on a daemon thread and wait at most `timeout_s` for it.

    Raises what `call` raised, or RenewalTimeoutError when it has not answered in time: the
    call goes on (a write may still land; a renewal landing late moves the lease's end to what
    it computed then, and the next renewal moves it on).
    """
    done = threading.Event()
    failure: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as exc:  # handed to the waiting caller
            failure.append(exc)
        finally:
            done.set()

    threading.Thread(target=run, name="lease-renewal-call", daemon=True).start()
    if not done.wait(timeout_s):
        raise RenewalTimeoutError(f"no answer within {timeout_s:g} s")
    if failure:
        raise failure[0]


class LeaseRenewal:
    """Keeps one attempt's lease while the attempt lives.

    The lease is short (`Tuning.shard_lease_s`, 20 s by default) so that a dead worker's shard
    is taken over within about a lease and a sweep, whatever the shard's length: the worker
    renews it every third of the lease (`step`, from a daemon thread: `thread_renewals`),
    each renewal a write fenced on the attempt, with its own timeout (a quarter of the lease,
    so a throttled or slow call cannot hold the next one back) and retried every tenth of the
    lease when it fails, so that a worker that is alive, but slow or throttled, keeps its lease.

    * While the handler runs, the lease is renewed up to `timeout_s + margin_s` after the
      attempt's start or its last heartbeat (`beat`), never further: a handler that the
      attempt's timer cannot interrupt (not on the main thread) and never heartbeats loses
      its lease then, as a hung worker must. Once the handler ended (`handler_ended`), the
      attempt waits for its batch's commit, and the lease is renewed until that settles.
    * A refused renewal (StaleAttemptError: another attempt took the shard over, or it ended)
      makes the attempt a zombie: `on_lost` is called once (the handler is stopped, its writes
      are refused anyway) and renewing stops.
    * The first renewal puts the lease into the lease index, where the sweeper finds it once it
      expires (a shard that ends sooner never writes the index; until then its held message
      covers a death: `VisibilityHold`). So the first renewal is written even where the lease
      is at its cap already.
    * The shard's message is left alone: the function's timeout is at most a sixth of the
      queue's visibility timeout, so its message cannot reappear while the invocation runs,
      and a message's visibility is no part of failover any more (the sweeper sends a fresh
      one for an expired lease).
    """

    def __init__(
        self,
        services: Services,
        *,
        instance_id: str,
        index: int,
        attempt: int,
        until: datetime,
        lease_s: float,
        timeout_s: float,
        margin_s: float,
        started_at: datetime,
        on_lost: Callable[[], None] = lambda: None,
    ) -> None:
        self._services = services
        self.instance_id = instance_id
        self.index = index
        self.attempt = attempt
        self.until = until  # the lease's end as last written by this attempt
        self.lease_s = lease_s
        self._timeout_s = timeout_s
        self._margin_s = margin_s
        self._beat = started_at
        self._handler_running = True
        self._on_lost = on_lost
        self._lock = threading.Lock()
        self.lost = False
        self.renewals = 0
        self.failures = 0
        self.interval_s = lease_s / 3  # between two renewals
        self.retry_s = max(0.1, lease_s / 10)  # after a renewal that failed
        self.call_timeout_s = max(0.5, lease_s / 4)  # a renewal's own timeout

    def beat(self, now: datetime) -> None:
        """A sign of life (a heartbeat): the timeout cap counts from `now`."""
        with self._lock:
            self._beat = now

    def handler_ended(self) -> None:
        """The handler returned: the attempt waits for its commit, renewed without the cap."""
        with self._lock:
            self._handler_running = False

    def target(self, now: datetime) -> datetime:
        """Where a renewal at `now` moves the lease's end."""
        until = now + timedelta(seconds=self.lease_s)
        with self._lock:
            if self._handler_running:
                cap = self._beat + timedelta(seconds=self._timeout_s + self._margin_s)
                until = min(until, cap)
        return until

    def renew(self, *, within_s: float | None = None, force: bool = False) -> datetime:
        """Move the lease's end to `target(now)`; returns it. Without `force`, a lease already
        past that target (the timeout cap) is left to end, unwritten, once it was written once.

        Raises StaleAttemptError (and calls `on_lost`) if the attempt lost the shard, or what
        the write raised (RenewalTimeoutError past `within_s`).
        """
        until = self.target(self._services.clock.now())
        if until <= self.until:
            # A lease at its cap is left to end, unwritten, once it is in the lease index;
            # the first renewal writes it all the same (at its end as it is), so that the
            # sweeper sees a hung attempt's lease end (see `DynamoDBStore._lease_pk`).
            if not force and self.renewals:
                return self.until
            until = self.until

        def write() -> None:
            self._services.instances.extend_lease(
                self.instance_id, self.index, attempt=self.attempt, until=until
            )

        try:
            if within_s is None:
                write()
            else:
                call_within(write, within_s)
        except StaleAttemptError:
            with self._lock:
                self.lost = True
            raise
        with self._lock:
            self.until = max(self.until, until)
            self.renewals += 1
        return until

    def heartbeat(self, now: datetime) -> None:
        """A heartbeat's renewal (after `beat`). Written where the lease has not been written
        since its take (the write puts it into the lease index) or would end within two thirds
        of a lease, before the scheduled renewal (a third of a lease away at most) could move
        it; otherwise left to that renewal, which moves its end from the new beat: a heartbeat
        a few seconds apart from the renewals costs no write of its own. A zombie learns of
        its loss at the first refused write, a heartbeat's or a scheduled renewal's (which
        interrupts the handler).

        Raises StaleAttemptError where its write is refused.
        """
        with self._lock:
            left = self.until - now
            written = self.renewals > 0
        if written and left >= timedelta(seconds=self.lease_s * 2 / 3):
            return
        self.renew(force=True)

    def step(self) -> float | None:
        """One scheduled renewal; returns the delay to the next (None: stop, the lease is lost,
        and `on_lost` was called: a heartbeat that finds it lost raises to the handler instead).
        """
        if self.lost:
            return None
        try:
            self.renew(within_s=self.call_timeout_s)
        except StaleAttemptError:
            log.warning(
                "lease renewal refused: the attempt lost its shard",
                extra={"instance_id": self.instance_id, "shard": self.index},
            )
            self._on_lost()
            return None
        except Exception:  # transient (throttled, timed out): retried within the lease
            self.failures += 1
            log.warning(
                "lease renewal failed; retrying",
                extra={"instance_id": self.instance_id, "shard": self.index},
                exc_info=True,
            )
            return self.retry_s
        return self.interval_s


class Renewing(Protocol):
    """What a renewal schedule keeps alive: a `LeaseRenewal` or a batch's `VisibilityHold`."""

    interval_s: float
    lost: bool

    def step(self) -> float | None:
        """Renew once now; returns the delay to the next (None: stop)."""
        ...


def thread_renewals(renewal: Renewing) -> Cancellable:
    """Renew `renewal` on a daemon thread until cancelled or lost (see `LeaseRenewal`)."""
    stop = threading.Event()

    def run() -> None:
        delay: float | None = renewal.interval_s
        while delay is not None and not stop.wait(delay):
            delay = renewal.step()

    threading.Thread(target=run, name="lease-renewal", daemon=True).start()

    class _Stop:
        def cancel(self) -> None:
            stop.set()

    return _Stop()


class HeldRenewals:
    """Renewals that run only when a test steps them (on its manual clock): `live()` lists the
    attempts still renewed, `step()` renews each once, as the thread would."""

    def __init__(self) -> None:
        self._live: dict[int, Renewing] = {}

    def __call__(self, renewal: Renewing) -> Cancellable:
        key = id(renewal)
        self._live[key] = renewal
        held = self

        class _Stop:
            def cancel(self) -> None:
                held._live.pop(key, None)

        return _Stop()

    def live(self) -> list[LeaseRenewal]:
        """The lease renewals started and not yet stopped (nor lost)."""
        return [r for r in self._live.values() if isinstance(r, LeaseRenewal) and not r.lost]

    def holds(self) -> list[VisibilityHold]:
        """The batches' visibility holds started and not yet stopped."""
        return [r for r in self._live.values() if isinstance(r, VisibilityHold)]

    def step(self) -> None:
        """One renewal of each live lease and visibility hold, as their threads would."""
        for renewal in [r for r in self._live.values() if not r.lost]:
            renewal.step()


class VisibilityHold:
    """Keeps the messages of an invocation on a short visibility until it ends.

    The event source hands an invocation up to `WorkerBatchSize` records, each hidden for the
    queue's visibility timeout (30 minutes by default). A record that has not started holds no
    lease, and one that started holds a lease that is not in the lease index before its first
    renewal (the sweeper cannot see it), so if the worker dies, nothing but that timeout would
    bring either back. The record being run is held as the others, a lone record as several. Instead, every
    record of the invocation is hidden for `seconds` (one lease) at its start, and again every
    third of that while the invocation runs (one ChangeMessageVisibilityBatch per 10 records,
    with its own timeout, retried every tenth when it fails): a worker that dies stops renewing
    and its records reappear within a lease, for another worker to take. A record whose
    visibility is set otherwise (a retry's backoff, a completion not written, a record made
    visible at once) is `release`d first.

    A hold may lapse while the worker lives (its renewals failed for a whole lease): the
    message may then be received by another consumer, and the receipt this invocation holds is
    no longer the message's current one. On SQS a delete through an older receipt can still
    delete the message another consumer holds, so a lapsed record is acknowledged only where
    its shard is known final (`ShardBatch.may_acknowledge`); its visibility is never touched
    again; a retry it needs goes by a fresh copy (`ShardBatch.retry_later`).
    """

    def __init__(self, services: Services, receipt_handles: Sequence[str], seconds: int) -> None:
        self._services = services
        self.seconds = seconds
        # receipt -> when its hold surely ends (None: the queue's own visibility, which
        # outlasts the invocation by the 6x rule)
        self._held: dict[str, datetime | None] = dict.fromkeys(receipt_handles)
        self._lapsed: set[str] = set()
        self._lock = threading.Lock()
        self.lost = False
        self.renewals = 0
        self.failures = 0
        self.interval_s = seconds / 3
        self.retry_s = max(0.1, seconds / 10)
        self.call_timeout_s = max(0.5, seconds / 4)
        # a hold this close to its end counts as ended (the event source deletes what was
        # acknowledged moments after the invocation returns)
        self.margin = timedelta(seconds=max(1.0, seconds / 10))

    def step(self) -> float | None:
        """One renewal of every record still held; returns the delay to the next."""
        clock = self._services.clock
        sent_at = clock.now()
        with self._lock:
            for handle, ends in list(self._held.items()):
                if ends is not None and sent_at >= ends - self.margin:  # renewals kept failing
                    self._lapsed.add(handle)
                    del self._held[handle]
            handles = list(self._held)
        if not handles:
            return None
        until = sent_at + timedelta(seconds=self.seconds)  # a change that applied holds this long
        answer: list[set[str]] = []
        try:
            call_within(
                lambda: answer.append(self._services.queue.hold_visibility(handles, self.seconds)),
                self.call_timeout_s,
            )
        except Exception:  # transient: whether it applied is unknown; retried soon
            self.failures += 1
            log.warning("visibility hold failed; retrying", exc_info=True)
            with self._lock:
                for handle in handles:
                    if handle in self._held:
                        self._held[handle] = _earliest(self._held[handle], until)
            return self.retry_s
        refused = answer[0] if answer else set(handles)
        answered = clock.now()
        with self._lock:
            self.renewals += 1
            for handle in handles:
                if handle not in self._held:
                    continue  # released meanwhile
                ends = self._held[handle]
                if handle in refused or (ends is not None and answered >= ends - self.margin):
                    # Not held under this receipt any more, or perhaps not without a gap:
                    # another consumer may have it. Never touched again.
                    self._lapsed.add(handle)
                    del self._held[handle]
                else:
                    self._held[handle] = until
        return self.interval_s

    def release(self, receipt_handle: str) -> bool:
        """Stop holding a record whose visibility the caller now sets; returns whether the
        receipt is still the message's own (False: leave the message alone). A renewal already
        in flight may land after the caller's change: the record then comes back within a
        lease instead of after its own delay (its next delivery finds the shard as it is)."""
        intact = self.intact(receipt_handle)
        with self._lock:
            self._held.pop(receipt_handle, None)
            if not intact:
                self._lapsed.add(receipt_handle)
        return intact

    def intact(self, receipt_handle: str) -> bool:
        """Has the record been held without a gap up to now (with `margin` to spare)?"""
        with self._lock:
            if receipt_handle in self._lapsed:
                return False
            ends = self._held.get(receipt_handle)
        return ends is None or self._services.clock.now() < ends - self.margin


def _earliest(ends: datetime | None, until: datetime) -> datetime:
    return until if ends is None else min(ends, until)


class ShardBatch:
    """The shard messages of one worker invocation, run one by one and completed together.

    `run` handles one message as `run_shard` does up to the final write, which it leaves
    pending; `commit` writes the pending ones in one `complete_shards` transaction, reads each
    instance they touched once (strongly consistent) and finalizes those whose counter reached
    zero. The caller acknowledges a pending message only after `commit` gave it an outcome.

    Reads of an instance before a lease (is it cancelled?) are shared by the batch's messages
    for `INSTANCE_READ_S`, the staleness the cancel watch accepts while a handler runs: a cancel
    is still seen before any handler starts more than that after it.

    Finished shards wait for their commit only while later messages run, and never past their
    commit deadline: `COMMIT_ALLOWANCE_S` before the earliest pending lease ends or the
    invocation runs out of time (a function timeout must not take finished shards' completions
    with it), and `HOLD_S` after the first of them finished (so an instance's progress shows
    within seconds). When a message starts with shards pending, a timer (a daemon thread) is set
    for that deadline; it commits them while the message's handler runs, or `run` commits them
    first when the deadline has already come. So a batch of short shards commits once, whatever
    the tasks' `timeout_s` and the function's timeout, and a long shard never strands the
    shards finished before it. A heartbeat commits them too. Commits are serialized by a lock:
    the timer's, the heartbeat's and the caller's never overlap.

    Given the invocation's records (`expect`) and its time left, a second timer fires
    `COMMIT_ALLOWANCE_S` before the invocation runs out: it commits what is pending and gives
    the records not yet started back: a fresh copy of each goes to the queue (one send for
    all) and `run` acknowledges the original (`GIVEN_BACK`), so another invocation takes the
    shard at once and its receive count starts again (a record given back time after time must
    not reach the DLQ without having run). Where the send fails, the record is made visible
    again at once instead and fails (`GivenBackError`). Without this the function timeout
    would strand those records for a whole visibility timeout (30 minutes by default). The
    first record always starts, and a function shorter than the allowance gives nothing back.
    A copy and its original both alive (a crash between the send and the acknowledgement)
    are two deliveries of one shard: the lease lets one run.
    """

    INSTANCE_READ_S = 1.0
    COMMIT_ALLOWANCE_S = 10
    HOLD_S = 5.0

    def __init__(
        self,
        services: Services,
        *,
        worker: str,
        parse: Callable[[str], ShardMessage] = ShardMessage.model_validate_json,
        time_left_s: Callable[[], float] | None = None,
        timer: Callable[[float, Callable[[], object]], Cancellable] = thread_timer,
        renewals: Callable[[Renewing], Cancellable] | None = None,
    ) -> None:
        """`time_left_s` (if given) says how long the invocation may still run; `timer`
        schedules the deadline commit (a thread timer; tests pass one they fire by hand);
        `renewals` keeps each attempt's lease while it lives (default: the services', else a
        daemon thread; tests pass one they step by hand)."""
        self._services = services
        self.renewals: Callable[[Renewing], Cancellable] = (
            renewals or services.renewals or thread_renewals
        )
        self._time_left_s = time_left_s
        self._worker = worker
        self._parse = parse
        self._timer = timer
        self._reads: dict[str, tuple[float, InstanceRecord | None]] = {}
        self._lock = threading.Lock()
        self._scheduled: tuple[datetime, Cancellable] | None = None
        self._closing_timer: Cancellable | None = None
        self._closing = False  # the invocation is about to run out: nothing more starts
        self._closed = threading.Event()  # the closing timer's records have gone back
        self._unstarted: dict[str, Delivery] = {}  # expected records not started, by receipt
        self._sent_back: set[str] = set()  # a copy was sent: acknowledge the original
        self._given_back: set[str] = set()  # made visible again: report a failure
        self._started = 0
        self.pending: list[PendingShard] = []
        self.hold: VisibilityHold | None = None  # the records' short visibility (expect)
        self._holding: Cancellable | None = None
        self._expected: list[Delivery] = []
        self._begun: set[str] = set()  # receipts of the records `run` was given

    def expect(self, deliveries: Sequence[Delivery]) -> None:
        """The invocation's records. Each, a lone one too, is kept on a visibility of one lease
        until the invocation ends (`VisibilityHold`: the first change is made now), so that a
        worker's death brings the records back within a lease: those not started, and the one
        running, whose lease is not in the lease index before its first renewal. With `time_left_s`,
        those not started by `COMMIT_ALLOWANCE_S` before its end go back to the queue (see
        the class docstring)."""
        self._expected = list(deliveries)
        if deliveries and self.hold is None:
            self.hold = VisibilityHold(
                self._services,
                [d.receipt_handle for d in deliveries],
                max(1, math.ceil(self._services.tuning.shard_lease_s)),
            )
            self.hold.step()  # before anything runs: a death from here on is bounded
            self._holding = self.renewals(self.hold)
        if self._time_left_s is None:
            return
        delay_s = self._time_left_s() - self.COMMIT_ALLOWANCE_S
        if delay_s <= 0:
            return  # a function this short gives nothing back
        with self._lock:
            self._unstarted.update((d.receipt_handle, d) for d in deliveries)
        self._closing_timer = self._timer(delay_s, self._close)

    def end(self) -> list[PendingShard]:
        """The invocation is over: call its timers off (waiting for a closing timer that has
        begun giving records back: a frozen sandbox must not hold them) and commit."""
        if self._closing_timer is not None:
            self._closing_timer.cancel()
        if self._closing:
            self._closed.wait(self.COMMIT_ALLOWANCE_S)
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

    def retry_later(self, delivery: Delivery, message: ShardMessage, attempt: int) -> None:
        """The attempt failed with attempts left (the shard is pending again): have its message
        come back after the backoff. Where the record's hold lapsed, its message may be with
        another consumer, who may delete it as a duplicate: a fresh copy carries the retry
        (at once; the lease lets one delivery run)."""
        if self.hold is None or self.hold.release(delivery.receipt_handle):
            _retry_later(delivery, message, attempt, self._services)
            return
        try:
            self._services.queue.send([message])
        except Exception:  # the original may still come back after its visibility
            log.warning("retry copy not sent", extra={"trace": traceback.format_exc()})

    def _release(self, receipt_handle: str) -> bool:
        """Before setting a record's visibility otherwise: False where it must be left alone."""
        return self.hold is None or self.hold.release(receipt_handle)

    def _close(self) -> None:
        """The closing timer: nothing more starts; the unstarted go back; pending commits."""
        with self._lock:
            self._closing = True
            chosen = list(self._unstarted.values())  # in the invocation's order
            if not self._started:
                chosen = chosen[1:]  # the first record starts whatever the time
            for d in chosen:
                del self._unstarted[d.receipt_handle]
        try:
            self._send_back(chosen)
        finally:
            self._closed.set()
        self._commit_on_time()

    def _send_back(self, deliveries: Sequence[Delivery]) -> None:
        """A fresh copy of each to the queue, or where that fails, visible again at once.

        A malformed body is left alone: `run` reports it failed, as any other time.
        """
        parsed: list[tuple[Delivery, ShardMessage]] = []
        for d in deliveries:
            try:
                parsed.append((d, self._parse(d.body)))
            except Exception:  # noqa: S112 - left to `run`, which reports it
                continue
        if not parsed:
            return
        try:
            self._services.queue.send([m for _, m in parsed])
            into = self._sent_back
        except Exception:
            log.warning(
                "copies not sent: records made visible", extra={"trace": traceback.format_exc()}
            )
            for d, _ in parsed:
                if not self._release(d.receipt_handle):
                    continue  # perhaps with another consumer already: not ours to touch
                try:
                    self._services.queue.extend_visibility(d.receipt_handle, 0)
                except Exception:  # it comes back after its visibility timeout instead
                    log.warning("record not made visible", extra={"trace": traceback.format_exc()})
            into = self._given_back
        with self._lock:
            into.update(d.receipt_handle for d, _ in parsed)

    def _may_start(self, delivery: Delivery) -> ShardOutcome | None:
        """None: start it; GIVEN_BACK: a copy went to the queue (acknowledge this one);
        raises GivenBackError where it was made visible again instead."""
        handle = delivery.receipt_handle
        with self._lock:
            if not self._closing:
                self._unstarted.pop(handle, None)
                self._started += 1
                return None
        self._closed.wait(self.COMMIT_ALLOWANCE_S)  # the closing timer may be sending it
        with self._lock:
            late = self._started > 0 and not (
                handle in self._sent_back or handle in self._given_back
            )
        if late:  # reached after the close: it goes back too
            self._send_back([delivery])
        with self._lock:
            if handle in self._sent_back:
                return ShardOutcome.GIVEN_BACK
            if handle in self._given_back:
                raise GivenBackError("the invocation is about to run out of time")
            # the first record starts whatever the time; so does a malformed one (not sent
            # back: its parse fails in `run`)
            self._unstarted.pop(handle, None)
            self._started += 1
            return None

    def instance(self, instance_id: str) -> InstanceRecord | None:
        """The instance, read at most once per `INSTANCE_READ_S` by this batch."""
        read = self._reads.get(instance_id)
        if read is not None and time.monotonic() - read[0] < self.INSTANCE_READ_S:
            return read[1]
        found = self._services.instances.get_instance(instance_id)
        self._reads[instance_id] = (time.monotonic(), found)
        return found

    def run(
        self, delivery: Delivery, *, report: ShardReport | None = None
    ) -> ShardOutcome | PendingShard:
        """Handle one message; a shard that finished is returned pending (see `commit`).

        Raises:
            pydantic.ValidationError: a malformed body.
            RetryShardError: the attempt failed and the shard will be retried after its backoff.
            GivenBackError: not started, the invocation being about to run out of time, and
                no copy could be sent (it was made visible again instead).
        """
        report = report if report is not None else ShardReport()
        self._begun.add(delivery.receipt_handle)
        try:
            given_back = self._may_start(delivery)
        except GivenBackError:
            report.given_back = True
            raise
        if given_back is not None:
            report.given_back = True
            report.outcome = given_back
            return given_back
        message = self._parse(delivery.body)
        self._guard_pending()
        running = _RUNNING.set(self)
        try:
            result = _run_shard(delivery, message, self._services, self._worker, report, self)
        finally:
            _RUNNING.reset(running)
        if isinstance(result, PendingShard):
            with self._lock:
                self.pending.append(result)
        else:
            report.outcome = result
        return result

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
        with self._lock:
            pending = list(self.pending)
        if not pending:
            return None
        allowance = timedelta(seconds=self.COMMIT_ALLOWANCE_S)
        deadline = min(
            min(p.lease_until for p in pending) - allowance,
            min(p.finished_at for p in pending) + timedelta(seconds=self.HOLD_S),
        )
        if self._time_left_s is not None:
            end = self._services.clock.now() + timedelta(seconds=self._time_left_s())
            deadline = min(deadline, end - allowance)
        return deadline

    def _guard_pending(self) -> None:
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
            self._scheduled = (deadline, self._timer(delay_s, self._commit_on_time))

    def _commit_on_time(self) -> None:
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
                instance = services.instances.get_instance(instance_id)
                self._reads[instance_id] = (time.monotonic(), instance)
                if instance is not None and instance.remaining == 0:
                    finalize(instance_id, services)
            except Exception as exc:  # as one by one: these messages come back
                log.warning("finalize failed", extra={"trace": traceback.format_exc()})
                for p in shards:
                    p.error = exc

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


#: The batch whose record runs on this thread (see `waiting_records`).
_RUNNING: ContextVar[ShardBatch | None] = ContextVar("running_batch", default=None)


def waiting_records() -> list[tuple[str, int]]:
    """Diagnostics for the handler running now: the records of its invocation not started yet
    (the chaos handler logs them as it kills its process, to measure how soon they run)."""
    batch = _RUNNING.get()
    return batch.waiting() if batch is not None else []


def run_shard(
    delivery: Delivery,
    services: Services,
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


def _run_shard(
    delivery: Delivery,
    message: ShardMessage,
    services: Services,
    worker: str,
    report: ShardReport,
    batch: ShardBatch,
) -> ShardOutcome | PendingShard:
    instance = batch.instance(message.instance_id)
    if instance is None:
        return ShardOutcome.NOT_STARTED  # never claimed: nothing to start
    if instance.status.final:
        # Cancelled or timed out: the shard is not started, and a lease left on it ends.
        return _left_lease(message, instance, services)
    now = services.clock.now()
    tuning = services.tuning
    # Short, and renewed while the attempt lives (LeaseRenewal); never longer than the attempt
    # may run before its first heartbeat.
    lease_s = min(tuning.shard_lease_s, message.timeout_s + tuning.lease_margin_s)
    lease = services.instances.take_lease(
        message.instance_id,
        message.shard,
        bounds=message.bounds,
        worker=worker,
        now=now,
        lease_until=now + timedelta(seconds=lease_s),
        max_attempts=message.max_attempts,
        # The lease enters the index with its first renewal; until then the message's hold (one
        # `shard_lease_s`) covers a death. A lease shorter than that hold (a short `timeout_s`)
        # is indexed at once, so that the sweeper takes it over when it ends, not the hold.
        indexed=lease_s < tuning.shard_lease_s,
    )
    if not lease.taken:
        verdict = decide_lease(lease.shard, now=now, max_attempts=message.max_attempts)
        if verdict is LeaseVerdict.EXHAUSTED:
            return end_exhausted(lease.shard, services, now, retention_days=instance.retention_days)
        if verdict is LeaseVerdict.BUSY:
            _index_young_lease(lease.shard, services)
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
    # The attempt before this one was lost: its worker died (or hung) and its lease expired.
    attempts = lease.shard.attempts
    report.taken_over = len(attempts) > 1 and attempts[-2].outcome is AttemptOutcome.LOST
    cancel = _CancelWatch(message.instance_id, services)
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
    renewing: Cancellable | None = batch.renewals(renewal)
    try:
        result = _attempt(
            delivery,
            message,
            services,
            report,
            batch,
            attempt,
            renewal,
            cancel,
            timer,
            retention_days=instance.retention_days,
        )
        if isinstance(result, PendingShard):
            result.renewing, renewing = renewing, None  # renewed until its commit settles
        return result
    finally:
        if renewing is not None:
            renewing.cancel()


def _attempt(
    delivery: Delivery,
    message: ShardMessage,
    services: Services,
    report: ShardReport,
    batch: ShardBatch,
    attempt: Attempt,
    renewal: LeaseRenewal,
    cancel: _CancelWatch,
    timer: AttemptTimer,
    *,
    retention_days: int,
) -> ShardOutcome | PendingShard:
    """Run the handler of an attempt that holds the lease; leave its final write pending."""
    ctx = _context(
        message,
        attempt,
        services,
        renewal,
        cancel,
        timer,
        lambda: batch.commit(block=False),  # a heartbeat never waits for a commit under way
        retention_days=retention_days,
    )
    error: str | None = None
    handler = services.handlers.get(message.handler)
    timed_out = False
    result: Mapping[str, Any] | None = None
    try:
        if handler is None:
            raise LookupError(f"no handler named {message.handler!r} in this deployment")
        with timer.running():
            result = handler(ctx)
        result = _checked_result(result)
    except StaleAttemptError:
        return ShardOutcome.STALE
    except AttemptTimeoutError as exc:
        timed_out = True
        error = str(exc)
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"[:MAX_ERROR_CHARS]
        log.warning("shard attempt failed", extra={"error": error, "trace": traceback.format_exc()})
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
    ended = services.clock.now()
    done = attempt.model_copy(
        update={
            "ended_at": ended,
            "duration_ms": int((ended - attempt.started_at).total_seconds() * 1000),
            "outcome": AttemptOutcome(status.value),
            "error": error,
            "keys": ctx.keys[:LISTED_KEYS],
            "key_count": len(ctx.keys),
        }
    )
    report.duration_ms = done.duration_ms
    try:
        retryable = status in (ShardStatus.FAILED, ShardStatus.TIMED_OUT)
        if retryable and attempt.number < message.max_attempts:
            services.instances.release_shard(
                message.instance_id,
                message.shard,
                attempt=done,  # failed or timed_out; the shard goes back to pending
            )
            # Only an attempt that still held the shard (the fenced release passed) may delay
            # the message: a zombie's old receipt must not touch it.
            batch.retry_later(delivery, message, attempt.number)
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


def _left_lease(
    message: ShardMessage, instance: InstanceRecord, services: Services
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
        _index_young_lease(shard, services)
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


def _index_young_lease(shard: ShardRecord, services: Services) -> None:
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


def _retry_later(
    delivery: Delivery, message: ShardMessage, attempt: int, services: Services
) -> None:
    """Hide the message for the backoff (0: at once), counted from now, then report failure."""
    delay = backoff_delay_s(attempt, message.backoff_s)
    try:
        services.queue.extend_visibility(delivery.receipt_handle, delay)
    except Exception:  # the default visibility timeout still brings the message back
        log.warning("could not set the retry backoff", extra={"trace": traceback.format_exc()})


MAX_RESULT_BYTES = 32 * 1024


class ResultTooLargeError(ValueError):
    """A partial result too large for the execution record."""


def _checked_result(result: object) -> Mapping[str, Any] | None:
    """A handler's partial result: a small JSON object (large results belong in S3 under a
    key the handler derives from the instance and shard, with only that key returned here)."""
    if result is None:
        return None
    if not isinstance(result, Mapping):
        raise TypeError(f"a handler returns a mapping or None, not {type(result).__name__}")
    size = len(json.dumps(result, default=str))
    if size > MAX_RESULT_BYTES:
        raise ResultTooLargeError(
            f"partial result of {size} bytes exceeds {MAX_RESULT_BYTES}; write it to object "
            "storage and return its key"
        )
    stored: dict[str, Any] = json.loads(json.dumps(result, default=str))  # JSON-safe, as stored
    return stored


class AttemptTimeoutError(Exception):
    """The handler ran past the task's `timeout_s`."""


class AttemptTimer:
    """The per-attempt timeout: interrupts the handler `seconds` after the last heartbeat.

    `timeout_s` bounds the time between signs of life, not the whole attempt: a long shard that
    heartbeats keeps its lease, its message's visibility and its timer together. Uses SIGALRM,
    so it applies where Lambda runs handlers: the main thread. Elsewhere (tests that run shards
    on threads) it does nothing; the lease still expires and fences the attempt.
    """

    def __init__(self, seconds: int) -> None:
        self.seconds = seconds
        self._armed = False
        self._stale = False
        self._deferring = False  # scheduler code runs on the handler's thread (`deferred`)
        self._owed = False  # the alarm went off meanwhile: raised once that code returns
        # `interrupt` (another thread) and the disarming never interleave: an alarm set after
        # the handler's own was restored would reach the previous handler (by default, the
        # process's end).
        self._arming = threading.Lock()

    def extend(self) -> None:
        """Restart the countdown (called by `ctx.heartbeat()`)."""
        if self._armed and not self._stale:
            signal.setitimer(signal.ITIMER_REAL, self.seconds)

    def interrupt(self) -> None:
        """Stop the handler at once with StaleAttemptError: its attempt lost the shard (a
        refused lease renewal, on the renewal's thread). Where the timer does not apply (not
        on the main thread) the handler sees `ctx.cancelled()` and refused writes instead."""
        with self._arming:
            self._stale = True
            if self._armed:
                signal.setitimer(signal.ITIMER_REAL, 0.001)

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """Hold the interruption (stale or timed out) back while the scheduler's own code runs
        on the handler's thread (a heartbeat's commit of the batch's finished shards): raised
        in there, it would be caught as that code's failure, and the shards that committed
        reported unwritten while the handler goes on. It is raised when the block ends."""
        self._deferring = True
        try:
            yield
        except BaseException:
            with self._arming:
                self._deferring = False
                if self._owed and self._armed:  # after the block's own error, at once
                    signal.setitimer(signal.ITIMER_REAL, 0.001)
                self._owed = False
            raise
        with self._arming:
            self._deferring = False
            owed, self._owed = self._owed and self._armed, False
        if owed:
            raise self._interruption()

    def _interruption(self) -> Exception:
        if self._stale:
            return StaleAttemptError("the attempt lost its lease: another attempt took over")
        return AttemptTimeoutError(f"attempt ran past timeout_s={self.seconds} without a heartbeat")

    @contextmanager
    def running(self) -> Iterator[None]:
        """Arm the timer around the handler call."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        seconds = self.seconds

        def expire(signum: int, frame: object) -> None:
            if not self._armed:  # a late signal after the handler returned
                return
            if self._deferring:
                self._owed = True
                return
            raise self._interruption()

        outer_delay, _ = signal.getitimer(signal.ITIMER_REAL)  # an enclosing timer, if any
        started = time.monotonic()
        previous = signal.signal(signal.SIGALRM, expire)
        with self._arming:
            self._armed = True
            # interrupted before it started: it stops at once
            signal.setitimer(signal.ITIMER_REAL, 0.001 if self._stale else seconds)
        try:
            yield
        finally:
            with self._arming:
                self._armed = False
                signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
            if outer_delay > 0:  # give the enclosing timer back what is left of it
                left = outer_delay - (time.monotonic() - started)
                signal.setitimer(signal.ITIMER_REAL, max(left, 0.001))


def run_ids(instance_id: str, services: Services) -> list[str]:
    """Every run up to `instance_id`'s, oldest first (the first run, then `~run2`, ...)."""
    instance = services.instances.get_instance(instance_id)
    if instance is None or instance.rerun_of is None:
        return [instance_id]
    return [instance.rerun_of] + [f"{instance.rerun_of}~run{n}" for n in range(2, instance.run + 1)]


class _CancelWatch:
    """Answers `ctx.cancelled()`: reads the instance at most once a second."""

    INTERVAL_S = 1.0

    def __init__(self, instance_id: str, services: Services) -> None:
        self._instance_id = instance_id
        self._services = services
        self._checked = float("-inf")
        self.seen = False
        self.stale = False  # the attempt lost its lease: stop (its writes are refused anyway)

    def __call__(self) -> bool:
        if self.seen or self.stale:
            return True
        if time.monotonic() - self._checked >= self.INTERVAL_S:
            self._checked = time.monotonic()
            instance = self._services.instances.get_instance(self._instance_id)
            self.seen = instance is None or instance.status.final
        return self.seen


def end_exhausted(
    shard: ShardRecord,
    services: Services,
    now: datetime,
    *,
    status: ShardStatus = ShardStatus.TIMED_OUT,
    error: str = "lease expired with no attempts left",
    retention_days: int | None = None,
) -> ShardOutcome:
    """End a shard whose lease expired with its worker gone, fenced on that last attempt.

    timed_out when no attempt is left (a later delivery of its message, or the sweeper);
    cancelled when its instance has ended meanwhile (the sweeper). The record expires after
    its instance's retention (`retention_days`, read from the instance when not given).
    """
    ended = shard.attempts[-1].lost(now)  # the shard ends `status`; its attempt was lost
    if retention_days is None:
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
    if result.remaining == 0:
        finalize(shard.instance_id, services)
    return ShardOutcome(status.value)


def _context(
    message: ShardMessage,
    attempt: Attempt,
    services: Services,
    renewal: LeaseRenewal,
    cancelled: Callable[[], bool],
    timer: AttemptTimer,
    commit_pending: Callable[[], object],
    *,
    retention_days: int,
) -> ShardContext:
    def heartbeat() -> datetime:
        if renewal.lost:
            raise StaleAttemptError(
                f"{message.instance_id} shard {message.shard}: attempt {attempt.number} lost "
                "the lease"
            )
        now = services.clock.now()
        renewal.beat(now)
        renewal.heartbeat(now)  # fenced where it writes: a zombie learns it there
        timer.extend()
        # A handler that heartbeats may run past the leases of the batch's finished shards:
        # their completions commit now rather than after it.
        with timer.deferred():
            commit_pending()
        return now + timedelta(seconds=message.timeout_s)

    def partials() -> list[dict[str, Any]]:
        if not message.reduce:
            raise RuntimeError("partials() is for a task's reduce handler")
        # Oldest run first, so that a rerun's result replaces the one it re-did.
        latest: dict[int, ShardRecord] = {}
        for run_id in run_ids(message.instance_id, services):
            for s in services.instances.list_shards(run_id):
                if s.index != message.shard and s.status is ShardStatus.SUCCEEDED:
                    latest[s.index] = s
        return [
            {"shard": s.index, "bounds": s.bounds, "result": s.result}
            for s in sorted(latest.values(), key=lambda s: s.index)
        ]

    claimed = [0]  # keys this attempt claimed: the first LISTED_KEYS go on its record

    # An effect key outlives the task's retention if need be: while a copy of the shard's
    # message can still come back, the key must be there to stop the effect running again.
    effect_days = max(retention_days, EFFECT_RETENTION_FLOOR_DAYS)

    def record_effect(key: str, writes: tuple[Mapping[str, Any], ...]) -> bool:
        done = services.instances.record_effect(
            key,
            instance_id=message.instance_id,
            index=message.shard,
            attempt=attempt.number,
            writes=writes,
            listed=claimed[0] < LISTED_KEYS,
            expires_at=services.clock.now() + timedelta(days=effect_days),
        )
        claimed[0] += done
        return done

    return ShardContext(
        instance_id=message.instance_id,
        task_id=message.task_id,
        tenant=message.tenant,
        shard=message.shard,
        bounds=message.bounds,
        params=message.params,
        business_date=message.business_date,
        data_interval_start=message.data_interval_start,
        data_interval_end=message.data_interval_end,
        attempt=attempt.number,
        deadline=attempt.started_at + timedelta(seconds=message.timeout_s),
        worker=attempt.worker if attempt.worker else "",
        _heartbeat=heartbeat,
        _record_effect=record_effect,
        _cancelled=cancelled,
        _partials=partials,
    )
