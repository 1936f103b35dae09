"""The worker's time on a manual clock, for benchmarks that run shards longer than they wait:
its timers and lease renewals fire as the clock is advanced past them, and its modules'
`time.monotonic()` follows that clock."""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any


class VirtualTimers:
    """Timers and lease renewals on a manual clock: they fire as `advance` moves it past them
    (in time order, each with the clock at its instant), as the worker's threads would."""

    def __init__(self, clock: Any) -> None:
        self.clock = clock
        self._events: list[tuple[datetime, int, Callable[[], object]]] = []
        self._seq = itertools.count()

    def _at(self, delay_s: float, call: Callable[[], object]) -> None:
        when = self.clock.now() + timedelta(seconds=delay_s)
        heapq.heappush(self._events, (when, next(self._seq), call))

    def timer(self, delay_s: float, call: Callable[[], object]) -> Any:
        """As `work.thread_timer`: `call` once after `delay_s`, unless cancelled."""
        stop = threading.Event()
        self._at(delay_s, lambda: None if stop.is_set() else call())
        return _Stop(stop)

    def renewals(self, renewal: Any) -> Any:
        """As `work.thread_renewals`: `renewal.step()` every delay it returns, until cancelled."""
        stop = threading.Event()

        def step() -> None:
            if stop.is_set():
                return
            delay = renewal.step()
            if delay is not None and not stop.is_set():
                self._at(delay, step)

        self._at(renewal.interval_s, step)
        return _Stop(stop)

    def advance(self, seconds: float) -> None:
        """Move the clock `seconds` on, firing what falls due on the way."""
        target = self.clock.now() + timedelta(seconds=seconds)
        while self._events and self._events[0][0] <= target:
            when, _n, call = heapq.heappop(self._events)
            self.clock.set(max(when, self.clock.now()))
            call()
        self.clock.set(target)

    def clear(self) -> None:
        self._events.clear()


class _Stop:
    def __init__(self, stop: threading.Event) -> None:
        self._stop = stop

    def cancel(self) -> None:
        self._stop.set()


class _VirtualMonotonic:
    """`time` as the worker's modules see it: monotonic() follows the manual clock."""

    def __init__(self, clock: Any) -> None:
        self._clock = clock
        self._base = time.monotonic()
        self._t0 = clock.now()

    def monotonic(self) -> float:
        elapsed: float = (self._clock.now() - self._t0).total_seconds()
        return self._base + elapsed

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


@contextmanager
def virtual_worker_time(clock: Any) -> Iterator[None]:
    from iotsched.services.execution import (
        handler_context,
        reads,
        timer,
    )

    # the worker's modules that read `time.monotonic()`: the shared instance reads, the
    # cancel watch and the attempt timer
    modules = (reads, handler_context, timer)
    virtual = _VirtualMonotonic(clock)
    for module in modules:
        setattr(module, "time", virtual)  # noqa: B010 - the module's own name, swapped
    try:
        yield
    finally:
        for module in modules:
            setattr(module, "time", time)  # noqa: B010
