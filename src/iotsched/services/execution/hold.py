"""The visibility of an invocation's records, kept short while it runs (`VisibilityHold`).

It takes `QueuePorts`: the queue it holds messages on and the clock.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from datetime import datetime, timedelta

from iotsched.services.execution.renewal import call_within
from iotsched.services.port_sets import QueuePorts

log = logging.getLogger(__name__)


class VisibilityHold:
    """Keeps the messages of an invocation on a short visibility until it ends.

    The event source hands an invocation up to `WorkerBatchSize` records, each hidden for the
    queue's visibility timeout (30 minutes by default). A record that has not started holds no
    lease, and one that started holds a lease that is not in the lease index before its first
    renewal (the sweeper cannot see it), so if the worker dies, nothing but that timeout would
    bring either back. Instead, every record of the invocation (the one being run as the
    others, a lone record as several) is hidden for `seconds` (one lease) at its start, and
    again every third of that while the invocation runs (one ChangeMessageVisibilityBatch per
    10 records, with its own timeout, retried every tenth when it fails): a worker that dies
    stops renewing and its records reappear within a lease, for another worker to take. A
    record whose visibility is set otherwise (a retry's backoff, a completion not written, a
    record made visible at once) is `release`d first.

    A hold may lapse while the worker lives (its renewals failed for a whole lease): the
    message may then be received by another consumer, and the receipt this invocation holds is
    no longer the message's current one. On SQS a delete through an older receipt can still
    delete the message another consumer holds, so a lapsed record is acknowledged only where
    its shard is known final (`ShardBatch.may_acknowledge`); its visibility is never touched
    again; a retry it needs goes by a fresh copy (`ShardBatch.retry_later`).
    """

    def __init__(self, services: QueuePorts, receipt_handles: Sequence[str], seconds: int) -> None:
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
