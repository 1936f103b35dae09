"""Sweeper Lambda: its own EventBridge rule, every minute; one sweep an invocation (a replay's
`detail.now` sweeps at that instant: `iotsched.lambdas.sweeper`)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.utilities.typing import LambdaContext

from iotsched.lambdas.container import Container
from iotsched.lambdas.sweeper import sweep_on

logger = Logger(service="iotsched")  # the package's logger: `iotsched.*` modules log through it
metrics = Metrics()
tracer = Tracer()  # X-Ray: the invocation's subsegment, holding the sweep's span
container = Container()


@metrics.log_metrics(raise_on_empty_metrics=False)
@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Entry point (Handler: app.lambda_handler); only a replay's `detail.now` is read."""
    return sweep_on(event, container, metrics=metrics)
