"""The attempt log port: where the whole log of an attempt is kept (the data bucket)."""

from __future__ import annotations

from typing import Protocol


class LogObjectError(Exception):
    """A log object could not be written or read (the store's error, as text)."""


class AttemptLogStore(Protocol):
    """Whole attempt logs, one object per attempt, by key (`iotsched.core.logs.object_key`).

    A key is written once, by the attempt that holds the shard's lease, before that attempt's
    final record write names it: a record never names a key whose write did not succeed.
    """

    def put(self, key: str, body: bytes) -> None:
        """Store `body` under `key` (replacing it). Raises LogObjectError when the store
        refused or did not answer: the caller records that the object is missing."""
        ...

    def get(self, key: str) -> bytes | None:
        """The object's body; None when there is no such object (expired, or never written).
        Raises LogObjectError for any other failure."""
        ...
