"""Dispatcher Lambda: fired by the EventBridge tick rule (rate 1 minute).

The event's `time`, floored to the minute, is "now": duplicate and late deliveries of one tick
compute the same slots and collide on the same claims.

Metrics (EMF, namespace POWERTOOLS_METRICS_NAMESPACE), from the tick's `TickReport`:
InstancesFired (claimed and started), DuplicateClaimsRejected (a claim another delivery of the
tick had already made: the conditional write refused it), InstancesSkipped, InstancesQueued,
InstancesResumed (a claim whose dispatch an earlier tick left unfinished), InstancesFailedToStart,
ShardMessagesSent.
"""

from __future__ import annotations

import functools
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.data_classes import EventBridgeEvent, event_source
from aws_lambda_powertools.utilities.typing import LambdaContext

from iotsched.bootstrap import build
from iotsched.core.timeutil import parse_iso
from iotsched.services import Services
from iotsched.services.dispatch import TickReport, dispatch_tick
from iotsched.settings import Settings

logger = Logger()
metrics = Metrics()


@functools.cache
def services() -> Services:
    """Built on the first invocation, reused while the container is warm."""
    return build(Settings.from_env())


def handle(event: EventBridgeEvent, svc: Services) -> dict[str, Any]:
    """Run the tick the event names."""
    report = dispatch_tick(parse_iso(event.time), svc)
    publish(report)
    logger.info("tick done", extra=report.as_dict())
    return report.as_dict()


def publish(report: TickReport) -> None:
    """Add the tick's counts to this invocation's EMF document (zeros too: a flat line on a
    dashboard says the tick ran and found nothing, a gap says it did not run)."""
    counts = {
        "InstancesFired": len(report.claimed),
        "DuplicateClaimsRejected": report.duplicate_claims,
        "InstancesSkipped": len(report.skipped),
        "InstancesQueued": len(report.queued),
        "InstancesResumed": len(report.resumed),
        "InstancesFailedToStart": len(report.failed),
        "ShardMessagesSent": report.messages_sent,
    }
    for name, value in counts.items():
        metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)


@metrics.log_metrics(raise_on_empty_metrics=False)
@logger.inject_lambda_context(clear_state=True)
@event_source(data_class=EventBridgeEvent)
def lambda_handler(event: EventBridgeEvent, context: LambdaContext) -> dict[str, Any]:
    """Entry point (Handler: app.lambda_handler)."""
    return handle(event, services())
