"""The shard worker function's glue: its SQS batch through Powertools' BatchProcessor into a
`WorkerInvocation` (which settles and commits it), the invocation's metrics into its EMF
document, and the attempt's keys on the function's JSON log lines.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import BatchProcessor, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from iotsched.bootstrap import receiving_from
from iotsched.lambdas.container import Container
from iotsched.services.execution.batch import ShardBatch
from iotsched.services.execution.capture import HANDLER_LOGGER, LogStream, current_keys
from iotsched.services.execution.outcomes import Delivery
from iotsched.services.execution.worker_invocation import Metric, WorkerInvocation


def handle_shard_batch(
    event: dict[str, Any],
    context: LambdaContext,
    container: Container,
    processor: BatchProcessor,
    *,
    metrics: Metrics,
    logger: Logger,
) -> dict[str, Any]:
    """Run the event's shard messages as one `WorkerInvocation` on the container's wiring; the
    answer names the records to deliver again (`batchItemFailures`)."""
    wiring = container.wiring()
    records = event.get("Records", [])
    # One event source mapping per shard queue: a batch comes from one queue, whose receipt
    # handles its visibility changes must use.
    source = records[0].get("eventSourceARN") if records else None
    invocation = WorkerInvocation(
        ShardBatch(
            receiving_from(wiring, source),
            worker=container.settings().worker_id,
            time_left_s=lambda: context.get_remaining_time_in_millis() / 1000,
            log_stream=LogStream(
                getattr(context, "log_group_name", None), getattr(context, "log_stream_name", None)
            ),
        ),
        ends=wiring.ends,
        publish=lambda metric: add_metric(metrics, metric),
    )

    def record_handler(record: SQSRecord) -> str:
        logger.set_correlation_id(_instance_id(record.body))
        return invocation.run(record.message_id, delivery_of(record))

    invocation.begin([delivery_of(SQSRecord(r)) for r in records])
    try:
        response: dict[str, Any] = dict(
            process_partial_response(
                event=event, record_handler=record_handler, processor=processor, context=context
            )
        )
        raised = [f["itemIdentifier"] for f in response.get("batchItemFailures", [])]
        failed = invocation.settle(raised)
        return {**response, "batchItemFailures": [{"itemIdentifier": m} for m in failed]}
    finally:
        invocation.end()


def delivery_of(record: SQSRecord) -> Delivery:
    """The shard message an SQS record delivers."""
    return Delivery(
        body=record.body,
        receipt_handle=record.receipt_handle,
        receive_count=int(record.attributes.approximate_receive_count or 1),
    )


def add_metric(metrics: Metrics, metric: Metric) -> None:
    """Add one of the invocation's metrics to its EMF document."""
    metrics.add_metric(name=metric.name, unit=MetricUnit(metric.unit), value=metric.value)


def _instance_id(body: str) -> str | None:
    """The instance a message names, for log correlation; None for a malformed body."""
    try:
        value = json.loads(body).get("instance_id")
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


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


def route_handler_logs(logger: Logger) -> None:
    """`ctx.log`'s lines go out as the worker's JSON lines (through `logger`), with the
    attempt's keys."""
    logger.registered_handler.addFilter(_AttemptKeys())
    handler_log = logging.getLogger(HANDLER_LOGGER)
    handler_log.handlers = [logger.registered_handler]
    handler_log.propagate = False
