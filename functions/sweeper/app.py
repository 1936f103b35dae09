"""Sweeper Lambda: its own EventBridge rule, every minute (see iotsched.services.execution.sweep).

It sweeps at its clock's now. An event whose `detail` names `now` (ISO 8601) sweeps at that
instant instead: EventBridge's Scheduled Events have an empty detail, so only a replay sends it
(`iotsched local sweep --at`, on a runtime whose clock is manual).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from iotsched.bootstrap import build
from iotsched.clock import ManualClock
from iotsched.core.timeutil import parse_iso
from iotsched.services.execution.sweep import sweep
from iotsched.services.wiring import Wiring
from iotsched.settings import Settings

# The package's logger, whatever POWERTOOLS_SERVICE_NAME (the stack's name: the metrics'
# `service`) says: what `iotsched.*` modules log comes out through it.
logger = Logger(service="iotsched")
metrics = Metrics()
tracer = Tracer()  # X-Ray (Tracing: Active): the invocation's subsegment


@functools.cache
def settings() -> Settings:
    """Read once per container."""
    return Settings.from_env()


@functools.cache
def services() -> Wiring:
    """Built on the first invocation, reused while the container is warm."""
    return build(settings())


def handle(svc: Wiring) -> dict[str, Any]:
    """Run one sweep (an expired lease gets a fresh shard message at once)."""
    with svc.tracer.span("sweep"):  # what it resends, finalizes or alerts is in its trace
        report = sweep(svc)
    for name, items in (
        ("InstancesTimedOut", report.timed_out_instances),
        ("ShardsTimedOut", report.timed_out_shards),
        ("ShardsRequeued", report.requeued_shards),
        ("DispatchesResumed", report.resumed),
        ("InstancesFinalized", report.finalized),
        ("ShardsCancelled", report.cancelled_shards),
        ("InstancesFollowedUp", report.followed_up),
        ("AlertsRepublished", report.republished_alerts),
        ("TasksMissed", report.missed_runs),
    ):
        metrics.add_metric(name=name, unit=MetricUnit.Count, value=len(items))
    for name, value in svc.ends.drain().items():  # the instances this sweep ended, by status
        metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)
    logger.info("sweep done", extra=report.as_dict())
    return report.as_dict()


@metrics.log_metrics(raise_on_empty_metrics=False)
@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Entry point (Handler: app.lambda_handler); only a replay's `detail.now` is read."""
    svc = services()
    detail = event.get("detail") if isinstance(event, dict) else None
    if isinstance(detail, dict) and detail.get("now"):
        svc = dataclasses.replace(svc, clock=ManualClock(parse_iso(str(detail["now"]))))
    return handle(svc)
