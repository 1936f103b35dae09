"""The effect ledger port: a handler's side effect keys, each recorded once, fenced on the
shard attempt that records it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from iotsched.ports.store_errors import WriteRejectedError


class EffectConditionError(WriteRejectedError):
    """A condition of an effect's own writes (`ctx.once(key, writes=[...])`) failed: nothing was
    written, the key stays unclaimed. `index` is the failed write's position in `writes`."""

    def __init__(self, message: str, *, index: int) -> None:
        super().__init__(message)
        self.index = index


class EffectLedger(Protocol):
    """Effect keys: what a handler did, once per key whatever the redeliveries."""

    def record_effect(
        self,
        key: str,
        *,
        instance_id: str,
        index: int,
        attempt: int,
        writes: Sequence[Mapping[str, Any]] = (),
        listed: bool = True,
        expires_at: datetime | None = None,
    ) -> bool:
        """Record effect `key` once, fenced on the attempt; `listed`: and list it on that
        attempt's record (the worker lists an attempt's first `LISTED_KEYS` keys; the shard
        record never grows with the rest). `expires_at`: when the key may be deleted (TTL),
        after any redelivery of the shard's message could come back.

        `writes` (TransactWriteItems entries on the scheduler's table) commit in the same
        transaction. Returns False if any earlier run already recorded the key (nothing is
        written). Nothing is written either when it raises: StaleAttemptError if `attempt` no
        longer holds the shard (a zombie); EffectConditionError if a condition of `writes`
        failed; StoreContendedError if contention or throttling outlasted the retries;
        WriteRejectedError if the store refused the request (an item too large, ...).
        """
        ...
