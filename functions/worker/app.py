"""Shard worker Lambda: an SQS batch of shard messages, with ReportBatchItemFailures.

What a record comes to, and which records come back: `iotsched.services.execution.
worker_invocation`; its metrics, one EMF document per invocation: `iotsched.lambdas.worker`.
"""

from __future__ import annotations

import os
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType
from aws_lambda_powertools.utilities.typing import LambdaContext

from iotsched.lambdas.container import Container
from iotsched.lambdas.worker import handle_shard_batch, route_handler_logs
from iotsched.settings import handler_environment

# The deployment's settings for its handlers, exported before any handler is imported (a
# malformed value fails the container's start with the reason).
os.environ.update(handler_environment())

logger = Logger(service="iotsched")  # the package's logger: `iotsched.*` modules log through it
metrics = Metrics()
tracer = Tracer()  # X-Ray: the invocation's subsegment, holding each record's attempt span
container = Container()
route_handler_logs(logger)


@metrics.log_metrics(raise_on_empty_metrics=False)
@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Entry point (Handler: app.lambda_handler)."""
    processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)
    return handle_shard_batch(event, context, container, processor, metrics=metrics, logger=logger)
