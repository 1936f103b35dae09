"""An attempt's lease, renewed while the attempt lives (`LeaseRenewal`), and the bounded call
every renewal makes (`call_within`).

It takes `ClockedInstancePorts`: the lease it extends and the clock.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta

from iotsched.ports.shards import StaleAttemptError
from iotsched.services.port_sets import ClockedInstancePorts

log = logging.getLogger(__name__)


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
      and a message's visibility is no part of failover (the sweeper sends a fresh one for
      an expired lease).
    """

    def __init__(
        self,
        services: ClockedInstancePorts,
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
