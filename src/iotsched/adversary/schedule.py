"""The adversary's fault schedule: what it injects, and when.

`AdversaryConfig` sets the rates of the seeded schedule; a `Fault` is one scripted fault.
`FaultSchedule` makes each decision (throttle, cancel, lose a response, hold items in flight)
from scripted faults first, then from one `random.Random(seed)` drawn in request order: given
the seed and the order of requests, the decisions are the same. It counts what it injects in
the tally it is given. Not thread-safe: the middleware calls it under its own lock.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from typing import Any

from iotsched.adversary.limits import MAX_ITEM_BYTES
from iotsched.adversary.protocol import WriteAction

#: The codes the random schedule draws from (ValidationError only by script or by the limits:
#: a random one would fail a valid request for good, which DynamoDB never does).
RANDOM_CANCEL_CODES = ("TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded")


@dataclass(frozen=True)
class AdversaryConfig:
    """Rates of the seeded schedule (probabilities per request) and the in-flight hold.

    Attributes:
        seed: the schedule's seed.
        cancel_rate: a TransactWriteItems is cancelled with one of `cancel_codes`.
        cancel_codes: the codes a random cancellation draws from.
        throttle_rate: a single write is throttled (ProvisionedThroughputExceededException).
        burst_rate: a throttle repeats the same request 2..`max_burst` times in a row.
        max_burst: the longest burst (keep under botocore's 10 attempts).
        lose_rate: a write that landed has its response replaced by HTTP 500.
        hold_s: (min, max) seconds a transaction holds its items in flight before it commits.
        max_item_bytes: the item size limit (DynamoDB's 400 KB; lower only to test the
            mechanism below moto's own, looser, check).
    """

    seed: int = 0
    cancel_rate: float = 0.0
    cancel_codes: tuple[str, ...] = RANDOM_CANCEL_CODES
    throttle_rate: float = 0.0
    burst_rate: float = 0.0
    max_burst: int = 4
    lose_rate: float = 0.0
    hold_s: tuple[float, float] = (0.0, 0.0)
    max_item_bytes: int = MAX_ITEM_BYTES

    @classmethod
    def moderate(cls, seed: int = 0) -> AdversaryConfig:
        """A fault rate a run can live with while every kind still shows up."""
        return cls(
            seed=seed,
            cancel_rate=0.15,
            throttle_rate=0.1,
            burst_rate=0.2,
            max_burst=3,
            lose_rate=0.05,
            hold_s=(0.0, 0.02),
        )


@dataclass
class Fault:
    """One scripted fault: the next `times` requests of `op` that touch an item whose `pk`
    starts with `pk_prefix` get `kind` ("cancel" with `code` at that action's index,
    "throttle", or "lose_response")."""

    op: str
    kind: str
    code: str = "ThrottlingError"
    pk_prefix: str = ""
    times: int = 1


class FaultSchedule:
    """The scripted faults, the seeded random draws and the throttle bursts under way."""

    def __init__(self, config: AdversaryConfig, tally: Counter[str]) -> None:
        self.config = config
        self._tally = tally
        self._random = random.Random(config.seed)
        self._script: list[Fault] = []
        self._bursts: dict[str, int] = {}  # request digest -> throttles still to repeat

    def restart(self, config: AdversaryConfig) -> None:
        """`config`'s seed's sequence from the start, no scripts and no bursts."""
        self.config = config
        self._random = random.Random(config.seed)
        self._script.clear()
        self._bursts.clear()

    def add(self, faults: tuple[Fault, ...]) -> None:
        self._script.extend(faults)

    def throttle(self, op: str, digest: str, actions: list[WriteAction]) -> bool:
        """Whether this single write is throttled (a burst repeats the same request)."""
        if self._bursts.get(digest, 0) > 0:
            self._bursts[digest] -= 1
            self._tally["throttled"] += 1
            return True
        scripted = self._take_script(op, ("throttle",), actions)
        if scripted is not None:
            self._tally["throttled"] += 1
            self._tally["throttled_by_script"] += 1
            return True
        if self._random.random() >= self.config.throttle_rate:
            return False
        self._tally["throttled"] += 1
        if self.config.max_burst > 1 and self._random.random() < self.config.burst_rate:
            self._bursts[digest] = self._random.randint(2, self.config.max_burst) - 1
            self._tally["throttle_bursts"] += 1
        return True

    def lose(self, op: str, actions: list[WriteAction]) -> bool:
        """Whether the response of this write, if it lands, is lost."""
        if self._take_script(op, ("lose_response",), actions) is not None:
            return True
        return self._random.random() < self.config.lose_rate

    def cancel(self, actions: list[WriteAction]) -> tuple[int, str] | None:
        """The (action index, reason code) this transaction is cancelled with, if any."""
        scripted = self._take_script("TransactWriteItems", ("cancel",), actions)
        if scripted is not None:
            fault, index = scripted
            return index, fault.code
        if not actions or self._random.random() >= self.config.cancel_rate:
            return None
        index = self._random.randrange(len(actions))
        return index, self._random.choice(self.config.cancel_codes)

    def hold_seconds(self) -> float:
        """How long a transaction holds its items in flight before it commits."""
        low, high = self.config.hold_s
        return self._random.uniform(low, high) if high > 0 else 0.0

    def _take_script(self, op: str, kinds: tuple[str, ...], actions: list[WriteAction]) -> Any:
        for fault in self._script:
            if fault.op != op or fault.kind not in kinds:
                continue
            match = [a for a in actions if a.pk().startswith(fault.pk_prefix)]
            if actions and not match:
                continue
            if not actions and fault.pk_prefix:
                continue
            fault.times -= 1
            if fault.times <= 0:
                self._script.remove(fault)
            return fault, (match[0].index if match else 0)
        return None
