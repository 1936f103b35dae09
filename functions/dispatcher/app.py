"""The fanned-out tick: two handlers of one code package.

`tick_handler` (TickFunction, on the EventBridge tick rule) sends one message per bucket for the
event's minute to the dispatch queue; `lambda_handler` (DispatcherFunction, on that queue)
dispatches each message's bucket. What each does and counts:
`iotsched.services.scheduling.dispatcher_invocation`.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.utilities.data_classes import EventBridgeEvent, SQSEvent, event_source
from aws_lambda_powertools.utilities.typing import LambdaContext

from iotsched.lambdas.dispatcher import DispatcherContainer, dispatch, tick

logger = Logger(service="iotsched")  # the package's logger: `iotsched.*` modules log through it
metrics = Metrics()
tracer = Tracer()  # X-Ray: the invocation's subsegment, holding the use-cases' spans
container = DispatcherContainer()


@metrics.log_metrics(raise_on_empty_metrics=False)
@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@event_source(data_class=EventBridgeEvent)
def tick_handler(event: EventBridgeEvent, context: LambdaContext) -> dict[str, Any]:
    """TickFunction's entry point (Handler: app.tick_handler)."""
    return tick(event, container, metrics=metrics)


@metrics.log_metrics(raise_on_empty_metrics=False)
@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@event_source(data_class=SQSEvent)
def lambda_handler(event: SQSEvent, context: LambdaContext) -> dict[str, Any]:
    """DispatcherFunction's entry point (Handler: app.lambda_handler)."""
    return dispatch(event, context, container, metrics=metrics)
