"""The tick: find due tasks, claim each (task, slot), plan shards, send shard messages.

Claiming and sending are split by what each part does; the dependency direction runs one way:

    dispatch (tick, buckets, pages) ──► lifecycle ──► send, build, dependencies ──► report
    completion ──────────────────────► lifecycle

- `iotsched.services.scheduling.tick` (here): which tasks are due and in what batches.
- `iotsched.services.scheduling.build`: the instance a firing claims, its shard plan with it.
- `iotsched.services.scheduling.lifecycle`: fire, start, send, resume, end, settle, release, trigger.
- `iotsched.services.scheduling.send`: the shard messages of one instance, in steps from its cursor.
- `iotsched.services.scheduling.fan_in`: which dependents an ended instance makes due.
- `iotsched.services.scheduling.report`: `TickReport`, what a dispatch did.

The verbs of claim and send, one each:

- dispatch: work a tick's due tasks, one by one or in pages (`dispatch_tick`,
  `dispatch_bucket`; `fan_out_tick` sends one message per bucket).
- build: the instance of a firing, not yet written (`build_instance`).
- fire: claim an instance through its task's blocking policy and start it (`fire`,
  `fire_one`, `fire_built`).
- start: count a just-claimed instance and send it (`start`).
- send: an instance's shard messages from its cursor, then its running mark (`send_shards`);
  a page's one-step instances share their batches (`_send_together`).
- resume: take over a stalled send once its dispatch lease ended (`resume_dispatch`).
- end: what follows an instance's final write (`after_end`, in lifecycle).

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
minute last dispatched in full, that still reads work due is absorbed at the lease
(acknowledged without dispatching); one that comes once the minute's clocks moved finds
nothing due and ends at its two reads. Other duplicate and late deliveries run, one at a
time, and collide on the claims: the claim is the
guarantee, the lease only keeps the work from being done side by side. (Only the same minute is
absorbed, not every earlier one: a replayed clock, `local tick --at`, may go back in time.)

**Two paths, one semantics.** A small tick handles its due tasks one by one: per firing a
conditional PutItem (the claim), a SendMessageBatch of its shard messages, an UpdateItem to
`running`; then the task's clock advance (a conditional UpdateItem). Four round trips per task
is fine for a handful of tasks, and nothing is cheaper in write units: plain writes cost half
what transactional ones do.

A tick with `BATCH_FROM` due tasks or more would not end inside its minute that way: thousands
of tasks would wait minutes on DynamoDB and SQS round trips alone, and a small Lambda spends
more CPU on botocore's four requests per task than on anything else (bench/tick.py measures
both). So the due list is cut into pages of `PAGE_TASKS` tasks, and a page is:

1. one TransactWriteItems per ~100 claims (`InstanceStore.claim_instances`): each task's
   firings all or nothing, tasks independent; a transaction that DynamoDB cancels names, per
   action, what failed (CancellationReasons): the tasks whose claim lost are dropped, the rest
   go again. A lost task (a duplicate or concurrent tick, a manual run) is then handled one by
   one as above, which finds the existing instance and resumes it if its dispatch stalled;
2. the shard messages of every instance the page claimed, in shared SendMessageBatch calls
   (10 entries, 1 MiB each): a one-shard instance does not pay a request of its own;
3. one transaction per ~100 running marks (`mark_running`, each its own compare-and-set on
   `planning`), then one per ~100 clock advances (`TaskStore.advance_tasks`, each conditioned
   on the next fire time read, as `advance_task`).

A page makes a few requests per hundred one-shard tasks instead of four per task. The order
within a page is the order of the small path (claim, send, running, advance), so a crash
anywhere leaves what the small path leaves: claimed instances in `planning` under their dispatch
lease and their tasks still due, which the next delivery of the tick (or the sweeper) resumes
once the lease ends. Exclusive tasks (blocking other than parallel) always take the small path:
their claim and the task's hold are one transaction of their own. Nothing about who wins a claim
changes: both paths put the same item under `attribute_not_exists(pk)`, and DynamoDB lets
exactly one of any number of such writes, transactional or not, create it.

The running mark is kept, not folded away: `planning` tells the sweeper (services/execution/sweep.py)
that messages may be unsent, and it re-sends every shard of a `planning` instance whose dispatch
lease ended. Without the mark every instance that outlives the lease would be sent twice.

**Pages in flight together.** `TICK_WORKERS` pages run at once in a thread pool: each page's
requests wait on the network most of the time, and claims of different tasks never contend.
Threads do not add CPU: on a small Lambda the tick is bounded by the CPU it needs (building
instances and messages with pydantic, serialising the batched requests; bench/tick.py
measures it), so a dispatcher expected to fire many thousands of tasks in one minute wants a
larger memory size (CPU scales with it), or the due list split across several invocations; the
batched requests are what make either worthwhile.

Costs: a transactional write costs twice the write units of a plain one, which is why small
ticks (and so the per-shard cost figures of bench/cost.py, one task per tick) keep the plain
path, and why `BATCH_FROM` is not 1.

Weighed and left out (figures in bench/results.md, "Tick with many due tasks"): the claim and
the clock advance in one transaction (two actions per task: a page still needs two
transactions for its 100 claims and 100 advances, and the clock would move before the messages
went out, leaving a crashed dispatch to the sweeper alone); plain writes for the running marks
and the advances (half the write units, but 200 requests per page instead of two); the running
mark as a Put of the whole item (cheaper for the emulator only, and it would overwrite a
worker's concurrent decrement of `remaining`).

Its functions take `LifecyclePorts`: a tick fires instances, which reaches the whole lifecycle.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from itertools import islice
from typing import Any

from iotsched.core.decisions import Firing, FiringPlan, business_date_for, plan_firing
from iotsched.core.messages import send_order
from iotsched.core.records import (
    MAX_ALERT_SLOTS,
    Alert,
    InstanceRecord,
    InstanceStatus,
    ShardMessage,
    TaskRecord,
    instance_id_for,
    with_trace,
)
from iotsched.core.timeutil import floor_minute, slot_text
from iotsched.ports.messaging import DispatchQueue
from iotsched.ports.stores import (
    BucketTick,
    MessageTooLargeError,
    TaskAdvance,
)
from iotsched.ports.tracing import (
    NoTracer,
    Tracer,
)
from iotsched.services.fleet import rollout
from iotsched.services.operations.alert_policy import publish_under
from iotsched.services.port_sets import LifecyclePorts
from iotsched.services.scheduling import send
from iotsched.services.scheduling.build import (
    build_instance,
    groups_for,
    instance_for,
)
from iotsched.services.scheduling.lifecycle import (
    claim_span,
    end_at_claim,
    fire,
    fire_built,
    fire_one,
    resume_dispatch,
    send_shards,
    start,
)
from iotsched.services.scheduling.report import TickReport
from iotsched.services.scheduling.send import (
    CHUNK_MESSAGES,
    SEND_BUDGET_S,
    SEND_WORKERS,
    STEP_SHARDS,
    reduce_message,
    shard_messages,
)

# The names the functions, the use-cases, the tests and the benchmarks import from here; those
# not defined here live in the modules named in the docstring.
__all__ = [
    "BATCH_FROM",
    "CHUNK_MESSAGES",
    "PAGE_TASKS",
    "SEND_BUDGET_S",
    "SEND_WORKERS",
    "STEP_SHARDS",
    "TICK_LEASE_MARGIN_S",
    "TICK_WORKERS",
    "BucketResult",
    "BucketVerdict",
    "FanOut",
    "TickReport",
    "build_instance",
    "dispatch_bucket",
    "dispatch_tick",
    "fan_out_tick",
    "fire_built",
    "fire_one",
    "groups_for",
    "reduce_message",
    "resume_dispatch",
    "send_shards",
    "shard_messages",
]

#: Due tasks in one tick from which the batched path is taken (below: one by one).
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
    of `PAGE_TASKS`, `workers` pages at a time (see the module docstring). `due`: the due
    tasks as the caller read them, perhaps a while ago (None: read them now); a stale list is
    harmless, its slots collide on the claims.
    """
    now = floor_minute(event_time)
    report = TickReport(now=now, bucket=bucket)
    if due is None:
        due = services.tasks.due_tasks(now, bucket=bucket)
    report.due_tasks = len(due)
    errors: list[Exception] = []
    if len(due) < batch_from:
        for task in due:
            _dispatch_isolated(task, now, services, report, errors=errors)
    else:
        pages = [due[n : n + PAGE_TASKS] for n in range(0, len(due), PAGE_TASKS)]
        for part in _dispatch_pages(pages, now, services, workers=workers):
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


def _dispatch_isolated(
    task: TaskRecord,
    now: datetime,
    services: LifecyclePorts,
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
            publish_under(
                task.definition.alerts,
                _dispatch_failed_alert(task, exc),
                task.next_fire or services.clock.now(),
                services.alerts,
            )
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
    services: LifecyclePorts,
    report: TickReport,
    instances: list[InstanceRecord] | None = None,
) -> None:
    """One due task on its own: claim each firing (or resume it), then advance its clock.

    `instances` are the firings' instances if the caller built them already (a page whose
    batched claim this task did not win), so that a `groups` plan reads the directory once.
    """
    plan = _plan(task, now)
    if instances is None:
        instances = [instance_for(task, firing, services) for firing in plan.firings]
    settled = [fire(task, instance, services, report) for instance in instances]
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
        runs=plan.runs,
    )
    if advanced:
        _alert_dropped(task, plan.firings, services)


def _plan(task: TaskRecord, now: datetime) -> FiringPlan:
    """The task's firing plan at `now`, from its stored clock, run count and calendars."""
    return plan_firing(
        task.definition,
        next_fire=task.next_fire,
        last_slot=task.last_slot,
        now=now,
        calendars=task.calendars,
        runs=task.runs,
    )


def _alert_dropped(task: TaskRecord, firings: list[Firing], services: LifecyclePorts) -> None:
    dropped = [f for f in firings if f.reason == "catch_up_limit"]
    if dropped:  # only the dispatcher that moved the clock alerts: once
        publish_under(
            task.definition.alerts,
            _catch_up_alert(task, dropped),
            services.clock.now(),
            services.alerts,
        )


# -- the batched path ------------------------------------------------------------------------


@dataclass
class _Due:
    """A due task of a page: its firing plan and the instances the firings claim."""

    task: TaskRecord
    plan: FiringPlan
    instances: list[InstanceRecord]


def _dispatch_pages(
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
            plan = _plan(task, now)
            instances = [instance_for(task, firing, services) for firing in plan.firings]
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
            _alert_dropped(due.task, due.plan.firings, services)
    if errors:  # once the page's other tasks went through (see `_dispatch_pages`)
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
        or instance.shard_spread_s > 0
    )


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
