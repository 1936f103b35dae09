"""The tick: find due tasks, claim each (task, slot), plan shards, send shard messages.

The tick's event time, floored to the minute, is "now". Two deliveries of the same tick compute
the same due slots and collide on the same instance keys: exactly one claims each slot.

**Fanned out.** Due tasks (and due submissions) are keyed by bucket (`DUE#<k>`: see
`iotsched.core.buckets`). The rule's invocation does no claim: `fan_out_tick` sends one
message per bucket and minute to the dispatch queue, and a bucket dispatcher
(`dispatch_bucket`, one SQS message) dispatches that bucket's due work alone, so a minute's
tasks spread over as many invocations as there are buckets. A bucket's dispatchers never work
its backlog at once: each first takes the bucket's lease (`TaskStore.take_tick`, a conditional
write, until its invocation's end), so a minute that overruns makes the next minute's message
wait (its visibility moved to the lease's end) rather than read the same backlog in the same
order beside it and collide claim by claim. A copy of the minute the holder runs, or of the
minute last dispatched in full, is absorbed (acknowledged without reading). Other duplicate
and late deliveries run, one at a time, and collide on the claims: the claim is the
guarantee, the lease only keeps the work from being done side by side. (Only the same minute is
absorbed, not every earlier one: a replayed clock, `local tick --at`, may go back in time.)

**Two paths, one semantics.** A small tick handles its due tasks one by one: per firing a
conditional PutItem (the claim), a SendMessageBatch of its shard messages, an UpdateItem to
`running`; then the task's clock advance (a conditional UpdateItem). Four round trips per task
is fine for a handful of tasks, and nothing is cheaper in write units: plain writes cost half
what transactional ones do.

A tick with `BATCH_FROM` due tasks or more would not end inside its minute that way: at 5-10 ms
a round trip, 10,000 tasks wait 200-400 s on DynamoDB and SQS alone, and a 512 MB Lambda
(about 0.3 vCPU; one vCPU at 1,769 MB) spends more CPU on botocore's four requests per task
than on anything else. So the due list is cut into pages of `PAGE_TASKS` tasks, and a page is:

1. one TransactWriteItems per ~100 claims (`InstanceStore.claim_instances`): each task's
   firings all or nothing, tasks independent; a transaction that DynamoDB cancels names, per
   action, what failed (CancellationReasons): the tasks whose claim lost are dropped, the rest
   go again. A lost task (a duplicate or concurrent tick, a manual run) is then handled one by
   one as above, which finds the existing instance and resumes it if its dispatch stalled;
2. the shard messages of every instance the page claimed, in shared SendMessageBatch calls
   (10 entries, 1 MiB each): one-shard instances no longer pay a request each;
3. one transaction per ~100 running marks (`mark_running`, each its own compare-and-set on
   `planning`), then one per ~100 clock advances (`TaskStore.advance_tasks`, each conditioned
   on the next fire time read, as `advance_task`).

That is about 0.03 DynamoDB and 0.1 SQS requests per one-shard task instead of four. The order
within a page is the order of the small path (claim, send, running, advance), so a crash
anywhere leaves what it leaves today: claimed instances in `planning` under their dispatch
lease and their tasks still due, which the next delivery of the tick (or the sweeper) resumes
once the lease ends. Exclusive tasks (blocking other than parallel) always take the small path:
their claim and the task's hold are one transaction of their own. Nothing about who wins a claim
changes: both paths put the same item under `attribute_not_exists(pk)`, and DynamoDB lets
exactly one of any number of such writes, transactional or not, create it.

The running mark is kept, not folded away: `planning` tells the sweeper (services/sweep.py)
that messages may be unsent, and it re-sends every shard of a `planning` instance whose dispatch
lease ended. Without the mark every instance that outlives the lease would be sent twice.

**Pages in flight together.** `TICK_WORKERS` pages run at once in a thread pool: each page's
requests wait on the network most of the time, and claims of different tasks never contend.
Threads do not add CPU: on a 512 MB Lambda the tick is bounded by the CPU it needs (building
instances and messages with pydantic, serialising the batched requests; 1.5 ms or so per
one-shard task on a full core, see bench/results.md), so a dispatcher expected to fire many
thousands of tasks in one minute wants a larger memory size (CPU scales with it), or the due
list split across several invocations; the batched requests are what make either worthwhile.

Costs: a transactional write costs twice the write units of a plain one, which is why small
ticks (and so the per-shard cost figures of bench/cost.py, one task per tick) keep the plain
path, and why `BATCH_FROM` is not 1.

**A big instance is sent in steps** (`send_shards`). Its shard messages go out
`STEP_SHARDS` (1,000) at a time, each step's 100 SendMessageBatch calls `SEND_WORKERS` (10) at
a time on threads; after each step but the last the instance records how many went out (its
cursor, `sent`) in one conditional UpdateItem that also renews the dispatch lease, fenced on the
lease the dispatcher holds. A dispatcher that dies mid-send leaves the cursor at its last step;
once the lease ends (60 s after that step), the sweeper or a later delivery of the tick takes
the dispatch over and goes on from the cursor (`resume_dispatch`): at most one step is sent
twice, never the whole instance from shard 0. A dispatcher that was only slow finds its next
cursor write refused and stops. A cursor write that meets another writer's transaction on the
instance item past its retries is left to the next step (the send goes on). A send that runs past `SEND_BUDGET_S` (30 s) records its cursor
with a lease that has already ended and returns, so the next sweep continues it at once, well
before the dispatcher's own timeout. At 10-15 ms a SendMessageBatch and 5-10 ms a DynamoDB
write, a 100,000-shard instance (10,000 calls, 100 writes) is sent in 11-16 s
(`big_instance_send_s`, bench/bigsend.py); about 180,000 shards fit one budget at the high
latencies, and a larger send would go on at the next sweep.

Why a cursor rather than range messages that workers expand: it keeps one kind of message on
the shard queue, so the worker, the dead-letter handler, the visibility hold and the sweeper's
lease steps stay as they are; an instance stays `planning` until every shard message is out,
so the sweeper already knows which instances may have unsent shards (a range message lost or
dead-lettered would leave shards that nothing but the instance's timeout finds); and nothing
waits in the queue's backlog before its shards are even sent. It costs one write per 1,000
shards (0.001 write per shard) and a dispatcher's time for the send, CPU included: building
and signing 10,000 requests takes about 11 s of a 512 MB Lambda's 0.3 vCPU (bench/bigsend.py
measures it), within the 16 s the requests wait on the network. Range messages would
spread that CPU over worker invocations, and are the design for instances far beyond 100,000
shards (the most an `id_range` plan holds), which one dispatcher cannot send in a minute.

Weighed and left out (figures in bench/results.md, "Tick with many due tasks"): the claim and
the clock advance in one transaction (two actions per task: a page still needs two
transactions for its 100 claims and 100 advances, and the clock would move before the messages
went out, leaving a crashed dispatch to the sweeper alone); plain writes for the running marks
and the advances (half the write units, but 200 requests per page instead of two); the running
mark as a Put of the whole item (cheaper for the emulator only, and it would overwrite a
worker's concurrent decrement of `remaining`).
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from itertools import islice
from typing import Any

from iotsched.core import messages
from iotsched.core.decisions import (
    Firing,
    FiringPlan,
    business_date_for,
    data_interval_for,
    data_interval_for_date,
    decide_follow_ups,
    plan_firing,
)
from iotsched.core.messages import send_order
from iotsched.core.model import BlockingPolicy, GroupsSharding, TaskDefinition
from iotsched.core.records import (
    MAX_ALERT_SLOTS,
    MAX_LISTED_COVERS,
    Alert,
    InstanceRecord,
    InstanceStatus,
    ShardMessage,
    TaskRecord,
    instance_id_for,
)
from iotsched.core.sharding import (
    PlanningError,
    PlanTooLargeError,
    ShardPlan,
    check_plan_fits,
    plan_shards,
)
from iotsched.core.timeutil import floor_minute, slot_text
from iotsched.ports import (
    BucketTick,
    ClaimOutcome,
    DeviceDirectory,
    DirectoryError,
    DispatchQueue,
    MessageTooLargeError,
    StoreContendedError,
    TaskAdvance,
)
from iotsched.services import Services
from iotsched.services.alerts import PLAN_TOO_LARGE

#: Due tasks in one tick from which the batched path is taken (below: one by one).
BATCH_FROM = 10
#: Due tasks per page of the batched path: a page's claims fit one or two transactions, and
#: a page ends (messages sent) well within its instances' dispatch lease.
PAGE_TASKS = 100
#: Pages in flight together.
TICK_WORKERS = 4

log = logging.getLogger(__name__)


@dataclass
class TickReport:
    """What one tick did; logged and turned into metrics by the dispatcher Lambda."""

    now: datetime
    bucket: int | None = None  # the bucket dispatched; None: every bucket
    due_tasks: int = 0
    claimed: list[str] = field(default_factory=list)
    duplicate_claims: int = 0
    resumed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    queued: list[str] = field(default_factory=list)
    covered: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    failed_tasks: list[str] = field(default_factory=list)  # dispatch raised: still due, alerted
    messages_sent: int = 0
    send_requests: int = 0

    def merge(self, other: TickReport) -> None:
        """Add what `other` (a page of this tick) did; `due_tasks` is counted by the tick."""
        self.claimed += other.claimed
        self.duplicate_claims += other.duplicate_claims
        self.resumed += other.resumed
        self.skipped += other.skipped
        self.queued += other.queued
        self.covered += other.covered
        self.failed += other.failed
        self.failed_tasks += other.failed_tasks
        self.messages_sent += other.messages_sent
        self.send_requests += other.send_requests

    def as_dict(self) -> dict[str, object]:
        """JSON-able summary."""
        return {
            "now": self.now.isoformat(),
            "bucket": self.bucket,
            "due_tasks": self.due_tasks,
            "claimed": self.claimed,
            "duplicate_claims": self.duplicate_claims,
            "resumed": self.resumed,
            "skipped": self.skipped,
            "queued": self.queued,
            "covered": self.covered,
            "failed": self.failed,
            "failed_tasks": self.failed_tasks,
            "messages_sent": self.messages_sent,
            "send_requests": self.send_requests,
        }


def dispatch_tick(
    event_time: datetime,
    services: Services,
    *,
    batch_from: int = BATCH_FROM,
    workers: int = TICK_WORKERS,
    bucket: int | None = None,
) -> TickReport:
    """Run one tick at `event_time` (floored to the minute), over bucket `bucket`'s due tasks
    and submissions (None: every bucket's).

    Fewer than `batch_from` due tasks are handled one by one; from `batch_from` on, in pages
    of `PAGE_TASKS`, `workers` pages at a time (see the module docstring).
    """
    now = floor_minute(event_time)
    report = TickReport(now=now, bucket=bucket)
    due = services.tasks.due_tasks(now, bucket=bucket)
    report.due_tasks = len(due)
    errors: list[Exception] = []
    if len(due) < batch_from:
        for task in due:
            _dispatch_isolated(task, now, services, report, errors=errors)
    else:
        pages = [due[n : n + PAGE_TASKS] for n in range(0, len(due), PAGE_TASKS)]
        for part in _in_parallel(pages, now, services, workers=workers):
            report.merge(part)
    for submission in services.instances.due_submissions(now, bucket=bucket):
        # A submitted one-time instance whose time has come: scheduled -> planning, then sent.
        if services.instances.set_instance_status(
            submission.instance_id,
            expected=InstanceStatus.SCHEDULED,
            status=InstanceStatus.PLANNING,
        ):
            started = submission.model_copy(update={"status": InstanceStatus.PLANNING})
            _start(started, services, report)
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


def fan_out_tick(event_time: datetime, queue: DispatchQueue, *, buckets: int) -> FanOut:
    """The rule's invocation: one dispatch message per bucket for the minute of `event_time`.

    A duplicate or retried delivery sends them again; each copy is absorbed by the bucket's
    lease or collides on the claims.
    """
    now = floor_minute(event_time)
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
    tick: BucketTick, services: Services, *, owner: str, until: datetime, **tick_options: Any
) -> BucketResult:
    """A bucket dispatcher's message: take the bucket's lease until `until` (the invocation's
    end), dispatch the bucket's due work for the message's minute, release.

    `owner` names this invocation and message (a retried lease request of its own matches).
    An error in the dispatch releases the lease (not done: a later message runs the minute's
    leftovers, as does the message's own retry) and is raised.
    """
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


def _dispatch_isolated(
    task: TaskRecord,
    now: datetime,
    services: Services,
    report: TickReport,
    instances: list[InstanceRecord] | None = None,
    *,
    errors: list[Exception],
) -> None:
    """`_dispatch_task`, isolated: a task whose dispatch raises (a claim DynamoDB refuses, a
    bug in its planning) is recorded, alerted once per slot and added to `errors` (raised once
    the whole tick ran), and never holds back the other tasks of the tick. It stays due: the
    next tick tries it again."""
    try:
        _dispatch_task(task, now, services, report, instances)
    except Exception as exc:
        log.exception("task dispatch failed", extra={"task": task.task_id})
        errors.append(exc)
        report.failed_tasks.append(task.task_id)
        try:
            services.alerts.publish(_dispatch_failed_alert(task, exc))
        except Exception:
            log.exception("dispatch failure alert not published", extra={"task": task.task_id})


def _dispatch_failed_alert(task: TaskRecord, exc: Exception) -> Alert:
    """One alert per task and slot (its clock does not move, so the next ticks find the same
    slot and the alert id deduplicates them)."""
    slot = task.next_fire or task.last_slot
    first = instance_id_for(task.task_id, slot) if slot is not None else task.task_id
    return Alert(
        type="task_dispatch_failed",
        severity=task.definition.alerts.severity,
        retention_days=task.definition.retention.days,
        task_id=task.task_id,
        tenant=task.definition.tenant,
        instance_id=first,
        status="not_dispatched",
        reason=f"{type(exc).__name__}: {str(exc)[:500]} (the task stays due; other tasks go on)",
        alert_id=f"{first}#dispatch_failed",
    )


def _dispatch_task(
    task: TaskRecord,
    now: datetime,
    services: Services,
    report: TickReport,
    instances: list[InstanceRecord] | None = None,
) -> None:
    """One due task on its own: claim each firing (or resume it), then advance its clock.

    `instances` are the firings' instances if the caller built them already (a page whose
    batched claim this task did not win), so that a `groups` plan reads the directory once.
    """
    plan = plan_firing(task.definition, next_fire=task.next_fire, last_slot=task.last_slot, now=now)
    if instances is None:
        instances = [_instance_for(task, firing, services) for firing in plan.firings]
    settled = [_fire_instance(task, instance, services, report) for instance in instances]
    # Advancing after the claims keeps a crash resumable: the task stays due, the next
    # delivery computes the same slots, collides on the claims and resumes them. For the
    # same reason the clock stays put while another dispatcher's send is unconfirmed.
    if not all(settled):
        return
    advanced = services.tasks.advance_task(
        task.task_id,
        expected_next_fire=task.next_fire,
        next_fire=plan.next_fire,
        last_slot=plan.last_slot,
    )
    if advanced:
        _alert_dropped(task, plan.firings, services)


def _alert_dropped(task: TaskRecord, firings: list[Firing], services: Services) -> None:
    dropped = [f for f in firings if f.reason == "catch_up_limit"]
    if dropped:  # only the dispatcher that moved the clock alerts: once
        services.alerts.publish(_catch_up_alert(task, dropped))


# -- the batched path ------------------------------------------------------------------------


@dataclass
class _Due:
    """A due task of a page: its firing plan and the instances the firings claim."""

    task: TaskRecord
    plan: FiringPlan
    instances: list[InstanceRecord]


def _in_parallel(
    pages: list[list[TaskRecord]], now: datetime, services: Services, *, workers: int
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


def _dispatch_page(tasks: list[TaskRecord], now: datetime, services: Services) -> TickReport:
    """A page of due tasks: claims in few transactions, messages in shared batches, then the
    running marks and the clocks' advances in few transactions."""
    report = TickReport(now=now)
    errors: list[Exception] = []
    batch: list[_Due] = []
    for task in tasks:
        try:
            plan = plan_firing(
                task.definition, next_fire=task.next_fire, last_slot=task.last_slot, now=now
            )
            instances = [_instance_for(task, firing, services) for firing in plan.firings]
        except Exception:
            _dispatch_isolated(task, now, services, report, errors=errors)  # records, alerts
            continue
        if any(i.exclusive and i.status is InstanceStatus.PLANNING for i in instances):
            # The blocking policies decide against the task's hold, one claim at a time.
            _dispatch_isolated(task, now, services, report, instances, errors=errors)
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
            _dispatch_isolated(due.task, now, services, report, due.instances, errors=errors)
            continue
        claimed.append(due)
        for instance in due.instances:
            if instance.status is InstanceStatus.PLANNING:
                report.claimed.append(instance.instance_id)
                services.faults.after_claim(instance.instance_id)
                to_send.append(instance)
            else:
                _ended_at_claim(instance, services, report)
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
            )
        if advanced:
            _alert_dropped(due.task, due.plan.firings, services)
    if errors:  # once the page's other tasks went through (see `_in_parallel`)
        raise errors[0]
    return report


def _send_together(
    instances: list[InstanceRecord], services: Services, report: TickReport
) -> list[InstanceRecord]:
    """Send the shard messages of `instances` in shared batches; returns those whose messages
    all went out here and still need their running mark.

    A message too large for the queue is refused before anything is sent (the queue checks
    every message first): then each instance is sent on its own, and the one at fault ends
    failed (`send_shards`, which also marks the others running).
    """
    # An instance of more than one step is sent on its own, in steps (it marks itself running).
    for instance in instances:
        if len(send_order(instance)) > STEP_SHARDS:
            send_shards(instance, services, report)
    instances = [i for i in instances if len(send_order(i)) <= STEP_SHARDS]
    together = [m for instance in instances for m in shard_messages(instance)]
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


def _catch_up_alert(task: TaskRecord, dropped: list[Firing]) -> Alert:
    """One alert for the missed slots a catch-up left out (recorded skipped): the business
    date of the first, and the first MAX_ALERT_SLOTS of them with their business dates."""
    count = sum(1 + len(f.covers) for f in dropped)
    first = instance_id_for(task.task_id, dropped[0].slot)
    rule, zone = task.definition.business_date, task.definition.timezone
    listed = islice((s for f in dropped for s in (f.slot, *f.covers)), MAX_ALERT_SLOTS)
    slots = [
        {"slot": slot_text(s), "business_date": business_date_for(rule, s, zone).isoformat()}
        for s in listed
    ]
    return Alert(
        type="catch_up_dropped",
        severity=task.definition.alerts.severity,
        retention_days=task.definition.retention.days,
        task_id=task.task_id,
        tenant=task.definition.tenant,
        instance_id=first,
        business_date=business_date_for(rule, dropped[0].slot, zone),
        slots=slots,
        status=InstanceStatus.SKIPPED.value,
        reason=(
            f"{count} missed slot(s) beyond max_catch_up={task.definition.misfire.max_catch_up} "
            f"recorded skipped, from {dropped[0].slot.isoformat()}"
        ),
        alert_id=f"{first}#catch_up_dropped",
    )


def groups_for(
    definition: TaskDefinition, directory: DeviceDirectory | None
) -> list[dict[str, Any]] | None:
    """For `sharding: groups`, the groups' bounds as the Device Management System lists them
    now (the sharding's tenant, else the task's, else every tenant's); None for other shardings.

    Raises:
        PlanningError: no directory is configured, or it could not answer.
    """
    sharding = definition.sharding
    if not isinstance(sharding, GroupsSharding):
        return None
    if directory is None:
        raise PlanningError(
            "sharding 'groups' needs a device directory (IOTSCHED_DEVICE_TABLE or IOTSCHED_DMS_URL)"
        )
    try:
        groups = directory.groups(sharding.tenant or definition.tenant)
    except DirectoryError as exc:
        raise PlanningError(f"the device directory did not answer: {exc}") from exc
    return [g.bounds() for g in groups]


def build_instance(
    task: TaskRecord,
    firing: Firing,
    *,
    claimed_at: datetime,
    dispatch_lease_s: int,
    directory: DeviceDirectory | None = None,
) -> InstanceRecord:
    """The instance a firing claims, with its shard plan computed now and stored with it.

    A `groups` plan reads the groups from `directory` here, at fire time, and stores their
    bounds (tenant, group, id range) with the instance: reruns reuse them as they were.
    """
    definition = task.definition
    status = firing.status
    reason = firing.reason
    try:
        plan = plan_shards(definition.sharding, groups_for(definition, directory))
        check_plan_fits(plan)
    except PlanTooLargeError as exc:
        # Refused at claim, once per firing, with its own alert: an instance item over 400 KB
        # would fail the claim itself (and, batched, the claims it shares a transaction with).
        plan = ShardPlan(strategy=definition.sharding.strategy, count=1)
        status, reason = InstanceStatus.FAILED, f"{PLAN_TOO_LARGE}: {exc}"
    except PlanningError as exc:
        plan = ShardPlan(strategy=definition.sharding.strategy, count=1)
        status, reason = InstanceStatus.FAILED, f"planning_failed: {exc}"
    open_ = status in (InstanceStatus.PLANNING, InstanceStatus.SCHEDULED)
    zone = definition.timezone
    if firing.business_date is not None:
        business_date = firing.business_date
        start, end = data_interval_for_date(business_date, zone)
    else:
        business_date = business_date_for(definition.business_date, firing.slot, zone)
        start, end = data_interval_for(definition.business_date, firing.slot, zone)
    suffix = f"~{firing.suffix}" if firing.suffix else ""
    instance = InstanceRecord(
        instance_id=instance_id_for(definition.id, firing.slot) + suffix,
        task_id=definition.id,
        tenant=definition.tenant,
        slot=firing.slot,
        trigger_kind=firing.kind,
        covers=firing.covers[:MAX_LISTED_COVERS],
        covers_count=len(firing.covers),
        business_date=business_date,
        data_interval_start=start,
        data_interval_end=end,
        status=status,
        reason=reason,
        plan=plan,
        remaining=plan.count if open_ else 0,
        task_version=task.version,
        handler=definition.handler,
        params={**definition.params, **(firing.params or {})},
        timeout_s=definition.timeout_s,
        max_attempts=definition.retry.max_attempts,
        backoff_s=definition.retry.backoff_s,
        severity=definition.alerts.severity,
        retention_days=definition.retention.days,
        exclusive=definition.blocking.policy is not BlockingPolicy.PARALLEL,
        reduce=definition.reduce,
        created_at=claimed_at,
        finished_at=None if open_ else claimed_at,
        deadline=(firing.fire_at or claimed_at) + timedelta(seconds=definition.instance_timeout_s),
        dispatch_lease_until=(
            claimed_at + timedelta(seconds=dispatch_lease_s)
            if status is InstanceStatus.PLANNING
            else None
        ),
        fire_at=firing.fire_at,
    )
    if open_:
        return instance
    # Final as claimed (skipped, failed to plan): the claim records its follow-ups. It never
    # held the task, so it owes no release.
    owed = decide_follow_ups(instance, alert=status is InstanceStatus.FAILED, holds=False)
    return instance.model_copy(update={"owed": owed})


def _instance_for(task: TaskRecord, firing: Firing, services: Services) -> InstanceRecord:
    return build_instance(
        task,
        firing,
        claimed_at=services.clock.now(),
        dispatch_lease_s=services.tuning.dispatch_lease_s,
        directory=services.directory,
    )


def _fire(task: TaskRecord, firing: Firing, services: Services, report: TickReport) -> bool:
    """Claim one firing (or resume it); False while it waits on another dispatcher's send."""
    return _fire_instance(task, _instance_for(task, firing, services), services, report)


def _fire_instance(
    task: TaskRecord, instance: InstanceRecord, services: Services, report: TickReport
) -> bool:
    """Claim `instance` (or resume it); False while it waits on another dispatcher's send."""
    if instance.exclusive and instance.status is InstanceStatus.PLANNING:
        return _fire_exclusive(task, instance, services, report)
    existing = services.instances.claim_instance(instance)
    if existing is None:
        if instance.status is InstanceStatus.PLANNING:
            _start(instance, services, report)
        else:
            _ended_at_claim(instance, services, report)
        return True
    return _duplicate(existing, services, report, instance.created_at)


def _ended_at_claim(instance: InstanceRecord, services: Services, report: TickReport) -> None:
    """After the claim of an instance that ends as it is claimed: skipped, or failed to plan."""
    if instance.status is InstanceStatus.SKIPPED:
        report.skipped.append(instance.instance_id)
    else:
        report.failed.append(instance.instance_id)  # its alert is an owed follow-up
    _after_end(instance, services)


def fire_one(task: TaskRecord, firing: Firing, services: Services) -> TickReport:
    """Claim one firing outside the tick (manual runs, backfills), through the blocking policy."""
    report = TickReport(now=services.clock.now())
    _fire(task, firing, services, report)
    return report


def fire_built(task: TaskRecord, instance: InstanceRecord, services: Services) -> TickReport:
    """`fire_one` for an instance already built (`build_instance`), e.g. checked before."""
    report = TickReport(now=services.clock.now())
    _fire_instance(task, instance, services, report)
    return report


def _start(instance: InstanceRecord, services: Services, report: TickReport) -> None:
    report.claimed.append(instance.instance_id)
    services.faults.after_claim(instance.instance_id)
    send_shards(instance, services, report)


def _duplicate(
    existing: InstanceRecord | None, services: Services, report: TickReport, now: datetime
) -> bool:
    report.duplicate_claims += 1
    if existing is None or existing.status is not InstanceStatus.PLANNING:
        return True
    # The claimer died (or is slow) between claim and send: resume once its dispatch lease ends.
    if resume_dispatch(existing.instance_id, services, report, now):
        report.resumed.append(existing.instance_id)
        return True
    return False


def _fire_exclusive(
    task: TaskRecord, instance: InstanceRecord, services: Services, report: TickReport
) -> bool:
    """Claim under a non-parallel blocking policy: the claim and the task's hold are atomic.

    discard: blocked firings are recorded skipped, naming the holder. serial: they queue,
    at most `max_queued`; overflow is recorded skipped and alerted. cover: the holder is
    cancelled and the new instance takes its place.
    """
    blocking = task.definition.blocking
    now = instance.created_at
    for _ in range(5):  # a hold released or moved between two reads: decide again
        claim = services.blocking.claim_exclusive(instance)
        if claim.outcome is ClaimOutcome.CLAIMED:
            _start(instance, services, report)
            return True
        if claim.outcome is ClaimOutcome.DUPLICATE:
            return _duplicate(claim.existing, services, report, now)
        holder = claim.holder or "?"
        if _settled_ended_holder(claim.holder, services):
            continue  # the holder had ended and its release was owed: decide again
        if blocking.policy is BlockingPolicy.DISCARD:
            _record_skipped(instance, f"blocked by {holder}", services, report)
            return True
        if blocking.policy is BlockingPolicy.SERIAL:
            waiting = instance.model_copy(
                update={"status": InstanceStatus.QUEUED, "dispatch_lease_until": None}
            )
            queued = services.blocking.enqueue_instance(waiting, max_queued=blocking.max_queued)
            if queued.outcome is ClaimOutcome.CLAIMED:
                report.queued.append(instance.instance_id)
                return True
            if queued.outcome is ClaimOutcome.DUPLICATE:
                return _duplicate(queued.existing, services, report, now)
            if queued.outcome is ClaimOutcome.FULL:
                reason = f"queue_full: {blocking.max_queued} already wait behind {holder}"
                # its `queue_overflow` alert is an owed follow-up of the skipped record
                _record_skipped(instance, reason, services, report, alert=True)
                return True
            continue  # FREE: the holder ended meanwhile
        # COVER: ask the holder to stop (it ends cancelled), then take its place.
        services.instances.end_instance(
            holder,
            status=InstanceStatus.CANCELLED,
            reason=f"covered by {instance.instance_id}",
            finished_at=now,
            owed=decide_follow_ups(instance, alert=False),  # as its own: same task, exclusive
        )
        taken = services.blocking.take_over(instance, holder=holder)
        if taken.outcome is ClaimOutcome.CLAIMED:
            report.covered.append(holder)
            _start(instance, services, report)
            _settled_ended_holder(holder, services)  # its dependents (its release: a no-op)
            return True
        if taken.outcome is ClaimOutcome.DUPLICATE:
            return _duplicate(taken.existing, services, report, now)
    return False  # still contended: the task stays due and the next tick decides


def _settled_ended_holder(holder: str | None, services: Services) -> bool:
    """Do the follow-ups of a holder that ended but still owes them (its ender died before
    releasing the task); True if it did any, so that the caller decides its claim again."""
    if holder is None:
        return False
    ended = services.instances.get_instance(holder)
    if ended is None or not ended.status.final or not ended.owed:
        return False
    from iotsched.services.completion import settle_followups  # (a cycle otherwise)

    return bool(settle_followups(ended, services))


def _record_skipped(
    instance: InstanceRecord,
    reason: str,
    services: Services,
    report: TickReport,
    *,
    alert: bool = False,
) -> bool:
    skipped = instance.model_copy(
        update={
            "status": InstanceStatus.SKIPPED,
            "reason": reason,
            "remaining": 0,
            "finished_at": instance.created_at,
            "dispatch_lease_until": None,
        }
    )
    skipped = skipped.model_copy(
        update={"owed": decide_follow_ups(skipped, alert=alert, holds=False)}
    )
    if services.instances.claim_instance(skipped) is None:
        report.skipped.append(instance.instance_id)
        _after_end(skipped, services)
        return True
    report.duplicate_claims += 1
    return False


def _after_end(instance: InstanceRecord, services: Services) -> None:
    from iotsched.services.completion import after_end  # (a cycle otherwise)

    after_end(instance, services)


#: Shard messages per step of a send. After each step but the last the instance records how
#: many went out (`InstanceRecord.sent`) in one conditional write that also renews the dispatch
#: lease: a crash re-sends at most the step it was in, never from shard 0. An instance of at
#: most one step (nearly all of them) sends as before: its messages, then the running mark.
STEP_SHARDS = 1_000
#: Messages per SendMessageBatch call a step's threads take in turn (10 per call, 10 calls).
CHUNK_MESSAGES = 100
#: Threads sending a step's chunks together: the calls wait on the network, not the CPU.
SEND_WORKERS = 10
#: How long one call of `send_shards` goes on before it gives the rest of the send up to a
#: continuation (the next sweep, or a later delivery of the tick), well within the dispatcher's
#: and the sweeper's 60 s timeouts.
SEND_BUDGET_S = 30.0


def shard_messages(instance: InstanceRecord) -> list[ShardMessage]:
    """Every message the instance sends, in send order (see `iotsched.core.messages`)."""
    return messages.shard_messages(instance)


def reduce_message(instance: InstanceRecord) -> ShardMessage:
    """The reduce's message: the instance's reduce handler, as shard number `plan.count`."""
    return messages.reduce_message(instance)


def send_shards(
    instance: InstanceRecord,
    services: Services,
    report: TickReport,
    *,
    budget_s: float | None = None,
) -> None:
    """Send the instance's shard messages from `instance.sent` on, then mark it running.

    The caller holds the dispatch lease `instance.dispatch_lease_until` (the claim's, or one
    taken with `take_dispatch`: see `resume_dispatch`). Messages go in steps of `STEP_SHARDS`,
    each step's SendMessageBatch calls `SEND_WORKERS` at a time; after each step but the last,
    `advance_dispatch` records the cursor and renews the lease, fenced on the lease held. The
    send stops without marking the instance running when that write is refused (another
    dispatcher took over after the lease ended; the instance left `planning`), and after
    `budget_s` seconds (`SEND_BUDGET_S` by default), giving the lease up so that the next taker
    resumes at the cursor.

    Re-sending after a crash is safe: a duplicate message finds its shard leased or finished.
    """
    order = send_order(instance)
    total = len(order)
    cursor = min(instance.sent, total)
    held = instance.dispatch_lease_until
    started = time.monotonic()
    pool: ThreadPoolExecutor | None = None
    try:
        while cursor < total:
            stop = min(cursor + STEP_SHARDS, total)
            step = messages.shard_messages(instance, cursor, stop)
            if pool is None and len(step) > CHUNK_MESSAGES:
                pool = ThreadPoolExecutor(max_workers=SEND_WORKERS, thread_name_prefix="send")
            try:
                report.send_requests += _send_step(step, services, pool)
            except MessageTooLargeError as exc:
                _enqueue_failed(instance, exc, services, report)
                return
            report.messages_sent += len(step)
            if stop == total:
                break
            now = services.clock.now()
            budget = SEND_BUDGET_S if budget_s is None else budget_s
            pause = time.monotonic() - started >= budget
            until = now if pause else now + timedelta(seconds=services.tuning.dispatch_lease_s)
            try:
                advanced = services.instances.advance_dispatch(
                    instance.instance_id, sent=stop, held=held, until=until
                )
            except StoreContendedError:
                # The instance item stayed inside another writer's transaction past the
                # adapter's rounds: nothing was written. The send goes on and the next step
                # records both; a crash meanwhile re-sends one more step.
                log.warning(
                    "send cursor not recorded (contention); the next step records it",
                    extra={"instance_id": instance.instance_id, "sent": stop},
                )
                cursor = stop
                continue
            if not advanced:
                log.info(
                    "shard send stopped: the dispatch was taken over or the instance moved on",
                    extra={"instance_id": instance.instance_id, "sent": stop},
                )
                return
            services.faults.at("sent_step", instance.instance_id)
            held, cursor = until, stop
            if pause:
                log.info(
                    "shard send paused at its time budget; the next sweep resumes it",
                    extra={"instance_id": instance.instance_id, "sent": stop, "of": total},
                )
                return
    finally:
        if pool is not None:
            pool.shutdown(wait=True)
    services.instances.set_instance_status(
        instance.instance_id, expected=InstanceStatus.PLANNING, status=InstanceStatus.RUNNING
    )


def _send_step(
    step: list[ShardMessage], services: Services, pool: ThreadPoolExecutor | None
) -> int:
    """Send one step's messages (chunks in parallel on `pool`); the requests made. Every chunk
    is waited for; the first error is raised (a message too large before any other)."""
    if pool is None or len(step) <= CHUNK_MESSAGES:
        return services.queue.send(step)
    chunks = [step[n : n + CHUNK_MESSAGES] for n in range(0, len(step), CHUNK_MESSAGES)]
    futures = [pool.submit(services.queue.send, chunk) for chunk in chunks]
    wait(futures)
    errors = [error for f in futures if (error := f.exception()) is not None]
    for error in errors:
        if isinstance(error, MessageTooLargeError):
            raise error
    if errors:
        raise errors[0]
    return sum(f.result() for f in futures)


def _enqueue_failed(
    instance: InstanceRecord, exc: MessageTooLargeError, services: Services, report: TickReport
) -> None:
    """Permanent: no retry can send it. End the instance (remaining shards never run)."""
    ended_at = services.clock.now()
    owed = decide_follow_ups(instance, alert=True)
    if services.instances.set_instance_status(
        instance.instance_id,
        expected=InstanceStatus.PLANNING,
        status=InstanceStatus.FAILED,
        reason=f"enqueue_failed: {exc}",
        finished_at=ended_at,
        owed=owed,
    ):
        report.failed.append(instance.instance_id)
        failed = instance.model_copy(
            update={
                "status": InstanceStatus.FAILED,
                "reason": f"enqueue_failed: {exc}",
                "finished_at": ended_at,
                "owed": owed,
            }
        )
        _after_end(failed, services)


def resume_dispatch(
    instance_id: str, services: Services, report: TickReport, now: datetime
) -> bool:
    """Take over a stalled dispatch (its lease ended: its dispatcher died, or paused at its
    budget) and send on from the instance's cursor; False if another dispatcher holds it.

    The cursor is read again after the lease is taken, strongly consistent: the record the
    caller found (an index's copy, a claim's answer) may predate the last step.
    """
    until = now + timedelta(seconds=services.tuning.dispatch_lease_s)
    if not services.instances.take_dispatch(instance_id, now=now, until=until):
        return False
    current = services.instances.get_instance(instance_id)
    if current is not None and current.status is InstanceStatus.PLANNING:
        send_shards(current, services, report)
    return True
