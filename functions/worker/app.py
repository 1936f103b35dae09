"""Shard worker Lambda: SQS batch with ReportBatchItemFailures.

Each record is one shard message. A record fails (and comes back after the visibility timeout,
then goes to the DLQ after maxReceiveCount) when its body is malformed, its attempt failed with
attempts left, or its shard finished but the final write did not commit; every other outcome,
duplicates included, is acknowledged.

The records of one invocation run one by one in a `ShardBatch`, built per invocation with
the `Invocation` that holds what its records came to; `Invocation.record_handler` leaves the
final write of each shard that finished pending, and `settle` commits them together (one
transaction, one decrement per instance, one read per instance) after the BatchProcessor has
seen every record and before the response goes back (or earlier, from the batch's timer, when a
long shard runs after finished ones: see `ShardBatch`): a pending record is acknowledged only
once its completion committed, and becomes a batch item failure if it did not.
`COMMIT_ALLOWANCE_S` before the function's timeout the batch gives the records it has not
started back (a fresh copy of each sent, the original acknowledged) instead of leaving the
timeout to strand them for a visibility timeout. While an attempt lives, a daemon thread renews
its short lease (IOTSCHED_SHARD_LEASE_S, see `LeaseRenewal`); another keeps every record's
message, the running one's included, on a visibility of one lease until the invocation returns
(`VisibilityHold`), so that a worker's death brings its batch back within a lease (a lease is
in the sweeper's index only from its first renewal on). Every renewal
stops before the invocation returns. A record whose hold lapsed (its renewals failed for a
whole lease) is deleted only if its shard is final: otherwise it is reported as a failure,
which leaves the message (perhaps another consumer's by now) alone.

Metrics (EMF, namespace POWERTOOLS_METRICS_NAMESPACE, one document per invocation), from the
`ShardReport` each message fills (the services ring publishes nothing itself):
ShardsSucceeded, ShardsFailed (final failures, timeouts included), ShardsTimedOut, ShardsRetried
(an attempt failed with attempts left), ShardsTakenOver (a lease taken from an attempt that never
ended: a dead or hung worker), ShardsCancelled, DuplicateDeliveries, StaleAttempts,
ShardsNotStarted, ShardsGivenBack (not started, the invocation about to run out of time: sent
back to the queue), ShardStartsDeferred (not started yet: its rollout rate or maintenance window;
a delayed copy was sent), and ShardDuration (milliseconds, one value per attempt that ran to an end).
Per invocation, the instances it ended (the last shard's completion, an abort):
InstancesSucceeded, InstancesFailed, InstancesAborted, each end counted once (`publish_ends`).
"""

from __future__ import annotations

import functools
import json
import logging
import os
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from iotsched.bootstrap import build, receiving_from
from iotsched.services.execution.batch import ShardBatch
from iotsched.services.execution.capture import (
    HANDLER_LOGGER,
    LogStream,
    current_keys,
)
from iotsched.services.execution.outcomes import (
    Delivery,
    PendingShard,
    ShardOutcome,
    ShardReport,
)
from iotsched.services.wiring import Wiring
from iotsched.settings import Settings, handler_environment

# The deployment's settings for its handlers (HandlerEnvironment), exported before any handler
# is imported: handlers read them as plain environment variables. A malformed value fails the
# container's start with the reason, rather than running handlers without their settings.
os.environ.update(handler_environment())

# Per process, by Powertools' design: the logger's keys are cleared and the metrics flushed at
# each invocation's end by the decorators on `lambda_handler`.
# The package's logger, whatever POWERTOOLS_SERVICE_NAME (the stack's name: the metrics'
# `service`) says: what `iotsched.*` modules log comes out through it.
logger = Logger(service="iotsched")
metrics = Metrics()
# X-Ray (Tracing: Active): the invocation's subsegment, holding each record's attempt span
# (docs/design.md, section 16).
tracer = Tracer()


class _AttemptKeys(logging.Filter):
    """Stamps the attempt a line's thread runs (instance, shard, attempt) on the worker's
    JSON lines, so that the record's Logs Insights query selects them."""

    def filter(self, record: logging.LogRecord) -> bool:
        keys = current_keys(record.thread) if record.thread is not None else None
        if keys is not None:
            for name in ("instance_id", "shard", "attempt"):
                if not hasattr(record, name):
                    setattr(record, name, getattr(keys, name))
        return True


# `ctx.log`'s lines go out as the worker's JSON lines, with the attempt's keys.
logger.registered_handler.addFilter(_AttemptKeys())
_handler_log = logging.getLogger(HANDLER_LOGGER)
_handler_log.handlers = [logger.registered_handler]
_handler_log.propagate = False


@functools.cache
def settings() -> Settings:
    """Read once per container."""
    return Settings.from_env()


@functools.cache
def services() -> Wiring:
    """Built on the first invocation, reused while the container is warm (its clients keep
    their connections)."""
    return build(settings())


class Invocation:
    """One invocation's batch and what its records came to; built per invocation."""

    def __init__(self, batch: ShardBatch) -> None:
        self.batch = batch
        # by message id: the finished shards, until the commit settles them; the records
        # acknowledged, with their receipt and outcome
        self.pending: dict[str, PendingShard] = {}
        self.acknowledged: dict[str, tuple[str, ShardOutcome]] = {}

    def record_handler(self, record: SQSRecord) -> str:
        """Handle one shard message; raising reports it as a batch item failure.

        A shard that finished is left pending ("pending"): `settle` commits it with the others
        of the batch, then reports it (and publishes its metrics).
        """
        logger.set_correlation_id(_instance_id(record.body))
        delivery = _delivery(record)
        report = ShardReport()
        try:
            outcome = self.batch.run(delivery, report=report)
        except Exception:
            publish(report)
            raise
        if isinstance(outcome, PendingShard):
            self.pending[record.message_id] = outcome
            return "pending"
        publish(report)
        _warn_if_stale(outcome, record.message_id)
        self.acknowledged[record.message_id] = (delivery.receipt_handle, outcome)
        return outcome.value

    def settle(self, response: dict[str, Any]) -> dict[str, Any]:
        """Commit the batch's pending completions; add those not written to batchItemFailures."""
        batch = self.batch
        batch.commit()
        failures = list(response.get("batchItemFailures", []))
        acknowledged = dict(self.acknowledged)
        for message_id, shard in self.pending.items():
            publish(shard.report)
            if shard.error is not None or shard.outcome is None:
                logger.warning(
                    "shard completion not written: the message comes back",
                    extra={"message_id": message_id, "error": str(shard.error)},
                )
                failures.append({"itemIdentifier": message_id})
            else:
                _warn_if_stale(shard.outcome, message_id)
                acknowledged[message_id] = (shard.delivery.receipt_handle, shard.outcome)
        # Last, as the response goes back: a record whose visibility hold lapsed is deleted
        # only where its shard is final (see ShardBatch.may_acknowledge); otherwise it is left
        # alone.
        for message_id, (receipt, outcome) in acknowledged.items():
            if not batch.may_acknowledge(receipt, outcome):
                logger.warning(
                    "visibility hold lapsed: the record is left to the queue, not deleted",
                    extra={"message_id": message_id, "outcome": outcome.value},
                )
                failures.append({"itemIdentifier": message_id})
        return {**response, "batchItemFailures": failures}


def _delivery(record: SQSRecord) -> Delivery:
    return Delivery(
        body=record.body,
        receipt_handle=record.receipt_handle,
        receive_count=int(record.attributes.approximate_receive_count or 1),
    )


def _warn_if_stale(outcome: ShardOutcome, message_id: str) -> None:
    if outcome is ShardOutcome.STALE:
        logger.warning("stale attempt: lease taken over", extra={"message_id": message_id})


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


def publish(report: ShardReport) -> None:
    """Add one message's metrics to this invocation's EMF document."""
    names = list(OUTCOME_METRICS.get(report.outcome, ())) if report.outcome else []
    if report.retried:
        names.append("ShardsRetried")
    if report.taken_over:
        names.append("ShardsTakenOver")
    if report.given_back and report.outcome is None:  # made visible again, not sent back
        names.append("ShardsGivenBack")
    for name in names:
        metrics.add_metric(name=name, unit=MetricUnit.Count, value=1)
    if report.duration_ms is not None:
        metrics.add_metric(
            name="ShardDuration", unit=MetricUnit.Milliseconds, value=report.duration_ms
        )


def _instance_id(body: str) -> str | None:
    """The instance a message names, for log correlation; None for a malformed body."""
    try:
        value = json.loads(body).get("instance_id")
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


@metrics.log_metrics(raise_on_empty_metrics=False)
@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Entry point (Handler: app.lambda_handler)."""
    records = event.get("Records", [])
    # One event source mapping per shard queue: a batch comes from one queue, whose receipt
    # handles its visibility changes must use.
    source = records[0].get("eventSourceARN") if records else None
    invocation = Invocation(
        ShardBatch(
            receiving_from(services(), source),
            worker=settings().worker_id,
            time_left_s=lambda: context.get_remaining_time_in_millis() / 1000,
            log_stream=LogStream(
                getattr(context, "log_group_name", None), getattr(context, "log_stream_name", None)
            ),
        )
    )
    invocation.batch.expect([_delivery(SQSRecord(r)) for r in event.get("Records", [])])
    try:
        response: dict[str, Any] = dict(
            process_partial_response(
                event=event,
                record_handler=invocation.record_handler,
                processor=BatchProcessor(
                    event_type=EventType.SQS, raise_on_entire_batch_failure=False
                ),
                context=context,
            )
        )
        return invocation.settle(response)
    finally:
        invocation.batch.end()  # a failed invocation still writes what finished (if any)
        publish_ends(services())


def publish_ends(svc: Wiring) -> None:
    """Add the instances this invocation ended, by status, to its EMF document: counted where
    the write that ended each one was made (`iotsched.services.end_tally`), not per shard."""
    for name, value in svc.ends.drain().items():
        metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)
