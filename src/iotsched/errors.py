"""Errors a handler raises to say what should happen to its shard (public API, stable).

Any other exception fails the attempt and is retried while the task's `max_attempts` allow.
"""

from __future__ import annotations


class RetryShard(Exception):
    """Ask for another attempt of this shard: the attempt ends `failed` with this message and
    the shard is retried, after `delay_s` seconds if given (else the task's backoff), while
    `max_attempts` allow; past them the shard fails.

    Example: `raise RetryShard("device service busy", delay_s=60)`.
    """

    def __init__(self, message: str, *, delay_s: float | None = None) -> None:
        super().__init__(message)
        if delay_s is not None and not 0 <= delay_s <= 900:
            raise ValueError("RetryShard.delay_s is 0..900 seconds (an SQS message delay)")
        self.delay_s = delay_s


class FailShard(Exception):
    """Fail this shard now, without another attempt (bad input, a rule the data breaks): the
    attempt and the shard end `failed` with this message, whatever `max_attempts` says."""
