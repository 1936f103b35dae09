"""DLQ handler Lambda: SQS batch from the shard DLQ (see iotsched.services.execution.dead_letters)."""

from __future__ import annotations

import functools
import json
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

from iotsched.bootstrap import build
from iotsched.services.execution.dead_letters import handle_dead_letter
from iotsched.services.wiring import Wiring
from iotsched.settings import Settings

# The package's logger, whatever POWERTOOLS_SERVICE_NAME (the stack's name: the metrics'
# `service`) says: what `iotsched.*` modules log comes out through it.
logger = Logger(service="iotsched")
metrics = Metrics()
tracer = Tracer()  # X-Ray (Tracing: Active): the invocation's subsegment
processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)


@functools.cache
def services() -> Wiring:
    """Built on the first invocation, reused while the container is warm."""
    return build(Settings.from_env())


def record_handler(record: SQSRecord) -> str:
    """End the dead-lettered shard; raising (a store error) retries the record."""
    svc = services()
    # A child of the span that sent the message (its body carries it, under the local tracer).
    with svc.tracer.span("dead_letter", parent=_trace_of(record.body)):
        outcome = handle_dead_letter(record.body, svc)
    metrics.add_metric(name="DeadLetters", unit=MetricUnit.Count, value=1)
    for name, value in svc.ends.drain().items():  # a dead letter may end its instance
        metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)
    logger.warning("dead-lettered shard message", extra={"outcome": outcome})
    return outcome


def _trace_of(body: str) -> str | None:
    try:
        trace = json.loads(body).get("trace")
    except (ValueError, AttributeError):
        return None
    return trace if isinstance(trace, str) else None


@metrics.log_metrics(raise_on_empty_metrics=False)
@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Entry point (Handler: app.lambda_handler)."""
    response: dict[str, Any] = dict(
        process_partial_response(
            event=event, record_handler=record_handler, processor=processor, context=context
        )
    )
    return response
