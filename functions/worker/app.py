"""Shard worker Lambda: SQS batch with ReportBatchItemFailures.

Each record is one shard message. A record fails (and comes back after the visibility timeout,
then goes to the DLQ after maxReceiveCount) when its body is malformed or its attempt failed with
attempts left; every other outcome, duplicates included, is acknowledged.

Metrics (EMF, namespace POWERTOOLS_METRICS_NAMESPACE, one document per invocation), from the
`ShardReport` that `run_shard` fills (the services ring publishes nothing itself):
ShardsSucceeded, ShardsFailed (final failures, timeouts included), ShardsTimedOut, ShardsRetried
(an attempt failed with attempts left), ShardsTakenOver (a lease taken from an attempt that never
ended: a dead or hung worker), ShardsCancelled, DuplicateDeliveries, StaleAttempts,
ShardsNotStarted, and ShardDuration (milliseconds, one value per attempt that ran to an end).
"""

from __future__ import annotations

import functools
import json
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from iotsched.bootstrap import build
from iotsched.services import Services
from iotsched.services.work import Delivery, ShardOutcome, ShardReport, run_shard
from iotsched.settings import Settings

logger = Logger()
metrics = Metrics()
processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)


@functools.cache
def settings() -> Settings:
    """Read once per container."""
    return Settings.from_env()


@functools.cache
def services() -> Services:
    """Built on the first invocation, reused while the container is warm."""
    return build(settings())


def record_handler(record: SQSRecord) -> str:
    """Handle one shard message; raising reports it as a batch item failure."""
    logger.set_correlation_id(_instance_id(record.body))
    delivery = Delivery(
        body=record.body,
        receipt_handle=record.receipt_handle,
        receive_count=int(record.attributes.approximate_receive_count or 1),
    )
    report = ShardReport()
    try:
        outcome = run_shard(delivery, services(), worker=settings().worker_id, report=report)
    finally:
        publish(report)
    if outcome is ShardOutcome.STALE:
        logger.warning("stale attempt: lease taken over", extra={"message_id": record.message_id})
    return outcome.value


#: The count metric each final outcome adds to (timeouts count as failures too).
OUTCOME_METRICS: dict[ShardOutcome, tuple[str, ...]] = {
    ShardOutcome.SUCCEEDED: ("ShardsSucceeded",),
    ShardOutcome.FAILED: ("ShardsFailed",),
    ShardOutcome.TIMED_OUT: ("ShardsFailed", "ShardsTimedOut"),
    ShardOutcome.CANCELLED: ("ShardsCancelled",),
    ShardOutcome.DUPLICATE: ("DuplicateDeliveries",),
    ShardOutcome.STALE: ("StaleAttempts",),
    ShardOutcome.NOT_STARTED: ("ShardsNotStarted",),
}


def publish(report: ShardReport) -> None:
    """Add one message's metrics to this invocation's EMF document."""
    names = list(OUTCOME_METRICS.get(report.outcome, ())) if report.outcome else []
    if report.retried:
        names.append("ShardsRetried")
    if report.taken_over:
        names.append("ShardsTakenOver")
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
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Entry point (Handler: app.lambda_handler)."""
    response: dict[str, Any] = dict(
        process_partial_response(
            event=event, record_handler=record_handler, processor=processor, context=context
        )
    )
    return response
