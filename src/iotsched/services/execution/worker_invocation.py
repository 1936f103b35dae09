"""One shard worker invocation, from its records' first run to its answer (`WorkerInvocation`),
and the metrics each message's report comes to (`shard_metrics`).

A record is a batch item failure when its body is malformed, its attempt failed with attempts
left, or its shard finished but its final write did not commit; every other outcome, duplicates
included, is acknowledged. A finished shard is acknowledged only once `settle` committed it, and
a record whose visibility hold lapsed is deleted only where its shard is final. Metrics go to the
caller's `publish`: the entry point turns them into its metrics document.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from iotsched.services.end_tally import EndTally
from iotsched.services.execution.batch import ShardBatch
from iotsched.services.execution.outcomes import (
    Delivery,
    PendingShard,
    ShardOutcome,
    ShardReport,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Metric:
    """One value of an invocation's metrics."""

    name: str
    value: float
    unit: Literal["Count", "Milliseconds"] = "Count"


#: The count metric each final outcome adds to (timeouts count as failures too).
OUTCOME_METRICS: dict[ShardOutcome, tuple[str, ...]] = {
    ShardOutcome.SUCCEEDED: ("ShardsSucceeded",),
    ShardOutcome.FAILED: ("ShardsFailed",),
    ShardOutcome.TIMED_OUT: ("ShardsFailed", "ShardsTimedOut"),
    ShardOutcome.CANCELLED: ("ShardsCancelled",),
    ShardOutcome.DUPLICATE: ("DuplicateDeliveries",),
    ShardOutcome.STALE: ("StaleAttempts",),
    ShardOutcome.NOT_STARTED: ("ShardsNotStarted",),
    ShardOutcome.GIVEN_BACK: ("ShardsGivenBack",),
    ShardOutcome.DEFERRED: ("ShardStartsDeferred",),
}


def shard_metrics(report: ShardReport) -> list[Metric]:
    """One message's metrics: its outcome's counts, a retry, a takeover, a give-back, and the
    handler's duration when it ran to an end."""
    names = list(OUTCOME_METRICS.get(report.outcome, ())) if report.outcome else []
    if report.retried:
        names.append("ShardsRetried")
    if report.taken_over:
        names.append("ShardsTakenOver")
    if report.given_back and report.outcome is None:  # made visible again, not sent back
        names.append("ShardsGivenBack")
    found = [Metric(name, 1) for name in names]
    if report.duration_ms is not None:
        found.append(Metric("ShardDuration", report.duration_ms, "Milliseconds"))
    return found


class WorkerInvocation:
    """One invocation's batch and what its records came to; built per invocation.

    `begin` with every record, `run` each (raising reports it a batch item failure), `settle`
    once all ran, and `end` whatever happened (a failed invocation still writes what finished).
    """

    def __init__(
        self, batch: ShardBatch, *, ends: EndTally, publish: Callable[[Metric], None]
    ) -> None:
        self.batch = batch
        self._ends = ends
        self._publish = publish
        # by message id: the finished shards, until the commit settles them; the records
        # acknowledged, with their receipt and outcome
        self.pending: dict[str, PendingShard] = {}
        self.acknowledged: dict[str, tuple[str, ShardOutcome]] = {}

    def begin(self, deliveries: Sequence[Delivery]) -> None:
        """The invocation's records, before any runs (see `ShardBatch.expect`)."""
        self.batch.expect(deliveries)

    def run(self, message_id: str, delivery: Delivery) -> str:
        """Handle one record; raising reports it as a batch item failure.

        A shard that finished is left pending ("pending"): `settle` commits it with the others
        of the batch, then reports it (and publishes its metrics).
        """
        report = ShardReport()
        try:
            outcome = self.batch.run(delivery, report=report)
        except Exception:
            self.publish(report)
            raise
        if isinstance(outcome, PendingShard):
            self.pending[message_id] = outcome
            return "pending"
        self.publish(report)
        _warn_if_stale(outcome, message_id)
        self.acknowledged[message_id] = (delivery.receipt_handle, outcome)
        return outcome.value

    def settle(self, failures: Sequence[str]) -> list[str]:
        """Commit the batch's pending completions; the records to report as batch item
        failures: `failures` (those whose run raised), then the pending ones not written, then
        those whose visibility hold lapsed before their shard was final."""
        batch = self.batch
        batch.commit()
        failed = list(failures)
        acknowledged = dict(self.acknowledged)
        for message_id, shard in self.pending.items():
            self.publish(shard.report)
            if shard.error is not None or shard.outcome is None:
                log.warning(
                    "shard completion not written: the message comes back",
                    extra={"message_id": message_id, "error": str(shard.error)},
                )
                failed.append(message_id)
            else:
                _warn_if_stale(shard.outcome, message_id)
                acknowledged[message_id] = (shard.delivery.receipt_handle, shard.outcome)
        # Last, as the answer goes back: a record whose visibility hold lapsed is deleted only
        # where its shard is final (see ShardBatch.may_acknowledge); otherwise it is left alone.
        for message_id, (receipt, outcome) in acknowledged.items():
            if not batch.may_acknowledge(receipt, outcome):
                log.warning(
                    "visibility hold lapsed: the record is left to the queue, not deleted",
                    extra={"message_id": message_id, "outcome": outcome.value},
                )
                failed.append(message_id)
        return failed

    def end(self) -> None:
        """The invocation is over: the batch's timers off and what finished committed, then
        the instances this invocation ended published, each end counted once (`EndTally`)."""
        self.batch.end()
        for name, value in self._ends.drain().items():
            self._publish(Metric(name, value))

    def publish(self, report: ShardReport) -> None:
        """Publish one message's metrics."""
        for metric in shard_metrics(report):
            self._publish(metric)


def _warn_if_stale(outcome: ShardOutcome, message_id: str) -> None:
    if outcome is ShardOutcome.STALE:
        log.warning("stale attempt: lease taken over", extra={"message_id": message_id})
