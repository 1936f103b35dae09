"""The tick's batched path: pages of due tasks, each claimed, sent, marked running and
advanced in a few shared requests instead of four per task.

A page keeps the order of the small path (claim, send, running mark, clock advance), so a
crash anywhere leaves what the small path leaves: claimed instances in `planning` under their
dispatch lease and their tasks still due. A task whose batched claim loses, an exclusive task,
and a task whose planning raises go one by one (`task_dispatch.dispatch_task`), and a page
that raises never stops the other pages.

Its functions take `LifecyclePorts`: a page fires instances, which reaches the whole lifecycle.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from datetime import datetime

from iotsched.core.decisions import FiringPlan
from iotsched.core.instance_record import (
    InstanceRecord,
    InstanceStatus,
)
from iotsched.core.messages import send_order
from iotsched.core.shard_message import (
    ShardMessage,
    with_trace,
)
from iotsched.core.task_record import TaskRecord
from iotsched.ports.messaging import MessageTooLargeError
from iotsched.ports.tasks import TaskAdvance
from iotsched.services.fleet import rollout
from iotsched.services.port_sets import LifecyclePorts
from iotsched.services.scheduling import send
from iotsched.services.scheduling.build import instance_for
from iotsched.services.scheduling.lifecycle import claim_span, end_at_claim, send_shards
from iotsched.services.scheduling.report import TickReport
from iotsched.services.scheduling.send import shard_messages
from iotsched.services.scheduling.task_dispatch import alert_dropped, dispatch_task, plan_for
from iotsched.services.tenancy import pacing


@dataclass
class _Due:
    """A due task of a page: its firing plan and the instances the firings claim."""

    task: TaskRecord
    plan: FiringPlan
    instances: list[InstanceRecord]


def dispatch_pages(
    pages: list[list[TaskRecord]], now: datetime, services: LifecyclePorts, *, workers: int
) -> list[TickReport]:
    """Each page's report, in page order. A page that raises does not stop the others: the
    first error is raised once every page ended (its tasks stay due for the next delivery)."""
    if workers <= 1 or len(pages) == 1:
        reports: list[TickReport] = []
        error: Exception | None = None
        for page in pages:
            try:
                reports.append(_dispatch_page(page, now, services))
            except Exception as exc:
                error = error or exc
        if error is not None:
            raise error
        return reports
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tick") as pool:
        futures = [pool.submit(_dispatch_page, page, now, services) for page in pages]
        wait(futures)
    return [f.result() for f in futures]


def _dispatch_page(tasks: list[TaskRecord], now: datetime, services: LifecyclePorts) -> TickReport:
    """A page of due tasks: claims in few transactions, messages in shared batches, then the
    running marks and the clocks' advances in few transactions."""
    report = TickReport(now=now)
    errors: list[Exception] = []
    batch: list[_Due] = []
    for task in tasks:
        try:
            plan = plan_for(task, now)
            instances = [instance_for(task, firing, services) for firing in plan.firings]
        except Exception:
            dispatch_task(task, now, services, report, errors=errors)  # records, alerts
            continue
        if any(i.exclusive and i.status is InstanceStatus.PLANNING for i in instances):
            # The blocking policies decide against the task's hold, one claim at a time.
            dispatch_task(task, now, services, report, instances, errors=errors)
            continue
        batch.append(_Due(task, plan, instances))
    won = services.instances.claim_instances([d.instances for d in batch])
    to_send: list[InstanceRecord] = []
    claimed: list[_Due] = []
    for due, ok in zip(batch, won, strict=True):
        if not ok:
            # A duplicate tick, a manual run, contention, or a transaction DynamoDB refused
            # (e.g. an item over 400 KB): one by one, as a small tick does, each task isolated,
            # so that one refused claim never holds back the page-mates it was sent with.
            dispatch_task(due.task, now, services, report, due.instances, errors=errors)
            continue
        claimed.append(due)
        for instance in due.instances:
            if instance.status is InstanceStatus.PLANNING:
                report.claimed.append(instance.instance_id)
                services.faults.after_claim(instance.instance_id)
                to_send.append(instance)
            else:
                end_at_claim(instance, services, report)
    sent = _send_together(to_send, services, report)
    # A batched write that is not written either lost its condition (another dispatcher moved
    # the instance or the clock: nothing to do) or gave up after its rounds of contention with
    # concurrent deliveries: only the single write can tell which, so it follows. Without it a
    # winner whose advance gave up while the losers saw `planning` (and so left the clock to
    # it) would leave its task due and its slot unrecorded until the next tick.
    marked = services.instances.mark_running([i.instance_id for i in sent])
    for instance, ok in zip(sent, marked, strict=True):
        if not ok:
            services.instances.set_instance_status(
                instance.instance_id,
                expected=InstanceStatus.PLANNING,
                status=InstanceStatus.RUNNING,
            )
    advances = [
        TaskAdvance(
            task_id=d.task.task_id,
            expected_next_fire=d.task.next_fire,
            next_fire=d.plan.next_fire,
            last_slot=d.plan.last_slot,
            runs=d.plan.runs,
        )
        for d in claimed
    ]
    for due, advance, advanced in zip(
        claimed, advances, services.tasks.advance_tasks(advances), strict=True
    ):
        if not advanced:
            advanced = services.tasks.advance_task(
                advance.task_id,
                expected_next_fire=advance.expected_next_fire,
                next_fire=advance.next_fire,
                last_slot=advance.last_slot,
                runs=advance.runs,
            )
        if advanced:
            alert_dropped(due.task, due.plan.firings, services)
    if errors:  # once the page's other tasks went through (see `dispatch_pages`)
        raise errors[0]
    return report


def _send_together(
    instances: list[InstanceRecord], services: LifecyclePorts, report: TickReport
) -> list[InstanceRecord]:
    """Send the shard messages of `instances` in shared batches; returns those whose messages
    all went out here and still need their running mark.

    A message too large for the queue is refused before anything is sent (the queue checks
    every message first): then each instance is sent on its own, and the one at fault ends
    failed (`send_shards`, which also marks the others running).
    """
    # An instance of more than one step is sent on its own, in steps (it marks itself running),
    # and so is one whose sends are paced (a rollout, a window) or spread (`shard_spread_s`):
    # its send decides how many messages go now and with what delays. The step is read from
    # its module at each call: tests and benchmarks set it there.
    alone = [i for i in instances if _sent_alone(i)]
    for instance in alone:
        with claim_span(instance, services):
            send_shards(instance, services, report)
    instances = [i for i in instances if not _sent_alone(i)]
    together: list[ShardMessage] = []
    for instance in instances:
        # Each instance's messages carry its own claim's span, though they share batches.
        with claim_span(instance, services) as span:
            together += with_trace(shard_messages(instance), span.carrier)
    if not together:
        return instances
    try:
        report.send_requests += services.queue.send(together)
    except MessageTooLargeError:
        for instance in instances:
            send_shards(instance, services, report)
        return []
    report.messages_sent += len(together)
    return instances


def _sent_alone(instance: InstanceRecord) -> bool:
    """True if the instance's messages cannot share a page's batches (see `_send_together`)."""
    return (
        len(send_order(instance)) > send.STEP_SHARDS
        or rollout.paced(instance)
        or pacing.cap_paced(instance)
        or instance.shard_spread_s > 0
    )
