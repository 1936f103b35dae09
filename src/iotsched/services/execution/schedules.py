"""What runs the worker's timers and renewals: daemon threads in a function, or a test's hand
(`HeldRenewals`, stepped on its manual clock)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol

from iotsched.services.execution.hold import VisibilityHold
from iotsched.services.execution.renewal import LeaseRenewal
from iotsched.services.wiring import Cancellable


def thread_timer(delay_s: float, call: Callable[[], object]) -> Cancellable:
    """Run `call` on a daemon thread after `delay_s` seconds, unless cancelled first."""
    timer = threading.Timer(delay_s, call)
    timer.daemon = True
    timer.start()
    return timer


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
