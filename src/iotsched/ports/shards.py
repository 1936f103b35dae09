"""The shard ports: leases on shard records (fenced on the attempt number) and their final
writes, each counted once in its instance's remaining-shard counter."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

from iotsched.core.attempt_record import Attempt
from iotsched.core.shard_record import (
    ShardRecord,
    ShardStatus,
)


class StaleAttemptError(Exception):
    """A write conditioned on an attempt number found another attempt (or a final shard)."""


@dataclass(frozen=True)
class LeaseResult:
    """The answer to a lease request.

    `taken` is True when this caller now holds attempt `shard.attempt`; otherwise `shard` is
    what the store holds (finished, busy under a live lease, or exhausted).
    """

    taken: bool
    shard: ShardRecord


class ShardLeases(Protocol):
    """Shard records: leases taken, renewed and released, and the readers of shards."""

    def take_lease(
        self,
        instance_id: str,
        index: int,
        *,
        bounds: dict[str, object],
        worker: str,
        now: datetime,
        lease_until: datetime,
        max_attempts: int,
        indexed: bool = False,
    ) -> LeaseResult:
        """Take shard `index` per `iotsched.core.decisions.decide_lease`, in one conditional write.

        On success the record has attempt + 1, owner `worker`, `lease_until`, status running and
        a new open entry in `attempts`. The new attempt's lease is listed by `expired_leases`
        from the first move of its end on (`extend_lease`), or at once if `indexed`.
        """
        ...

    def extend_lease(
        self,
        instance_id: str,
        index: int,
        *,
        attempt: int,
        until: datetime,
        was: datetime | None = None,
    ) -> None:
        """Move the lease deadline; raises StaleAttemptError if `attempt` lost the lease, or if
        `was` is given and the deadline is no longer `was` (a renewal since it was read)."""
        ...

    def release_shard(self, instance_id: str, index: int, *, attempt: Attempt) -> None:
        """End a failed attempt that will be retried: status pending, lease cleared.

        Fenced on `attempt.number`; raises StaleAttemptError if another attempt took over.
        """
        ...

    def give_back_lease(self, taken: ShardRecord) -> None:
        """Undo the take that returned `taken`, whose handler never ran (its start was fenced
        out or could not be checked): the shard is as before the take, pending, the attempt's
        entry and number gone (a previous attempt the take closed `lost` stays so), so a wait
        uses up none of the shard's attempts; a first attempt's record is deleted (there was
        none before it). The attempt's own writes are refused from then on
        (they need it running).

        Fenced on the take itself (its attempt, owner and lease end, as `taken` holds them), not
        on the attempt number alone, which a give-back makes come round again: a give-back sent
        again after a new take of the same number leaves that take alone. Raises
        StaleAttemptError if the shard is no longer as the take left it.
        """
        ...

    def expired_leases(self, now: datetime, *, limit: int = 1000) -> list[ShardRecord]:
        """Running shards whose lease ended at or before `now`, oldest first."""
        ...

    def get_shard(self, instance_id: str, index: int) -> ShardRecord | None:
        """One shard's record (a consistent read), or None if no attempt has touched it."""
        ...

    def list_shards(self, instance_id: str) -> list[ShardRecord]:
        """Shard records that exist (an attempt has touched them), by index."""
        ...


@dataclass(frozen=True)
class CompletionResult:
    """The instance's counters right after a shard's final write."""

    remaining: int
    failed_shards: int
    unrun_shards: int = 0


@dataclass(frozen=True)
class ShardCompletion:
    """One shard's final write, as `ShardCompletions.complete_shards` takes it."""

    instance_id: str
    index: int
    status: ShardStatus
    attempt: Attempt  # the ended attempt: the write is fenced on its number
    error: str | None = None
    result: Mapping[str, Any] | None = None
    expires_at: datetime | None = None  # when the record may be deleted (TTL); None: never


class CompletionVerdict(StrEnum):
    """What became of one completion of `ShardCompletions.complete_shards`."""

    COMMITTED = "committed"  # the shard is final and its instance's counter counts it
    STALE = "stale"  # the attempt lost its fence (a zombie): nothing changed for it
    UNWRITTEN = "unwritten"  # not written for now (contention, throttling): try again later


class ShardCompletions(Protocol):
    """A shard's final write with its instance's counter: completions and dead letters."""

    def complete_shard(
        self,
        instance_id: str,
        index: int,
        *,
        status: ShardStatus,
        attempt: Attempt,
        error: str | None = None,
        result: Mapping[str, Any] | None = None,
        expires_at: datetime | None = None,
    ) -> CompletionResult:
        """Write the shard's final status (and partial result) and decrement the counter.

        Both writes are one transaction, fenced on `attempt.number`: a zombie attempt whose lease
        was taken over raises StaleAttemptError and changes nothing. `expires_at`: when the
        record may be deleted (its instance's retention), written with the final status.
        """
        ...

    def complete_shards(self, completions: Sequence[ShardCompletion]) -> list[CompletionVerdict]:
        """`complete_shard` for the finished shards of one worker batch, in few requests.

        Each shard's final write is fenced on its attempt as in `complete_shard`; each instance's
        counter is decremented once by the number of its shards written (`failed_shards` raised
        by those not succeeded), in the same transaction as those shards: a counter never counts
        a shard that is not final, nor one twice. Returns a verdict per completion, in order. A
        shard may appear once. The caller reads the instances afterwards to learn `remaining`.
        """
        ...

    def dead_letter_shard(
        self,
        instance_id: str,
        index: int,
        *,
        bounds: dict[str, object],
        max_attempts: int,
        error: str,
        now: datetime,
        expires_at: datetime | None = None,
    ) -> CompletionResult | None:
        """End a shard whose message went to the DLQ as failed, whatever its state short of final
        (`expires_at` written with it, as in `complete_shard`).

        The shard write and the counter decrement are one transaction. An attempt still running
        is closed `lost` (error `error`, ended `now`) in the same write, fenced on its number.
        Returns None if the shard had already ended (a duplicate DLQ delivery): nothing changes.
        """
        ...
