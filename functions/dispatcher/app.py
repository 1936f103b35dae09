"""The fanned-out tick: two handlers of one code package.

`tick_handler` (TickFunction) is fired by the EventBridge tick rule (rate 1 minute). The event's
`time`, floored to the minute, is "now"; it sends one message per bucket for that minute to the
dispatch queue, nothing else. Duplicate and late deliveries send the messages again.

`lambda_handler` (DispatcherFunction) is the bucket dispatcher, on the dispatch queue's event
source (one message an invocation): it takes the bucket's lease until its invocation ends,
claims that bucket's due tasks and submissions for the message's minute, and releases it. A
message whose bucket another minute's dispatch holds is reported a batch item failure with
its visibility moved to that lease's end (it waits); a copy of the minute a dispatch runs or
finished is acknowledged (absorbed); one whose dispatch raised comes back after
`RETRY_S` (and reaches DispatchDLQ after the queue's maxReceiveCount).

Metrics (EMF, namespace POWERTOOLS_METRICS_NAMESPACE). Tick: BucketTicksSent. Bucket
dispatcher, per invocation, from its buckets' `TickReport`s: InstancesFired (claimed and
started), DuplicateClaimsRejected (a claim another delivery had already made: the conditional
write refused it), InstancesSkipped, InstancesQueued, InstancesResumed (a claim whose dispatch
an earlier delivery left unfinished), InstancesFailedToStart, ShardMessagesSent, DueTasks (the
bucket's due tasks, the figure that must stay within one invocation's reach), BucketsDispatched,
BucketTicksAbsorbed, BucketTicksWaiting; and InstancesFailed when it ended instances (those that
failed to start: `iotsched.services.end_tally`).
"""

from __future__ import annotations

import functools
import json
from datetime import timedelta
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.data_classes import EventBridgeEvent, SQSEvent, event_source
from aws_lambda_powertools.utilities.typing import LambdaContext

from iotsched.bootstrap import build, dispatch_queue, tracer_for
from iotsched.clock import SystemClock
from iotsched.core.timeutil import parse_iso
from iotsched.ports.messaging import DispatchQueue
from iotsched.ports.stores import BucketTick
from iotsched.ports.tracing import Tracer as Spans
from iotsched.services.end_tally import EndTally
from iotsched.services.scheduling.tick import (
    TICK_LEASE_MARGIN_S,
    BucketResult,
    BucketVerdict,
    dispatch_bucket,
    fan_out_tick,
)
from iotsched.services.wiring import Wiring
from iotsched.settings import Settings

# The package's logger, whatever POWERTOOLS_SERVICE_NAME (the stack's name: the metrics'
# `service`) says: what `iotsched.*` modules log comes out through it.
logger = Logger(service="iotsched")
metrics = Metrics()
# X-Ray (Tracing: Active): the invocation's subsegment; the use-cases' spans go inside it
# through the services' tracer (docs/design.md, section 16).
tracer = Tracer()

#: How long a message whose dispatch raised stays away before its retry (the next minute's
#: message of the bucket reads the same leftovers meanwhile).
RETRY_S = 60


@functools.cache
def settings() -> Settings:
    """Read once per container."""
    return Settings.from_env()


@functools.cache
def services() -> Wiring:
    """Built on the first invocation, reused while the container is warm."""
    return build(settings())


@functools.cache
def spans() -> Spans:
    """The tick's tracer (the tick builds no services), once per container."""
    return tracer_for(settings(), SystemClock())


@functools.cache
def queue() -> DispatchQueue:
    """The dispatch queue, built once per container; its messages carry the tick's span."""
    return dispatch_queue(settings(), tracer=spans())


# -- the tick ---------------------------------------------------------------------------------


def tick(
    event: EventBridgeEvent, ticks: DispatchQueue, *, buckets: int, tracing: Spans | None = None
) -> dict[str, Any]:
    """Send the event's minute to every bucket."""
    fan_out = fan_out_tick(parse_iso(event.time), ticks, buckets=buckets, tracer=tracing)
    metrics.add_metric(name="BucketTicksSent", unit=MetricUnit.Count, value=buckets)
    logger.info("tick sent", extra={"now": fan_out.now.isoformat(), "buckets": buckets})
    return fan_out.as_dict()


@metrics.log_metrics(raise_on_empty_metrics=False)
@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@event_source(data_class=EventBridgeEvent)
def tick_handler(event: EventBridgeEvent, context: LambdaContext) -> dict[str, Any]:
    """TickFunction's entry point (Handler: app.tick_handler)."""
    return tick(event, queue(), buckets=settings().index_buckets, tracing=spans())


# -- the bucket dispatcher --------------------------------------------------------------------


def _tick_of(body: str) -> BucketTick | None:
    try:
        data = json.loads(body)
        trace = data.get("trace")  # the tick's span, under the local tracer
        return BucketTick(
            minute=parse_iso(data["minute"]),
            bucket=int(data["bucket"]),
            trace=trace if isinstance(trace, str) else None,
        )
    except (ValueError, KeyError, TypeError):
        return None


def handle(
    event: SQSEvent,
    svc: Wiring,
    ticks: DispatchQueue,
    *,
    remaining_ms: int,
    request_id: str,
    reports: bool = False,
) -> dict[str, Any]:
    """Dispatch each record's bucket; the answer names the records to deliver again."""
    until = svc.clock.now() + timedelta(milliseconds=remaining_ms, seconds=TICK_LEASE_MARGIN_S)
    failures: list[dict[str, str]] = []
    results: list[BucketResult] = []
    by_message: dict[str, BucketResult] = {}
    for record in event.records:
        bucket_tick = _tick_of(record.body)
        if bucket_tick is None:  # not ours to retry: no later delivery can read it either
            logger.error("malformed dispatch message dropped", extra={"body": record.body[:500]})
            continue
        try:
            result = dispatch_bucket(
                bucket_tick, svc, owner=f"{request_id}#{record.message_id}", until=until
            )
        except Exception:
            logger.exception("bucket dispatch failed", extra={"bucket": bucket_tick.bucket})
            _hold(ticks, record.receipt_handle, RETRY_S)
            failures.append({"itemIdentifier": record.message_id})
            continue
        results.append(result)
        by_message[record.message_id] = result
        if result.verdict is BucketVerdict.WAIT:
            _hold(ticks, record.receipt_handle, result.wait_s)
            failures.append({"itemIdentifier": record.message_id})
    publish(results, svc.ends)
    for result in results:
        logger.info("bucket done", extra=result.as_dict())
    answer: dict[str, Any] = {"batchItemFailures": failures}
    if reports:  # local runtime only (IOTSCHED_BATCH_REPORTS): never on AWS
        answer["reports"] = {mid: result.as_dict() for mid, result in by_message.items()}
    return answer


def _hold(ticks: DispatchQueue, receipt_handle: str, seconds: int) -> None:
    try:
        ticks.hold(receipt_handle, seconds)
    except Exception:  # it comes back after the queue's visibility timeout instead
        logger.exception("dispatch message not held")


def publish(results: list[BucketResult], ends: EndTally) -> None:
    """Add the buckets' counts to this invocation's EMF document (zeros too: a flat line on a
    dashboard says the dispatcher ran and found nothing, a gap says it did not run), and the
    instances it ended (those that happened only)."""
    reports = [r.report for r in results if r.report is not None]
    counts = {
        "InstancesFired": sum(len(r.claimed) for r in reports),
        "DuplicateClaimsRejected": sum(r.duplicate_claims for r in reports),
        "InstancesSkipped": sum(len(r.skipped) for r in reports),
        "InstancesQueued": sum(len(r.queued) for r in reports),
        "InstancesResumed": sum(len(r.resumed) for r in reports),
        "InstancesFailedToStart": sum(len(r.failed) for r in reports),
        "ShardMessagesSent": sum(r.messages_sent for r in reports),
        "DueTasks": sum(r.due_tasks for r in reports),
        "BucketsDispatched": len(reports),
        "BucketTicksAbsorbed": sum(r.verdict is BucketVerdict.ABSORBED for r in results),
        "BucketTicksWaiting": sum(r.verdict is BucketVerdict.WAIT for r in results),
    }
    counts.update(ends.drain())
    for name, value in counts.items():
        metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)


@metrics.log_metrics(raise_on_empty_metrics=False)
@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@event_source(data_class=SQSEvent)
def lambda_handler(event: SQSEvent, context: LambdaContext) -> dict[str, Any]:
    """DispatcherFunction's entry point (Handler: app.lambda_handler)."""
    return handle(
        event,
        services(),
        queue(),
        remaining_ms=context.get_remaining_time_in_millis(),
        request_id=context.aws_request_id,
        reports=settings().batch_reports,
    )
