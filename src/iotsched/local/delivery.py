"""The local runtime's clock and the deliveries of its schedule rules.

`DeliveryDriver` keeps the emulated clock (`now`, from `start_at` at `speed`); unless the clock
is manual, it delivers every rate(1 minute) rule (tick and sweep) each emulated minute, each
delivery on its own. `tick` delivers the tick rule's Scheduled Event to the tick function's
pool and waits for the bucket dispatches its fan-out sent (`BucketReports`); every invocation
and every tick's result is recorded.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from iotsched.core.timeutil import floor_minute
from iotsched.local.bucket_reports import BucketReports
from iotsched.local.processes import (
    FunctionPool,
    FunctionProcess,
    Invocation,
    InvocationError,
    RuntimeError_,
)
from iotsched.local.template import SWEEP_EVENT, TICK_EVENT


@dataclass
class TickResult:
    """One delivered tick, what the dispatcher reported, and the invocation that ran it."""

    at: datetime
    report: dict[str, Any]
    invocation: Invocation | None = None


class DeliveryDriver:
    """The emulated clock and the schedule rules' deliveries.

    Args:
        scheduled: schedule event name -> the environments of the function it invokes.
        dispatchers: the bucket dispatcher processes (their timeout bounds a tick's wait).
        bucket_reports: where the bucket dispatches settle.
        stopping: set when the runtime stops; the clock stops and late deliveries are dropped.
        stack: the stack name, in the rules' ARNs.
        speed: clock speed (60: a minute per second).
        start_at: the emulated clock's start.
        on_tick: told of each tick's result.
    """

    def __init__(
        self,
        scheduled: Mapping[str, FunctionPool],
        dispatchers: Callable[[], list[FunctionProcess]],
        bucket_reports: BucketReports,
        stopping: threading.Event,
        *,
        stack: str,
        speed: float,
        start_at: datetime,
        on_tick: Callable[[TickResult], None] | None = None,
    ) -> None:
        self._scheduled = scheduled
        self._dispatchers = dispatchers
        self._bucket_reports = bucket_reports
        self._stop = stopping
        self.stack = stack
        self.speed = speed
        self.start_at = start_at
        self.on_tick = on_tick
        self.ticks: list[TickResult] = []
        #: The newest invocations of the invoke-mode functions (dispatcher, sweeper).
        self.invocations: deque[Invocation] = deque(maxlen=10_000)
        self._t0 = time.monotonic()
        self._thread: threading.Thread | None = None

    # -- the clock ----------------------------------------------------------------------------

    def now(self) -> datetime:
        """The emulated clock."""
        elapsed = (time.monotonic() - self._t0) * self.speed
        return self.start_at + timedelta(seconds=elapsed)

    def start(self, *, manual: bool) -> None:
        """Start the clock at `start_at`; unless `manual`, deliver the rules every minute."""
        self._t0 = time.monotonic()
        if not manual:
            self._thread = threading.Thread(target=self._tick_loop, name="tick", daemon=True)
            self._thread.start()

    def join(self) -> None:
        """Once `stopping` is set: wait for the clock's thread to end."""
        if self._thread is not None:
            self._thread.join(5)

    # -- deliveries ---------------------------------------------------------------------------

    def tick(self, at: datetime, *, repeat: int = 1) -> list[TickResult]:
        """Deliver the tick rule's Scheduled Event for `at`, `repeat` times, and wait for the
        bucket dispatches of the messages each delivery sent.

        Repeated deliveries run concurrently, each on a tick process of its own (as duplicate
        EventBridge deliveries reach separate Lambda execution environments), and so do
        deliveries made by concurrent calls; their messages are taken by the bucket
        dispatcher's processes, as the dispatch queue's event source. Each result's report is
        its messages' bucket reports added up (`buckets_dispatched`, `buckets_absorbed` say
        how each message went; `outcomes`, each message's bucket, verdict and figures).
        Raises InvocationError if a bucket dispatch failed or its process died (the message
        comes back later, as on AWS).
        """
        results = self.deliver(TICK_EVENT, at, repeat=repeat)
        # A message waits at most for one overrunning dispatch ahead of it.
        timeout = 3 * max((p.fn.timeout_s for p in self._dispatchers()), default=60) + 30
        failures: list[str] = []
        for result in results:
            result.report, failed = self._bucket_reports.gather(result.report, timeout)
            failures += failed
        if failures:
            assert results[0].invocation is not None
            raise InvocationError(f"bucket dispatch failed: {failures[0]}", results[0].invocation)
        self.ticks.extend(results)
        if self.on_tick:
            for result in results:
                self.on_tick(result)
        return results

    def sweep(self, at: datetime | None = None, *, replay: bool = False) -> dict[str, Any]:
        """Deliver the sweep rule's event once; returns the sweeper's report.

        The sweeper sweeps at its own clock's now (as on AWS); with `replay` it sweeps at `at`
        (the event's `detail.now`), which a manual clock needs to end what is past a deadline
        on the replayed timeline.
        """
        detail = {"now": (at or self.now()).isoformat()} if replay else None
        (result,) = self.deliver(SWEEP_EVENT, at or self.now(), detail=detail)
        return result.report

    def deliver(
        self,
        event_name: str,
        at: datetime,
        *,
        repeat: int = 1,
        detail: Mapping[str, Any] | None = None,
    ) -> list[TickResult]:
        """Deliver schedule `event_name`'s Scheduled Event for `at`, `repeat` times at once.

        Each delivery is an invocation of its own (see `FunctionPool`); every invocation is
        recorded in `invocations`. Raises the first failed invocation's error once all ended.
        """
        pool = self._scheduled.get(event_name)
        if pool is None:
            raise RuntimeError_(f"no function has a Schedule event named {event_name!r}")
        event = scheduled_event(at, rule=f"{self.stack}-{pool.fn.logical_id}-{event_name}")
        if detail:
            event["detail"] = dict(detail)

        def one() -> TickResult:
            try:
                report, invocation = pool.invoke(event)
            except InvocationError as exc:
                self.invocations.append(exc.invocation)
                raise
            self.invocations.append(invocation)
            return TickResult(at=at, report=report or {}, invocation=invocation)

        if repeat == 1:
            return [one()]
        with ThreadPoolExecutor(max_workers=repeat) as threads:
            futures = [threads.submit(one) for _ in range(repeat)]
            wait(futures)
        return [future.result() for future in futures]

    # -- the clock's thread -------------------------------------------------------------------

    def _tick_loop(self) -> None:
        """Every emulated minute, deliver every rate(1 minute) schedule (tick and sweep)."""
        next_minute = floor_minute(self.now()) + timedelta(minutes=1)
        while not self._stop.is_set():
            now = self.now()
            if now >= next_minute:
                # Each rule delivers on its own: a slow invocation delays no other delivery
                # (the next minute's tick runs beside it, on another environment).
                for event_name in self._scheduled:
                    threading.Thread(
                        target=self._deliver_quietly,
                        args=(event_name, next_minute),
                        name=f"{event_name}@{next_minute:%H:%M}",
                        daemon=True,
                    ).start()
                next_minute += timedelta(minutes=1)
                continue
            wait = (next_minute - now).total_seconds() / self.speed
            self._stop.wait(min(max(wait, 0.01), 0.5))

    def _deliver_quietly(self, event_name: str, at: datetime) -> None:
        if self._stop.is_set():
            return
        try:
            if event_name == TICK_EVENT:
                self.tick(at)
            else:
                self.deliver(event_name, at)
        except RuntimeError_:
            pass  # the invocation is recorded with its error
        except Exception:
            # A delivery the stop overtook finds its process's pipes closed: nothing to report.
            # Ctrl-C reaches the function processes (one process group) as it reaches this one,
            # so such a failure can come a moment before this process sets its stop: it is
            # given that moment.
            if not self._stop.wait(STOP_NOTICE_S):
                raise


#: How long a failed scheduled delivery waits for a stop under way before it is reported.
STOP_NOTICE_S = 5.0


def scheduled_event(at: datetime, *, rule: str) -> dict[str, Any]:
    """The EventBridge Scheduled Event a rate(1 minute) rule delivers."""
    return {
        "version": "0",
        "id": f"local-{at.timestamp():.0f}",
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": "123456789012",
        "time": at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": "us-east-1",
        "resources": [f"arn:aws:events:us-east-1:123456789012:rule/{rule}"],
        "detail": {},
    }
