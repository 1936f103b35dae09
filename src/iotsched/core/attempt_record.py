"""One attempt at a shard (`Attempt`): who ran it, when, how it ended (`AttemptOutcome`), the
effect keys it claimed and its log."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import Field, field_validator

from iotsched.core.logs import AttemptLog
from iotsched.core.value_types import Frozen


class AttemptOutcome(StrEnum):
    """How one attempt at a shard ended (null while it runs). The shard's status says what
    follows: `pending` again when attempts are left after `failed` or `timed_out`.

    - `succeeded`: the handler returned (set by the worker).
    - `failed`: the handler raised (set by the worker).
    - `timed_out`: the handler ran past `timeout_s` and was interrupted (set by the worker).
    - `cancelled`: the instance ended while the attempt ran; the handler saw
      `ctx.cancelled()` (set by the worker).
    - `lost`: the worker stopped renewing its lease (it died or hung) and the lease expired;
      set when the next attempt took the shard over, or when the sweeper or a later delivery
      ended the shard (`ended_at`: then); or its message was dead-lettered while it ran (set
      by the DLQ handler, error `dead_lettered`).
    """

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"
    LOST = "lost"


#: The error of an attempt closed `lost` by a takeover.
LOST_ERROR = "lease expired: the worker stopped renewing it"


#: Effect keys an attempt lists on its record (`Attempt.keys`); `key_count` counts them all.
#: Every effect is in the ledger (`EFFECT#<key>`, naming instance, shard and attempt); the
#: shard record stays small however many effects a shard has.
LISTED_KEYS = 20


class Attempt(Frozen):
    """One attempt at a shard: who ran it, when, and how it ended."""

    number: int = Field(ge=1)
    worker: str
    started_at: datetime
    ended_at: datetime | None = None
    duration_ms: int | None = None
    outcome: AttemptOutcome | None = None  # None while the attempt runs
    error: str | None = None
    keys: list[str] = Field(default_factory=list)  # its first LISTED_KEYS effect keys
    key_count: int | None = None  # every effect key it claimed (None: it never ended)
    # What its handler logged: the last lines, and where the whole log is (None: nothing).
    log: AttemptLog | None = None
    # The distribution its handler came from, and its version (None: a handler given
    # in-process, or one that was not found): what ran, beside the task's version.
    package: str | None = None
    version: str | None = None

    @property
    def keys_claimed(self) -> int:
        """How many effect keys it claimed (those listed, if it never ended)."""
        return len(self.keys) if self.key_count is None else max(self.key_count, len(self.keys))

    @field_validator("outcome", mode="before")
    @classmethod
    def _legacy(cls, value: Any) -> Any:
        # Records written before `failed` and `timed_out` named retried attempts too.
        return AttemptOutcome.FAILED if value == "released" else value

    def lost(self, at: datetime, error: str = LOST_ERROR) -> Attempt:
        """This attempt closed as `lost` at `at`: its lease expired without a renewal."""
        return self.model_copy(
            update={
                "ended_at": at,
                "duration_ms": max(0, int((at - self.started_at).total_seconds() * 1000)),
                "outcome": AttemptOutcome.LOST,
                "error": error,
            }
        )
