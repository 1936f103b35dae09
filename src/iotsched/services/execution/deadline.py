"""The invocation's deadline: how long it may still run, and when its records not yet started
go back to the queue (`InvocationDeadline`).

It takes `QueuePorts`: the queue it gives messages back to and the clock.
"""

from __future__ import annotations

import logging
import threading
import traceback
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from iotsched.core.shard_message import ShardMessage
from iotsched.services.execution.outcomes import (
    Delivery,
    GivenBackError,
    ShardOutcome,
)
from iotsched.services.port_sets import QueuePorts
from iotsched.services.wiring import Cancellable

log = logging.getLogger(__name__)

#: Seconds before the invocation runs out by which its finished shards are committed and its
#: records not started are given back (and before a pending lease ends, its commit).
COMMIT_ALLOWANCE_S = 10


class InvocationDeadline:
    """Gives an invocation's records not started back before the function's timeout.

    Given the invocation's records (`arm`) and its time left, a timer fires
    `COMMIT_ALLOWANCE_S` before the invocation runs out: it gives the records not yet started
    back (a fresh copy of each goes to the queue, one send for all, and `may_start` answers
    `GIVEN_BACK` for the original, which is acknowledged), so another invocation takes the
    shard at once and its receive count starts again (a record given back time after time must
    not reach the DLQ without having run), then calls `on_close` (the batch commits what is
    pending). Where the send fails, the record is made visible again at once instead and fails
    (`GivenBackError`). Without this the function timeout would strand those records for a
    whole visibility timeout (30 minutes by default). The first record always starts, and a
    function shorter than the allowance gives nothing back. A copy and its original both alive
    (a crash between the send and the acknowledgement) are two deliveries of one shard: the
    lease lets one run.
    """

    def __init__(
        self,
        services: QueuePorts,
        *,
        parse: Callable[[str], ShardMessage],
        time_left_s: Callable[[], float] | None,
        timer: Callable[[float, Callable[[], object]], Cancellable],
        release: Callable[[str], bool],
        on_close: Callable[[], None],
    ) -> None:
        """`release(receipt)` stops a record's visibility hold before its visibility is set
        otherwise (False: the record must be left alone)."""
        self._services = services
        self._parse = parse
        self._time_left_s = time_left_s
        self._timer = timer
        self._release = release
        self._on_close = on_close
        self._lock = threading.Lock()
        self._closing_timer: Cancellable | None = None
        self._closing = False  # the invocation is about to run out: nothing more starts
        self._closed = threading.Event()  # the closing timer's records have gone back
        self._unstarted: dict[str, Delivery] = {}  # expected records not started, by receipt
        self._sent_back: set[str] = set()  # a copy was sent: acknowledge the original
        self._given_back: set[str] = set()  # made visible again: report a failure
        self._started = 0

    def ends(self) -> datetime | None:
        """When the invocation runs out of time (None: not known)."""
        if self._time_left_s is None:
            return None
        return self._services.clock.now() + timedelta(seconds=self._time_left_s())

    def arm(self, deliveries: Sequence[Delivery]) -> None:
        """The invocation's records: those not started by `COMMIT_ALLOWANCE_S` before its end
        go back to the queue."""
        if self._time_left_s is None:
            return
        delay_s = self._time_left_s() - COMMIT_ALLOWANCE_S
        if delay_s <= 0:
            return  # a function this short gives nothing back
        with self._lock:
            self._unstarted.update((d.receipt_handle, d) for d in deliveries)
        self._closing_timer = self._timer(delay_s, self._close)

    def end(self) -> None:
        """The invocation is over: call the closing timer off, or wait for it where it has
        begun giving records back (a frozen sandbox must not hold them)."""
        if self._closing_timer is not None:
            self._closing_timer.cancel()
        if self._closing:
            self._closed.wait(COMMIT_ALLOWANCE_S)

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
        self._on_close()

    def _send_back(self, deliveries: Sequence[Delivery]) -> None:
        """A fresh copy of each to the queue, or where that fails, visible again at once.

        A malformed body is left alone: `ShardBatch.run` reports it failed, as any other time.
        """
        parsed: list[tuple[Delivery, ShardMessage]] = []
        for d in deliveries:
            try:
                parsed.append((d, self._parse(d.body)))
            except Exception:  # noqa: S112 - left to `ShardBatch.run`, which reports it
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

    def may_start(self, delivery: Delivery) -> ShardOutcome | None:
        """None: start it; GIVEN_BACK: a copy went to the queue (acknowledge this one);
        raises GivenBackError where it was made visible again instead."""
        handle = delivery.receipt_handle
        with self._lock:
            if not self._closing:
                self._unstarted.pop(handle, None)
                self._started += 1
                return None
        self._closed.wait(COMMIT_ALLOWANCE_S)  # the closing timer may be sending it
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
            # back: its parse fails in `ShardBatch.run`)
            self._unstarted.pop(handle, None)
            self._started += 1
            return None
