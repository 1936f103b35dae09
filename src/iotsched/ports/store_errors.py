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
