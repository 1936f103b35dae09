"""A shard's execution record (`ShardRecord`): its status, the lease an attempt holds, and the
attempts made at it."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import Field

from iotsched.core.attempt_record import Attempt
from iotsched.core.value_types import Frozen


class ShardStatus(StrEnum):
    """The status of one shard execution (final ones count against the instance's remaining
    shards and never change again).

    - `pending`: planned; no attempt holds it (none started yet, or the last attempt failed
      or timed out with attempts left: the next delivery of its message takes it).
    - `running`: an attempt holds the lease until `lease_until`.
    - `succeeded` (final): an attempt's handler returned.
    - `failed` (final): the last attempt's handler raised, or the message was dead-lettered
      (error `dead_lettered`).
    - `timed_out` (final): the last attempt ran past `timeout_s`, or its worker stopped
      renewing the lease with no attempt left.
    - `cancelled` (final): the instance ended (cancelled or timed out) before the shard did.
    """

    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"

    @property
    def final(self) -> bool:
        """True once the shard counted against the instance's remaining counter."""
        return self in FINAL_SHARD

    @property
    def failure(self) -> bool:
        """True for the ends the instance's `failed_shards` counts: failed and timed out (a
        cancel is the instance's end, not the shard's failure)."""
        return self is ShardStatus.FAILED or self is ShardStatus.TIMED_OUT


FINAL_SHARD = frozenset(
    {ShardStatus.SUCCEEDED, ShardStatus.FAILED, ShardStatus.TIMED_OUT, ShardStatus.CANCELLED}
)


class ShardRecord(Frozen):
    """The execution record of one shard of one instance."""

    instance_id: str
    index: int = Field(ge=0)
    bounds: dict[str, Any] = Field(default_factory=dict)
    status: ShardStatus
    attempt: int = Field(default=0, ge=0)
    max_attempts: int = Field(default=1, ge=1)
    owner: str | None = None
    lease_until: datetime | None = None
    attempts: list[Attempt] = Field(default_factory=list)
    error: str | None = None
    result: dict[str, Any] | None = None  # the handler's partial result, read by the reduce
    expires_at: datetime | None = None  # set by its final write: its instance's retention

    @property
    def keys_written(self) -> list[str]:
        """Effect keys written by all attempts, in order."""
        return [key for attempt in self.attempts for key in attempt.keys]

    @property
    def keys_count(self) -> int:
        """How many effect keys all attempts claimed (`keys_written` lists the first of each)."""
        return sum(attempt.keys_claimed for attempt in self.attempts)


def never_ran(shard: ShardRecord | None) -> bool:
    """True if no handler ever ran for the shard: no record, or pending with no attempt (every
    take given back). A running attempt may have touched devices before it died."""
    return shard is None or (shard.status is ShardStatus.PENDING and not shard.attempts)
