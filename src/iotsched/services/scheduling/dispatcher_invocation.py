"""The dispatcher function's two invocations and the counts each adds to its metrics: the tick
(`send_tick`: one message per bucket for the minute) and a bucket dispatcher's messages
(`dispatch_messages`).

A bucket message whose bucket another minute's dispatch holds waits (a batch item failure, its
visibility moved to that lease's end); a copy of a minute whose dispatch runs or ran is absorbed
(acknowledged); one whose dispatch raised comes back after `RETRY_S`; a malformed one is
dropped. The counts include zeros (a flat line says the dispatcher ran and found nothing) and
the instances the invocation ended.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from iotsched.core.timeutil import parse_iso
from iotsched.ports.messaging import BucketTick, DispatchQueue
from iotsched.ports.tracing import Tracer
from iotsched.services.end_tally import EndTally
from iotsched.services.port_sets import LifecyclePorts
from iotsched.services.scheduling.tick import (
    TICK_LEASE_MARGIN_S,
    BucketResult,
    BucketVerdict,
    FanOut,
    dispatch_bucket,
    fan_out_tick,
)

log = logging.getLogger(__name__)

#: How long a message whose dispatch raised stays away before its retry (the next minute's
#: message of the bucket reads the same leftovers meanwhile).
RETRY_S = 60


@dataclass(frozen=True)
class DispatchMessage:
    """One message of the dispatch queue, as its event source delivers it."""

    message_id: str
    receipt_handle: str
    body: str


@dataclass
class Dispatched:
    """What one bucket dispatcher invocation came to."""

    failures: list[str] = field(default_factory=list)  # message ids to deliver again
    results: dict[str, BucketResult] = field(default_factory=dict)  # by message id
    counts: dict[str, int] = field(default_factory=dict)  # its metrics

    def answer(self, *, reports: bool = False) -> dict[str, Any]:
        """The function's answer; with `reports` (the local runtime only), each message's."""
        found: dict[str, Any] = {
            "batchItemFailures": [{"itemIdentifier": m} for m in self.failures]
        }
        if reports:
            found["reports"] = {mid: result.as_dict() for mid, result in self.results.items()}
        return found


def send_tick(
    event_time: datetime, ticks: DispatchQueue, *, buckets: int, tracer: Tracer | None = None
) -> tuple[FanOut, dict[str, int]]:
    """Send the minute of `event_time` to every bucket: what was sent, and its counts."""
    fan_out = fan_out_tick(event_time, ticks, buckets=buckets, tracer=tracer)
    log.info("tick sent", extra={"now": fan_out.now.isoformat(), "buckets": buckets})
    return fan_out, {"BucketTicksSent": buckets}


def dispatch_messages(
    messages: Iterable[DispatchMessage],
    services: LifecyclePorts,
    ticks: DispatchQueue,
    *,
    remaining_ms: int,
    request_id: str,
) -> Dispatched:
    """Dispatch each message's bucket, holding each bucket's lease until the invocation's end
    (`remaining_ms` from now) and a margin."""
    until = services.clock.now() + timedelta(milliseconds=remaining_ms, seconds=TICK_LEASE_MARGIN_S)
    done = Dispatched()
    for message in messages:
        bucket_tick = tick_of(message.body)
        if bucket_tick is None:  # not ours to retry: no later delivery can read it either
            log.error("malformed dispatch message dropped", extra={"body": message.body[:500]})
            continue
        try:
            result = dispatch_bucket(
                bucket_tick, services, owner=f"{request_id}#{message.message_id}", until=until
            )
        except Exception:
            log.exception("bucket dispatch failed", extra={"bucket": bucket_tick.bucket})
            _hold(ticks, message.receipt_handle, RETRY_S)
            done.failures.append(message.message_id)
            continue
        done.results[message.message_id] = result
        if result.verdict is BucketVerdict.WAIT:
            _hold(ticks, message.receipt_handle, result.wait_s)
            done.failures.append(message.message_id)
    done.counts = bucket_counts(list(done.results.values()), services.ends)
    for result in done.results.values():
        log.info("bucket done", extra=result.as_dict())
    return done


def bucket_counts(results: list[BucketResult], ends: EndTally) -> dict[str, int]:
    """The buckets' counts (zeros too), then the instances ended (those that happened only),
    drained from `ends`."""
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
    return counts


def tick_of(body: str) -> BucketTick | None:
    """The bucket and minute a dispatch message names; None for a malformed body."""
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


def _hold(ticks: DispatchQueue, receipt_handle: str, seconds: int) -> None:
    try:
        ticks.hold(receipt_handle, seconds)
    except Exception:  # it comes back after the queue's visibility timeout instead
        log.exception("dispatch message not held")
