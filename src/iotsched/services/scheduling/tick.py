"""The tick: a minute's due tasks and submissions, dispatched by bucket.

It owns which work a minute makes due and how it is cut: `fan_out_tick` sends one message per
bucket, `dispatch_bucket` works one bucket under its lease, and `dispatch_tick` takes each due
task one by one (`task_dispatch`) or, from `BATCH_FROM` due tasks on, in pages (`page_dispatch`).
"Now" is the tick's event time floored to the minute, so two deliveries of one tick compute the
same slots and collide on the same instance keys: exactly one claims each slot. A task's clock
moves only after its firings are claimed and sent, so a crash leaves it due.

Its functions take `LifecyclePorts`: a tick fires instances, which reaches the whole lifecycle.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from iotsched.core.instance_record import InstanceStatus
from iotsched.core.task_record import TaskRecord
from iotsched.core.timeutil import floor_minute, slot_text
from iotsched.ports.messaging import BucketTick, DispatchQueue
from iotsched.ports.store_errors import UnreadableRecordError
from iotsched.ports.tracing import NoTracer, Tracer
from iotsched.services.port_sets import LifecyclePorts
from iotsched.services.scheduling.lifecycle import start
from iotsched.services.scheduling.page_dispatch import dispatch_pages
from iotsched.services.scheduling.report import TickReport
from iotsched.services.scheduling.task_dispatch import dispatch_task, unreadable_task_alert

#: Due tasks in one tick from which the batched path is taken (below: one by one, whose plain
#: writes cost half the write units of a page's transactional ones).
BATCH_FROM = 10
#: Due tasks per page of the batched path: a page's claims fit one or two transactions, and
#: a page ends (messages sent) well within its instances' dispatch lease.
PAGE_TASKS = 100
#: Pages in flight together.
TICK_WORKERS = 4

log = logging.getLogger(__name__)


def dispatch_tick(
    event_time: datetime,
    services: LifecyclePorts,
    *,
    batch_from: int = BATCH_FROM,
    workers: int = TICK_WORKERS,
    bucket: int | None = None,
    due: list[TaskRecord] | None = None,
) -> TickReport:
    """Run one tick at `event_time` (floored to the minute), over bucket `bucket`'s due tasks
    and submissions (None: every bucket's).

    Fewer than `batch_from` due tasks are handled one by one; from `batch_from` on, in pages
    of `PAGE_TASKS`, `workers` pages at a time (`page_dispatch`). `due`: the due tasks as the
    caller read them, perhaps a while ago (None: read them now); a stale list is harmless, its
    slots collide on the claims.
    """
    now = floor_minute(event_time)
    report = TickReport(now=now, bucket=bucket)
    if due is None:
        unreadable: list[UnreadableRecordError] = []
        due = services.tasks.due_tasks(now, bucket=bucket, unreadable=unreadable)
        for record in unreadable:
            unreadable_task_alert(record, now, services)
    report.due_tasks = len(due)
    errors: list[Exception] = []
    if len(due) < batch_from:
        for task in due:
            dispatch_task(task, now, services, report, errors=errors)
    else:
        pages = [due[n : n + PAGE_TASKS] for n in range(0, len(due), PAGE_TASKS)]
        for part in dispatch_pages(pages, now, services, workers=workers):
            report.merge(part)
    for submission in services.instances.due_submissions(now, bucket=bucket):
        # A submitted one-time instance whose time has come: scheduled -> planning, then sent.
        if services.instances.set_instance_status(
            submission.instance_id,
            expected=InstanceStatus.SCHEDULED,
            status=InstanceStatus.PLANNING,
        ):
            started = submission.model_copy(update={"status": InstanceStatus.PLANNING})
            start(started, services, report)
    if errors:  # once every task had its turn: the invocation fails, and is retried
        raise errors[0]
    return report


# -- the fanned-out tick ---------------------------------------------------------------------

#: How long past its invocation's end a bucket lease still holds: the skew between hosts'
#: clocks it tolerates.
TICK_LEASE_MARGIN_S = 5
#: The longest a waiting message is held (SQS's visibility limit).
MAX_HOLD_S = 43_200


@dataclass
class FanOut:
    """What one rule invocation sent: a message per bucket for its minute."""

    now: datetime
    buckets: int
    message_ids: list[str]

    def as_dict(self) -> dict[str, object]:
        """JSON-able summary."""
        return {"now": self.now.isoformat(), "buckets": self.buckets, "messages": self.message_ids}


def fan_out_tick(
    event_time: datetime, queue: DispatchQueue, *, buckets: int, tracer: Tracer | None = None
) -> FanOut:
    """The rule's invocation: one dispatch message per bucket for the minute of `event_time`.

    A duplicate or retried delivery sends them again; each copy is absorbed by the bucket's
    lease or collides on the claims. Under `tracer`, its span (`tick`) is the root of the
    minute's trace: the dispatch messages carry it.
    """
    now = floor_minute(event_time)
    with (tracer or NoTracer()).span("tick", minute=slot_text(now), buckets=buckets):
        ids = queue.send_ticks([BucketTick(minute=now, bucket=k) for k in range(buckets)])
    return FanOut(now=now, buckets=buckets, message_ids=ids)


class BucketVerdict(StrEnum):
    """What a bucket dispatcher did with one message."""

    DISPATCHED = "dispatched"  # it held the bucket's lease and dispatched its due work
    ABSORBED = "absorbed"  # a dispatch of this very minute runs or ran in full: acknowledged
    WAIT = "wait"  # another minute's dispatch holds the bucket: come back at its lease's end


@dataclass
class BucketResult:
    """One bucket message's outcome; `report` when dispatched, `wait_s` when waiting."""

    tick: BucketTick
    verdict: BucketVerdict
    report: TickReport | None = None
    wait_s: int = 0

    def as_dict(self) -> dict[str, object]:
        """JSON-able summary."""
        return {
            "minute": self.tick.minute.isoformat(),
            "bucket": self.tick.bucket,
            "verdict": self.verdict.value,
            "wait_s": self.wait_s,
            "report": self.report.as_dict() if self.report is not None else None,
        }


def dispatch_bucket(
    tick: BucketTick, services: LifecyclePorts, *, owner: str, until: datetime, **tick_options: Any
) -> BucketResult:
    """A bucket dispatcher's message: take the bucket's lease until `until` (the invocation's
    end), dispatch the bucket's due work for the message's minute, release.

    `owner` names this invocation and message (a retried lease request of its own matches).
    An error in the dispatch releases the lease (not done: a later message runs the minute's
    leftovers, as does the message's own retry) and is raised. Its span (`dispatch`) is a
    child of the tick's the message carries.
    """
    with services.tracer.span(
        "dispatch", parent=tick.trace, minute=slot_text(tick.minute), bucket=tick.bucket
    ) as span:
        result = _dispatch_bucket(tick, services, owner=owner, until=until, **tick_options)
        span.annotate(verdict=result.verdict.value)
    return result


def _dispatch_bucket(
    tick: BucketTick, services: LifecyclePorts, *, owner: str, until: datetime, **tick_options: Any
) -> BucketResult:
    if not services.tasks.due_tasks(
        tick.minute, bucket=tick.bucket, limit=1
    ) and not services.instances.due_submissions(tick.minute, bucket=tick.bucket, limit=1):
        # Most buckets, most minutes: two small reads and no write. A bucket whose backlog another
        # dispatch is working is not empty (its tasks stay due until advanced): it goes on to
        # the lease. What is read here is never dispatched: the dispatch reads again, under
        # the lease, so it never works from a list its predecessor was still changing.
        return BucketResult(
            tick, BucketVerdict.DISPATCHED, report=TickReport(now=tick.minute, bucket=tick.bucket)
        )
    now = services.clock.now()
    lease = services.tasks.take_tick(tick.bucket, tick.minute, owner=owner, now=now, until=until)
    if not lease.taken:
        if tick.minute in (lease.done, lease.minute):
            return BucketResult(tick, BucketVerdict.ABSORBED)
        end = lease.until or now  # freed meanwhile: come back at once
        wait_s = min(MAX_HOLD_S, max(1, int((end - now).total_seconds()) + 1))
        return BucketResult(tick, BucketVerdict.WAIT, wait_s=wait_s)
    try:
        report = dispatch_tick(tick.minute, services, bucket=tick.bucket, **tick_options)
    except Exception:
        try:
            services.tasks.release_tick(tick.bucket, owner=owner, minute=tick.minute, done=False)
        except Exception:  # it ends with the invocation anyway
            log.exception("bucket lease not released", extra={"bucket": tick.bucket})
        raise
    services.tasks.release_tick(tick.bucket, owner=owner, minute=tick.minute, done=True)
    return BucketResult(tick, BucketVerdict.DISPATCHED, report=report)
