"""The errors any store write may raise: retry later (contended) or never (rejected).

Both guarantee that nothing was written. The errors of one aggregate live beside its port
(`StaleAttemptError` in `shards`, `EffectConditionError` in `effects`).
"""

from __future__ import annotations


class StoreContendedError(RuntimeError):
    """A write stayed contended or throttled through the store's bounded retries: nothing was
    written. Retryable: the caller fails this attempt (or this request) and tries again later."""


class WriteRejectedError(ValueError):
    """The store refused a write as invalid (a validation error, an item over 400 KB, a reason
    it does not know): nothing was written, and sending it again would not help."""


class UnreadableRecordError(ValueError):
    """A stored record this version cannot decode (written by another version, or by hand):
    `key` names it (`<pk> / <sk>`), `why` the decoder's complaint. Lists skip such a record
    and serve the rest; a read of that record alone raises this."""

    def __init__(self, key: str, why: str) -> None:
        super().__init__(f"stored record {key} cannot be read: {why}")
        self.key = key
        self.why = why
