"""The dispatcher function's glue: the tick's EventBridge event and the bucket dispatcher's SQS
event into their invocations (`iotsched.services.scheduling.dispatcher_invocation`), and their
counts into the invocation's EMF document.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Metrics
from aws_lambda_powertools.utilities.data_classes import EventBridgeEvent, SQSEvent
from aws_lambda_powertools.utilities.typing import LambdaContext

from iotsched.bootstrap import dispatch_queue, tracer_for
from iotsched.clock import SystemClock
from iotsched.core.timeutil import parse_iso
from iotsched.lambdas.container import Container
from iotsched.lambdas.emf import add_counts
from iotsched.ports.messaging import DispatchQueue
from iotsched.ports.tracing import Tracer
from iotsched.services.scheduling.dispatcher_invocation import (
    DispatchMessage,
    dispatch_messages,
    send_tick,
)


class DispatcherContainer(Container):
    """The container's settings and wiring, and the tick's tracer and dispatch queue."""

    def __init__(self) -> None:
        super().__init__()
        self._spans: Tracer | None = None
        self._queue: DispatchQueue | None = None

    def spans(self) -> Tracer:
        """The tick's tracer (the tick builds no wiring), made on first use."""
        if self._spans is None:
            self._spans = tracer_for(self.settings(), SystemClock())
        return self._spans

    def queue(self) -> DispatchQueue:
        """The dispatch queue, made on first use; its messages carry the tick's span."""
        if self._queue is None:
            self._queue = dispatch_queue(self.settings(), tracer=self.spans())
        return self._queue

    def clear(self) -> None:
        """Forget what was read and built."""
        super().clear()
        self._spans = None
        self._queue = None


def tick(
    event: EventBridgeEvent, container: DispatcherContainer, *, metrics: Metrics
) -> dict[str, Any]:
    """Send the event's minute (its `time`, floored) to every bucket."""
    fan_out, counts = send_tick(
        parse_iso(event.time),
        container.queue(),
        buckets=container.settings().index_buckets,
        tracer=container.spans(),
    )
    add_counts(metrics, counts)
    return fan_out.as_dict()


def dispatch(
    event: SQSEvent, context: LambdaContext, container: DispatcherContainer, *, metrics: Metrics
) -> dict[str, Any]:
    """Dispatch each record's bucket until the invocation's end; the answer names the records to
    deliver again (and, under IOTSCHED_BATCH_REPORTS, each record's report)."""
    messages = [
        DispatchMessage(record.message_id, record.receipt_handle, record.body)
        for record in event.records
    ]
    done = dispatch_messages(
        messages,
        container.wiring(),
        container.queue(),
        remaining_ms=context.get_remaining_time_in_millis(),
        request_id=context.aws_request_id,
    )
    add_counts(metrics, done.counts)
    return done.answer(reports=container.settings().batch_reports)
