"""One reading of a TransactWriteItems outcome, shared by every transactional write.

DynamoDB cancels a transaction as a whole and says why with one CancellationReasons entry per
action, in order. botocore does not retry a cancellation, so each caller must read it, and read
it the same way:

| reason code                                    | what it means                 | kind        |
|------------------------------------------------|-------------------------------|-------------|
| `None` (no code)                               | this action did not fail      | bystander   |
| `ConditionalCheckFailed`                       | this action's condition: "no" | condition   |
| `TransactionConflict`, `ThrottlingError`,      | "not now"                     | retry       |
| `ProvisionedThroughputExceeded`,               |                               |             |
| `RequestLimitExceeded`                         |                               |             |
| `ValidationError`, an item too large, anything | "never": sending it again     | invalid     |
| else                                           | cannot help                   |             |

The transaction's outcome: CONDITION_FAILED if any action's condition failed (`failed` names
them: a fact about the committed state, whatever the other actions say); else INVALID if any
action is invalid; else RETRY if any action is retryable (its bystanders with it). A
cancellation whose reasons do not match the actions one for one, or name no failing action,
cannot be read: INVALID. A request-level error is RETRY when it says "not now" (a conflict,
throttling, an internal error), INVALID otherwise.

`retrying` re-sends on RETRY with a fresh ClientRequestToken (the caller's `send` makes one per
call), a few rounds with capped, jittered backoff, then raises `StoreContendedError` rather
than guessing what happened.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from iotsched.ports.store_errors import StoreContendedError

CONDITION_FAILED_CODE = "ConditionalCheckFailed"
BYSTANDER_CODE = "None"
#: Cancellation reasons that say "not now" rather than "no".
RETRYABLE_REASONS = frozenset(
    {
        "TransactionConflict",
        "ThrottlingError",
        "ProvisionedThroughputExceeded",
        "RequestLimitExceeded",
    }
)
#: Request-level error codes that say "not now" (botocore retries most of them before we see
#: them; TransactionConflictException, on a single write to an item in a transaction, it does
#: not).
RETRYABLE_ERRORS = frozenset(
    {
        "TransactionConflictException",
        "TransactionInProgressException",
        "ThrottlingException",
        "ProvisionedThroughputExceededException",
        "RequestLimitExceeded",
        "InternalServerError",
        "ServiceUnavailable",
    }
)
#: Of those, the ones botocore's standard retry mode has already retried (10 tries, with
#: backoff) by the time the adapter sees them: the adapter lets them propagate rather than
#: multiply the wait.
RETRIED_BY_SDK = RETRYABLE_ERRORS - {"TransactionConflictException"}
CANCELLED = "TransactionCanceledException"

#: Rounds of `retrying` (the first try included) and the backoff's base and cap, in seconds.
ROUNDS = 8
BACKOFF_BASE_S = 0.025
BACKOFF_CAP_S = 1.0


class Kind(StrEnum):
    """What a transaction (or one of its actions) came to."""

    COMMITTED = "committed"  # written (for an action: did not fail, a bystander)
    CONDITION_FAILED = "condition_failed"  # a condition said no: see `failed`
    RETRY = "retry"  # contention or throttling: nothing written, send again
    INVALID = "invalid"  # refused as it is: sending it again cannot help


def reason_kind(code: str) -> Kind:
    """One action's cancellation reason code, read."""
    if code == BYSTANDER_CODE:
        return Kind.COMMITTED
    if code == CONDITION_FAILED_CODE:
        return Kind.CONDITION_FAILED
    if code in RETRYABLE_REASONS:
        return Kind.RETRY
    return Kind.INVALID


@dataclass(frozen=True)
class Outcome:
    """A TransactWriteItems outcome, read (see the module docstring)."""

    kind: Kind
    reasons: tuple[str, ...] = ()  # one code per action for a readable cancellation, else ()
    error: str | None = None  # the error code (None: committed)
    message: str = ""  # the error's message, for the errors raised from it
    cause: BaseException | None = field(default=None, compare=False)  # the error read, if any

    @property
    def failed(self) -> tuple[int, ...]:
        """The actions whose condition failed, by position."""
        return tuple(n for n, c in enumerate(self.reasons) if c == CONDITION_FAILED_CODE)

    def action(self, n: int) -> Kind:
        """Action `n`'s own reading (the whole request's kind when there are no reasons)."""
        return reason_kind(self.reasons[n]) if self.reasons else self.kind

    def describe(self) -> str:
        """The outcome in words, for errors and logs."""
        if self.kind is Kind.COMMITTED:
            return "committed"
        detail = f"{self.error}: {', '.join(self.reasons)}" if self.reasons else f"{self.error}"
        return f"{detail} ({self.message})" if self.message else detail


COMMITTED = Outcome(Kind.COMMITTED)


def classify(response: Mapping[str, Any] | None, actions: int) -> Outcome:
    """Read a TransactWriteItems outcome of `actions` actions: `response` is None if it
    committed, else the error response (botocore's `ClientError.response`)."""
    if response is None:
        return COMMITTED
    error = response.get("Error") or {}
    code = str(error.get("Code") or "")
    message = str(error.get("Message") or "")
    if code != CANCELLED:
        kind = Kind.RETRY if code in RETRYABLE_ERRORS else Kind.INVALID
        return Outcome(kind, error=code, message=message)
    entries = [r or {} for r in response.get("CancellationReasons") or []]
    reasons = tuple(str(r.get("Code") or BYSTANDER_CODE) for r in entries)
    # Each failing action's own message says what is wrong with it ("Item size has exceeded
    # the maximum allowed size"); the request's message only lists the codes.
    details = [
        f"action {n}: {r['Message']}"
        for n, r in enumerate(entries)
        if r.get("Message") and reasons[n] != BYSTANDER_CODE
    ]
    if details:
        message = "; ".join([message, *details]) if message else "; ".join(details)
    if len(reasons) != actions:
        return Outcome(Kind.INVALID, error=code, message=message or "reasons do not match")
    kinds = {reason_kind(c) for c in reasons}
    for kind in (Kind.CONDITION_FAILED, Kind.INVALID, Kind.RETRY):
        if kind in kinds:
            return Outcome(kind, reasons=reasons, error=code, message=message)
    return Outcome(Kind.INVALID, reasons=reasons, error=code, message=message or "no failed action")


def backoff_s(round_: int, *, cap_s: float | None = None) -> float:
    """The pause after round `round_` (from 0): jittered, doubling, capped."""
    cap = BACKOFF_CAP_S if cap_s is None else min(cap_s, BACKOFF_CAP_S)
    ceiling: float = min(cap, BACKOFF_BASE_S * 2.0**round_)
    return ceiling * (0.5 + random.random() / 2)  # jitter, not a secret


def retrying(
    send: Callable[[], Outcome],
    *,
    what: str,
    rounds: int = ROUNDS,
    sleep: Callable[[float], None] = time.sleep,
) -> Outcome:
    """`send()` until its outcome is not RETRY, at most `rounds` times (each call must use a
    fresh ClientRequestToken: a cancelled request is not a duplicate). Raises
    StoreContendedError when every round was RETRY."""
    outcome = COMMITTED
    for round_ in range(rounds):
        outcome = send()
        if outcome.kind is not Kind.RETRY:
            return outcome
        if round_ + 1 < rounds:
            sleep(backoff_s(round_))
    raise StoreContendedError(f"{what}: not written after {rounds} tries ({outcome.describe()})")
