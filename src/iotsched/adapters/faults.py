"""Fault injection for chaos runs: real process deaths at chosen points.

Enabled only by settings (IOTSCHED_FAULT_KILL_AFTER_CLAIM); production never sets them.
"""

from __future__ import annotations

import os
import random
import signal


class ProcessKillFaults:
    """SIGKILLs its own process after a claim with the given probability."""

    def __init__(self, kill_after_claim: float, *, seed: int | None = None) -> None:
        self._p = kill_after_claim
        self._random = random.Random(seed)

    def after_claim(self, instance_id: str) -> None:
        """Die between the claim and the send of its shard messages, sometimes."""
        if self._random.random() < self._p:
            os.kill(os.getpid(), signal.SIGKILL)

    def at(self, point: str, instance_id: str) -> None:
        """No deaths at the other points."""
