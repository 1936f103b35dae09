"""DLQ handler Lambda: an SQS batch from the shard DLQ, each record's shard ended failed and
alerted (`iotsched.services.execution.dead_letters`)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType
from aws_lambda_powertools.utilities.typing import LambdaContext

from iotsched.lambdas.container import Container
from iotsched.lambdas.dlq import take_dead_letters

logger = Logger(service="iotsched")  # the package's logger: `iotsched.*` modules log through it
metrics = Metrics()
tracer = Tracer()  # X-Ray: the invocation's subsegment, holding each dead letter's span
processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)
container = Container()


@metrics.log_metrics(raise_on_empty_metrics=False)
@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Entry point (Handler: app.lambda_handler)."""
    return take_dead_letters(event, context, container, processor, metrics=metrics)
