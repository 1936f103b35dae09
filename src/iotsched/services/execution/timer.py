"""The attempt's timeout, counted from its last sign of life (`AttemptTimer`)."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from iotsched.ports.shards import StaleAttemptError


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
