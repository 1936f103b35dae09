"""What flows between the worker's parts: a delivery, what handling it amounted to (its
outcome and report), and a shard whose final write waits for its batch's commit."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from iotsched.ports.shards import ShardCompletion
from iotsched.services.wiring import Cancellable


class ShardOutcome(StrEnum):
    """What handling one message amounted to (the message is acknowledged in every case)."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"  # the final attempt failed: the shard ended failed
    TIMED_OUT = "timed_out"  # an expired lease with no attempts left was ended
    CANCELLED = "cancelled"  # the instance ended while the shard ran; the handler stopped
    NOT_STARTED = "not_started"  # the instance had already ended: nothing ran
    DUPLICATE = "duplicate"  # finished, or under a live lease: nothing ran
    STALE = "stale"  # this attempt lost its lease while running; its writes were refused
    GIVEN_BACK = "given_back"  # not started, the invocation nearly out of time: a copy was sent
    DEFERRED = "deferred"  # not started: its rate or window; a delayed copy was sent


#: Outcomes after which the shard (or its instance) is final: no delivery will run it again, so
#: its message may be deleted through any receipt (`ShardBatch.may_acknowledge`).
SHARD_ENDED = frozenset(
    {
        ShardOutcome.SUCCEEDED,
        ShardOutcome.FAILED,
        ShardOutcome.TIMED_OUT,
        ShardOutcome.CANCELLED,
        ShardOutcome.NOT_STARTED,
    }
)


class RetryShardError(Exception):
    """The attempt failed and attempts remain: report a batch item failure so SQS redelivers."""


@dataclass(frozen=True)
class Delivery:
    """One received message, as the event source mapping hands it over."""

    body: str
    receipt_handle: str
    receive_count: int = 1


@dataclass
class ShardReport:
    """What handling one message did, for the worker function's metrics.

    The services ring publishes no metrics itself (no Powertools here): `run_shard` fills the
    report its caller hands in, and the function layer turns it into EMF.
    """

    outcome: ShardOutcome | None = None  # None: the message raised (retry, malformed)
    attempt: int = 0  # the attempt this message ran (0: none ran)
    duration_ms: int | None = None  # the handler's run, when one ran to an end
    retried: bool = False  # the attempt failed with attempts left: released for a retry
    taken_over: bool = False  # this attempt took the lease of one that never ended
    given_back: bool = False  # not started, the invocation nearly out of time (sent back, or
    # made visible again at once where sending a copy failed)


class GivenBackError(Exception):
    """The message was not started, the invocation being about to run out of time, and no copy
    of it could be sent: it was made visible again at once (a batch item failure)."""


class CompletionNotWrittenError(Exception):
    """The shard finished but its final write did not commit (contention, an AWS error): the
    message must come back; its next delivery finds the shard final, or fenced and retaken."""


@dataclass
class PendingShard:
    """A shard whose attempt ended and whose final write waits for its batch's commit.

    `CompletionBuffer.commit` sets `outcome` (the status written, or STALE when the attempt had
    lost its fence), or `error` when the write did not commit: then the message must come back.
    """

    delivery: Delivery
    completion: ShardCompletion
    report: ShardReport
    lease_until: datetime
    outcome: ShardOutcome | None = None
    error: Exception | None = None
    renewing: Cancellable | None = None  # the lease's renewal, stopped once the commit settled
    trace: str | None = None  # its attempt span's carrier: the completion's span is a child

    def stop_renewing(self) -> None:
        """The attempt is over (its final write settled): its lease is no longer renewed."""
        if self.renewing is not None:
            self.renewing.cancel()
            self.renewing = None

    @property
    def finished_at(self) -> datetime:
        """When its attempt ended (the start of its wait for the commit)."""
        ended = self.completion.attempt.ended_at
        assert ended is not None, "a pending shard's attempt has ended"
        return ended
