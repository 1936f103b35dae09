"""The DLQ function's glue: its SQS batch through Powertools' BatchProcessor, each record a
dead letter taken (`iotsched.services.execution.dead_letter_invocation`), the counts into the
invocation's EMF document."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Metrics
from aws_lambda_powertools.utilities.batch import BatchProcessor, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from iotsched.lambdas.container import Container
from iotsched.lambdas.emf import add_counts
from iotsched.services.execution.dead_letter_invocation import take_dead_letter


def take_dead_letters(
    event: dict[str, Any],
    context: LambdaContext,
    container: Container,
    processor: BatchProcessor,
    *,
    metrics: Metrics,
) -> dict[str, Any]:
    """End each record's shard; a record that raised (a store error) comes back."""

    def record_handler(record: SQSRecord) -> str:
        run = take_dead_letter(record.body, container.wiring())
        add_counts(metrics, run.counts)
        return run.outcome

    response: dict[str, Any] = dict(
        process_partial_response(
            event=event, record_handler=record_handler, processor=processor, context=context
        )
    )
    return response
