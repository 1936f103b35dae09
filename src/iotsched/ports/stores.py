"""The store ports: tasks, instances and their shards, the task's hold; the errors their
writes raise."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from enum import StrEnum
from typing import Any, Protocol

from iotsched.core.audit import AuditRecord
from iotsched.core.model import Calendar, TenantQuotas
from iotsched.core.records import (
    Attempt,
    FollowUp,
    InstanceRecord,
    InstanceStatus,
    ShardRecord,
    ShardStatus,
    TaskRecord,
)
from iotsched.ports.audit import AuditLog


class Clock(Protocol):
    """The wall clock, injected. The dispatcher never uses it for slots, only for leases."""

    def now(self) -> datetime:
        """The current instant, timezone-aware UTC."""
        ...


@dataclass(frozen=True)
class LeaseResult:
    """The answer to a lease request.

    `taken` is True when this caller now holds attempt `shard.attempt`; otherwise `shard` is
    what the store holds (finished, busy under a live lease, or exhausted).
    """

    taken: bool
    shard: ShardRecord


class ClaimOutcome(StrEnum):
    """What an exclusive or queued claim came to."""

    CLAIMED = "claimed"  # this caller holds the task (or queued behind it)
    DUPLICATE = "duplicate"  # the instance key was taken: see `existing`
    BLOCKED = "blocked"  # another instance holds the task: see `holder`
    FULL = "full"  # serial: the queue holds max_queued already
    FREE = "free"  # serial: nothing holds the task any more; claim it instead


@dataclass(frozen=True)
class ExclusiveClaim:
    """The answer to `claim_exclusive`, `enqueue_instance` and `take_over`."""

    outcome: ClaimOutcome
    existing: InstanceRecord | None = None
    holder: str | None = None


@dataclass(frozen=True)
class CompletionResult:
    """The instance's counters right after a shard's final write."""

    remaining: int
    failed_shards: int


@dataclass(frozen=True)
class ShardCompletion:
    """One shard's final write, as `InstanceStore.complete_shards` takes it."""

    instance_id: str
    index: int
    status: ShardStatus
    attempt: Attempt  # the ended attempt: the write is fenced on its number
    error: str | None = None
    result: Mapping[str, Any] | None = None
    expires_at: datetime | None = None  # when the record may be deleted (TTL); None: never


class CompletionVerdict(StrEnum):
    """What became of one completion of `InstanceStore.complete_shards`."""

    COMMITTED = "committed"  # the shard is final and its instance's counter counts it
    STALE = "stale"  # the attempt lost its fence (a zombie): nothing changed for it
    UNWRITTEN = "unwritten"  # not written for now (contention, throttling): try again later


class StartVerdict(StrEnum):
    """What `InstanceStore.take_start` answered for one shard start."""

    STARTED = "started"  # counted in the minute (or no rate): the shard may start
    WAIT = "wait"  # the minute's starts are spent: try again in a later minute
    CLOSED = "closed"  # the instance's starts are closed (it is ending): never start it


#: The most instances one group of `InstanceStore.claim_instances` may hold (a DynamoDB
#: transaction carries at most 100 actions; a group is one transaction's worth at most).
MAX_CLAIM_GROUP = 100


@dataclass(frozen=True)
class TaskAdvance:
    """One move of a task's clock, as `TaskStore.advance_task` takes it (for `advance_tasks`)."""

    task_id: str
    expected_next_fire: datetime | None
    next_fire: datetime | None
    last_slot: datetime | None
    runs: int = 0  # firings to add to the task's run count (`max_runs`)


class StaleAttemptError(Exception):
    """A write conditioned on an attempt number found another attempt (or a final shard)."""


class StoreContendedError(RuntimeError):
    """A write stayed contended or throttled through the store's bounded retries: nothing was
    written. Retryable: the caller fails this attempt (or this request) and tries again later."""


class WriteRejectedError(ValueError):
    """The store refused a write as invalid (a validation error, an item over 400 KB, a reason
    it does not know): nothing was written, and sending it again would not help."""


class EffectConditionError(WriteRejectedError):
    """A condition of an effect's own writes (`ctx.once(key, writes=[...])`) failed: nothing was
    written, the key stays unclaimed. `index` is the failed write's position in `writes`."""

    def __init__(self, message: str, *, index: int) -> None:
        super().__init__(message)
        self.index = index


class MessageTooLargeError(ValueError):
    """A shard message larger than the queue accepts: the instance cannot be dispatched."""


@dataclass(frozen=True)
class TickLease:
    """The answer to `TaskStore.take_tick`.

    `taken`: this caller holds the bucket's lease. Otherwise `owner`, `minute` and `until`
    describe the lease as read (None: no live holder), and `done` is the minute last
    dispatched in full (None: none yet).
    """

    taken: bool
    owner: str | None = None
    minute: datetime | None = None
    until: datetime | None = None
    done: datetime | None = None


@dataclass(frozen=True)
class BucketTick:
    """One bucket's share of a tick: the dispatch queue's message."""

    minute: datetime
    bucket: int
    trace: str | None = None  # the local tracer's carrier of the tick's span (docs/design.md, 16)


@dataclass(frozen=True)
class FailureCount:
    """A threshold window's count after `count_failure`."""

    count: int  # failures counted in the window (never past its threshold)
    counted: bool  # this failure is one of them (counted now, or by an earlier call)
    instances: list[str]  # the counted failures' ids


class AlertStateStore(Protocol):
    """The state of a task's alert policy: failures counted per threshold window, and whether
    the task is failing (for its recovery notice). Items per task, never one every task writes.
    """

    def count_failure(
        self,
        task_id: str,
        window_start: datetime,
        failure_id: str,
        *,
        threshold: int,
        expires_at: datetime,
    ) -> FailureCount:
        """Count `failure_id` in the task's window starting `window_start`, once, while the
        count is below `threshold` (one conditional write naming the id: a retried or repeated
        call counts nothing more and answers `counted`). At the threshold nothing more is
        counted: a later failure is answered `counted=False` with the full count."""
        ...

    def mark_failing(
        self, task_id: str, instance_id: str, *, at: datetime, expires_at: datetime
    ) -> None:
        """Record that the task is failing, since `instance_id` unless it already was, as of
        the failure's instant `at`; the state is kept until `expires_at` (each failure moves
        it on). A state expired at `at` is gone: the task fails since `instance_id`."""
        ...

    def clear_failing(
        self, task_id: str, *, by: str, at: datetime, expires_at: datetime
    ) -> str | None:
        """End the task's failing state on behalf of instance `by` (succeeded at `at`);
        returns the instance it was failing since, to exactly one caller `by` (again to the
        same `by`, whose earlier call may have landed), None to every other and when it was
        not failing (or its state had expired at `at`). The cleared state, which answers a
        retried call, is kept until `expires_at`."""
        ...


class TaskStore(AuditLog, AlertStateStore, Protocol):
    """Task definitions, their versions and audit records, and the dispatcher's per-task clock
    (and its alert policy's state)."""

    def put_tasks(
        self,
        tasks: Sequence[TaskRecord],
        *,
        audit: Sequence[AuditRecord] = (),
        counted: Collection[str] = (),
    ) -> None:
        """Write `tasks`, each with its version item (`TaskVersion`: the definition, `version`,
        `updated_at`, `updated_by`) and the audit records whose subject it is, all in one
        transaction per task at least (a batch of up to 100 items is all-or-nothing). A task's
        run count is the store's: a new task starts at 0, a rewritten one keeps its count.

        Each task is written iff the stored one's version is lower (or none is stored) and its
        version item is new: of two applies that read the same version, one wins.

        `counted`: ids of tasks new to their tenant whose quotas have `max_tasks`: each adds one
        to its tenant's task count in its own transaction, on condition that the count is below
        the quota (so concurrent applies never pass it).

        Raises:
            TaskConflictError: a task's stored version is not lower (nothing of that task, nor
                of the tasks after it, was written).
            TaskQuotaError: a counted task would take its tenant past `max_tasks` (likewise).
        """
        ...

    def tenant_task_count(self, tenant: str) -> int | None:
        """The tenant's task count kept for `max_tasks` (a consistent read), None if not kept."""
        ...

    def get_tenant_quotas(self, tenant: str) -> TenantQuotas | None:
        """The tenant's quotas as last set (its item `TENANT#<tenant>`), None if none."""
        ...

    def put_tenant_quotas(self, tenant: str, quotas: TenantQuotas | None) -> None:
        """Set (None: remove) the tenant's quotas on its item; idempotent."""
        ...

    def seed_tenant_task_count(self, tenant: str, count: int) -> bool:
        """Start keeping the tenant's task count at `count` (its tasks, counted when its
        `max_tasks` was set), iff none is kept: False if one was (it stays)."""
        ...

    def forget_tenant_task_count(self, tenant: str) -> None:
        """Stop keeping the tenant's task count (its `max_tasks` was removed); idempotent."""
        ...

    def set_task_quotas(self, task_id: str, quotas: TenantQuotas | None) -> bool:
        """Store its tenant's quotas on a task (`TaskRecord.quotas`; None: none), leaving its
        definition, version and clock; False if there is no such task."""
        ...

    def put_calendars(
        self,
        calendars: Sequence[Calendar],
        resolved: Mapping[str, Mapping[str, list[date]]],
        *,
        audit: Sequence[AuditRecord] = (),
    ) -> None:
        """Write named calendars (with `audit`, their records), and set the resolved calendar
        dates (`TaskRecord.calendars`) of the stored tasks in `resolved` (task id -> calendar
        name -> dates), nothing else of them; up to 100 items in all are written
        all-or-nothing. A task gone meanwhile is left out."""
        ...

    def get_calendar(self, name: str) -> Calendar | None:
        """The named calendar, or None."""
        ...

    def list_calendars(self) -> list[Calendar]:
        """Every named calendar, by name (no table scan)."""
        ...

    def get_task(self, task_id: str) -> TaskRecord | None:
        """The task, or None."""
        ...

    def list_tasks(self, *, after: str | None = None, limit: int | None = None) -> list[TaskRecord]:
        """Tasks ordered by id: those after the id `after` (a page's last), at most `limit`
        (all without one). No table scan: the task items' sparse index entries."""
        ...

    def children_of(self, task_id: str) -> list[str]:
        """Tasks that were written with `trigger: {after: [..., task_id, ...]}`.

        May include a task whose trigger changed since: callers re-check its definition.
        """
        ...

    def due_tasks(
        self, now: datetime, *, bucket: int | None = None, limit: int | None = None
    ) -> list[TaskRecord]:
        """Enabled tasks whose next fire time is at or before `now` (index on next fire time),
        in next-fire order; with `limit`, at most that many (enough to know whether any is due).

        `bucket`: only the tasks of that bucket (`iotsched.core.buckets.bucket_of` of the
        task id over the store's bucket count; a task written under an older, smaller count
        is found under the bucket it was written to), which is what one bucket dispatcher
        reads; None: every bucket. The index is eventually consistent: a caller must tolerate
        a task that was advanced a moment ago; the instance claim makes a stale answer
        harmless.
        """
        ...

    def take_tick(
        self, bucket: int, minute: datetime, *, owner: str, now: datetime, until: datetime
    ) -> TickLease:
        """Take bucket `bucket`'s dispatch lease for `minute` until `until`, iff no other
        owner holds it past `now` and `minute` is not the minute last dispatched in full.

        Taking it again with the same `owner` succeeds (a retried request). Otherwise the
        answer says who holds it, until when, and the newest minute done.
        """
        ...

    def release_tick(self, bucket: int, *, owner: str, minute: datetime, done: bool) -> bool:
        """End `owner`'s lease of bucket `bucket`; with `done`, record `minute` as dispatched
        in full. False if `owner` no longer holds it (it expired and another took it)."""
        ...

    def delete_task(
        self, task_id: str, *, audit: AuditRecord | None = None, counted: str | None = None
    ) -> bool:
        """Delete the task's definition iff no instance holds it (its blocking `active` slot),
        with `audit` in the same transaction; `counted`: its tenant, whose task count (kept for
        `max_tasks`) the same transaction lowers by one.

        False if there is no such task or an instance holds it (and no record is written).
        Instances, shards, versions and their history stay: they are the record of what ran.
        The task's alert state (failing or recovered) goes with it: a task created again under
        the same id starts with none.
        """
        ...

    def set_paused(
        self,
        task_id: str,
        *,
        paused: bool,
        note: str | None = None,
        audit: AuditRecord | None = None,
        restart: tuple[datetime | None, datetime | None] | None = None,
    ) -> bool:
        """Pause or resume a task, with `audit` in the same transaction; False if there is no
        such task (and no record is written).

        A paused task is never due; resuming makes it due again from its `next_fire`. A pause
        leaves the task's clock as it is (a dispatcher may have moved it since the caller's
        read); a resume sets it to `restart` (next fire, last slot) where given. The same
        write sets the task's `pause_note` to `note` (why it was paused), or clears it when
        `note` is None: a resume clears it.
        """
        ...

    def advance_task(
        self,
        task_id: str,
        *,
        expected_next_fire: datetime | None,
        next_fire: datetime | None,
        last_slot: datetime | None,
        runs: int = 0,
    ) -> bool:
        """Move the task's clock iff its next fire time is still `expected_next_fire`, adding
        `runs` to its run count in the same write."""
        ...

    def advance_tasks(self, advances: Sequence[TaskAdvance]) -> list[bool]:
        """`advance_task` for many tasks in few requests (the tick's hot path).

        Each advance is decided alone, exactly as `advance_task` would decide it: one whose
        condition fails changes nothing and does not hold the others back. Returns, in order,
        whether each moved the clock. A task may appear once.
        """
        ...


class InstanceStore(Protocol):
    """Instances (claims) and their shard execution records."""

    def record_request(self, request_key: str, instance_id: str) -> str:
        """Bind a client request id to an instance id, once; returns the id bound first."""
        ...

    def claim_instance(self, instance: InstanceRecord) -> InstanceRecord | None:
        """Create the instance iff its key is free: the right to fire.

        Returns None when this caller won the claim, else the instance already stored (in the
        same request: no second read). Exactly one of any number of concurrent callers wins.
        """
        ...

    def claim_instances(self, groups: Sequence[Sequence[InstanceRecord]]) -> list[bool]:
        """`claim_instance` for many due tasks in few requests (the tick's hot path).

        Each group (one task's firings of a tick) is all or nothing: True when this call created
        every instance of the group (the right to fire each), False when it created none of them
        (a key was taken: a duplicate tick, a manual run; or the store would not take the group
        in one piece: more than `MAX_CLAIM_GROUP` instances, an id twice, contention it gave up
        on). Groups are independent: one that loses does not hold the others back. A False says
        nothing about who holds what: the caller claims that group's instances one by one with
        `claim_instance`, which returns the existing instance. Exactly one of any number of
        concurrent callers creates each instance, whichever method each of them uses.
        """
        ...

    def mark_running(self, instance_ids: Sequence[str]) -> list[bool]:
        """Move each instance from `planning` to `running` (every shard message sent).

        Each move is its own compare-and-set, as `set_instance_status(expected=planning,
        status=running)`: an instance that left `planning` meanwhile (finished, cancelled) is left
        alone and reported False. An id may appear once.
        """
        ...

    def take_dispatch(self, instance_id: str, *, now: datetime, until: datetime) -> bool:
        """Take the right to (re)send an instance's shard messages (or its reduce message).

        Succeeds iff the instance is still `planning` (or `reducing`) and no other dispatcher
        holds a live dispatch lease; guards against 20 duplicate ticks each re-sending every shard.
        """
        ...

    def advance_dispatch(
        self,
        instance_id: str,
        *,
        sent: int,
        held: datetime | None,
        until: datetime,
        waiting: str | None = None,
    ) -> bool:
        """Record that the first `sent` shard messages (in send order) went out, and move the
        dispatch lease to `until`, iff the instance is still `planning` and its dispatch lease
        is still `held`, the one the caller holds (None: none was set).

        The dispatcher of a large instance calls it after each step of its send: the lease
        lives while the send makes progress, and a dispatcher that took over (after the lease
        ended) or an instance that left `planning` refuses it, so the caller stops sending.
        An `until` at or before now gives the dispatch up for the next taker to resume.
        `waiting`: why the send waits until `until` (a quota), recorded on the instance; the
        same write clears it when None.
        """
        ...

    def set_instance_status(
        self,
        instance_id: str,
        *,
        expected: InstanceStatus,
        status: InstanceStatus,
        reason: str | None = None,
        finished_at: datetime | None = None,
        owed: Sequence[FollowUp] = (),
    ) -> bool:
        """Compare-and-set the instance status; False if it was not `expected`.

        A final `status` records the follow-ups `owed` in the same write (see `settle_followup`).
        """
        ...

    def finalize_instance(
        self,
        instance_id: str,
        *,
        status: InstanceStatus,
        finished_at: datetime,
        owed: Sequence[FollowUp] = (),
    ) -> bool:
        """End the instance iff it is open (planning, running, reducing) and its counter is zero.

        Exactly one of any number of concurrent callers gets True. The same write records the
        follow-ups `owed` (alert, release, dependents): whoever finds one owed does it, and
        strikes it off with `settle_followup`, so a death after this write loses none of them.
        """
        ...

    def settle_followup(self, instance_id: str, step: FollowUp) -> bool:
        """Strike `step` off the instance's owed follow-ups (a conditional write).

        True if this call struck it; False if it was not owed (done by another caller).
        """
        ...

    def owing_instances(self, *, limit: int = 1000) -> list[InstanceRecord]:
        """Final instances with follow-ups still owed, oldest end first (for the sweeper)."""
        ...

    def start_reduce(self, instance_id: str, *, now: datetime, until: datetime) -> bool:
        """Move a drained instance whose shards all succeeded to `reducing` (counter back to 1,
        a dispatch lease until `until`); exactly one caller gets True and sends the reduce."""
        ...

    def end_instance(
        self,
        instance_id: str,
        *,
        status: InstanceStatus,
        reason: str,
        finished_at: datetime,
        owed: Sequence[FollowUp] = (),
    ) -> bool:
        """End an open instance (scheduled, queued, planning, running, reducing) before its
        shards are done.

        For cancellation and instance timeouts. Exactly one caller gets True; shards still
        running find the instance final and stop; shards not yet started never run. The
        follow-ups `owed` are recorded in the same write, as in `finalize_instance`.
        """
        ...

    def due_submissions(
        self, now: datetime, *, bucket: int | None = None, limit: int | None = None
    ) -> list[InstanceRecord]:
        """Submitted instances (status scheduled) whose `fire_at` is at or before `now`, in
        fire-at order; `bucket` and `limit` as in `TaskStore.due_tasks`."""
        ...

    def open_instances(self, *, limit: int = 1000) -> list[InstanceRecord]:
        """Instances not yet final, earliest deadline first (index `by_deadline`)."""
        ...

    def expired_leases(self, now: datetime, *, limit: int = 1000) -> list[ShardRecord]:
        """Running shards whose lease ended at or before `now`, oldest first."""
        ...

    def get_instance(self, instance_id: str) -> InstanceRecord | None:
        """The instance (strongly consistent read), or None."""
        ...

    def list_instances(
        self,
        *,
        task_id: str | None = None,
        status: InstanceStatus | None = None,
        limit: int = 100,
        before: str | None = None,
    ) -> list[InstanceRecord]:
        """Instances, newest slot first, filtered by task and/or status; `before` (an instance
        id, the last of the previous page): only those listed after it. The order is the
        index's: by `<slot>[~suffix]#<id>` (`listing_key`), newest first."""
        ...

    def instances_for_date(self, task_id: str, day: date) -> list[InstanceRecord]:
        """Every instance of `task_id` for business date `day` (scheduled, reruns, manual runs,
        backfills), oldest first, however old: found by key, never in a window of recent ones."""
        ...

    def take_lease(
        self,
        instance_id: str,
        index: int,
        *,
        bounds: dict[str, object],
        worker: str,
        now: datetime,
        lease_until: datetime,
        max_attempts: int,
        indexed: bool = False,
    ) -> LeaseResult:
        """Take shard `index` per `iotsched.core.decisions.decide_lease`, in one conditional write.

        On success the record has attempt + 1, owner `worker`, `lease_until`, status running and
        a new open entry in `attempts`. The new attempt's lease is listed by `expired_leases`
        from the first move of its end on (`extend_lease`), or at once if `indexed`.
        """
        ...

    def extend_lease(
        self,
        instance_id: str,
        index: int,
        *,
        attempt: int,
        until: datetime,
        was: datetime | None = None,
    ) -> None:
        """Move the lease deadline; raises StaleAttemptError if `attempt` lost the lease, or if
        `was` is given and the deadline is no longer `was` (a renewal since it was read)."""
        ...

    def release_shard(self, instance_id: str, index: int, *, attempt: Attempt) -> None:
        """End a failed attempt that will be retried: status pending, lease cleared.

        Fenced on `attempt.number`; raises StaleAttemptError if another attempt took over.
        """
        ...

    def complete_shard(
        self,
        instance_id: str,
        index: int,
        *,
        status: ShardStatus,
        attempt: Attempt,
        error: str | None = None,
        result: Mapping[str, Any] | None = None,
        expires_at: datetime | None = None,
    ) -> CompletionResult:
        """Write the shard's final status (and partial result) and decrement the counter.

        Both writes are one transaction, fenced on `attempt.number`: a zombie attempt whose lease
        was taken over raises StaleAttemptError and changes nothing. `expires_at`: when the
        record may be deleted (its instance's retention), written with the final status.
        """
        ...

    def complete_shards(self, completions: Sequence[ShardCompletion]) -> list[CompletionVerdict]:
        """`complete_shard` for the finished shards of one worker batch, in few requests.

        Each shard's final write is fenced on its attempt as in `complete_shard`; each instance's
        counter is decremented once by the number of its shards written (`failed_shards` raised
        by those not succeeded), in the same transaction as those shards: a counter never counts
        a shard that is not final, nor one twice. Returns a verdict per completion, in order. A
        shard may appear once. The caller reads the instances afterwards to learn `remaining`.
        """
        ...

    def dead_letter_shard(
        self,
        instance_id: str,
        index: int,
        *,
        bounds: dict[str, object],
        max_attempts: int,
        error: str,
        now: datetime,
        expires_at: datetime | None = None,
    ) -> CompletionResult | None:
        """End a shard whose message went to the DLQ as failed, whatever its state short of final
        (`expires_at` written with it, as in `complete_shard`).

        The shard write and the counter decrement are one transaction. An attempt still running
        is closed `lost` (error `error`, ended `now`) in the same write, fenced on its number.
        Returns None if the shard had already ended (a duplicate DLQ delivery): nothing changes.
        """
        ...

    def take_start(
        self,
        instance_id: str,
        *,
        gate: str | None,
        minute: datetime,
        limit: int | None,
        weight: int = 1,
    ) -> StartVerdict:
        """Count one shard start of `weight` in `minute` (the scheduler's clock, floored) on the
        gate `gate` (a key part shared by several instances, e.g. `<tenant>#<task>`; None: the
        instance's own), with one conditional write.

        STARTED if the minute's starts plus `weight` stay within `limit`, or the minute has no
        start yet (a shard heavier than the whole limit starts alone); WAIT if not (nothing
        counted); CLOSED if `close_starts` closed the instance's starts (checked on the
        instance's own gate whatever `gate` is). `limit` None: no rate, only the fence (a read,
        nothing counted). A minute older than the gate's is counted in the gate's (a clock
        behind another's). Concurrent callers never count past `limit`; a start whose response
        was lost and was sent again is counted once and answers STARTED.
        StoreContendedError if contention outlasted the retries.
        """
        ...

    def take_tenant_slot(
        self, tenant: str, holder: str, *, cap: int, now: datetime, until: datetime
    ) -> int | None:
        """Take one of the tenant's `cap` in-flight slots for `holder` (unique to this take)
        until `until`: the slot's index, or None if `cap` slots are held by leases live at
        `now` (nothing written). A slot whose lease ended (its holder died) is free again.

        Each slot is taken by one conditional write, so concurrent takers never hold more
        than `cap` live slots between them. A take whose response was lost and was sent again
        is read as taken (the slot names `holder`). StoreContendedError if contention
        outlasted the retries.
        """
        ...

    def extend_tenant_slot(self, tenant: str, slot: int, holder: str, *, until: datetime) -> bool:
        """Move the slot's lease to `until` if `holder` still holds it (a heartbeat of a long
        attempt); False if it does not (its lease ended and another took it)."""
        ...

    def release_tenant_slot(self, tenant: str, slot: int, holder: str) -> None:
        """Free the slot if `holder` still holds it (idempotent: a slot another taker took
        since is left alone)."""
        ...

    def close_starts(self, instance_id: str, reason: str) -> None:
        """Close the instance's starts (idempotent; the gate item is made if absent): once it
        returns, no `take_start` of the instance answers STARTED."""
        ...

    def get_shard(self, instance_id: str, index: int) -> ShardRecord | None:
        """One shard's record (a consistent read), or None if no attempt has touched it."""
        ...

    def list_shards(self, instance_id: str) -> list[ShardRecord]:
        """Shard records that exist (an attempt has touched them), by index."""
        ...

    def record_effect(
        self,
        key: str,
        *,
        instance_id: str,
        index: int,
        attempt: int,
        writes: Sequence[Mapping[str, Any]] = (),
        listed: bool = True,
        expires_at: datetime | None = None,
    ) -> bool:
        """Record effect `key` once, fenced on the attempt; `listed`: and list it on that
        attempt's record (the worker lists an attempt's first `LISTED_KEYS` keys; the shard
        record never grows with the rest). `expires_at`: when the key may be deleted (TTL),
        after any redelivery of the shard's message could come back.

        `writes` (TransactWriteItems entries on the scheduler's table) commit in the same
        transaction. Returns False if any earlier run already recorded the key (nothing is
        written). Nothing is written either when it raises: StaleAttemptError if `attempt` no
        longer holds the shard (a zombie); EffectConditionError if a condition of `writes`
        failed; StoreContendedError if contention or throttling outlasted the retries;
        WriteRejectedError if the store refused the request (an item too large, ...).
        """
        ...


class BlockingStore(Protocol):
    """The task's hold for non-parallel blocking policies, decided atomically with the claim."""

    def claim_exclusive(self, instance: InstanceRecord) -> ExclusiveClaim:
        """Create the instance and make it the task's holder, iff its key is free and nothing
        holds the task (one transaction). BLOCKED names the holder."""
        ...

    def enqueue_instance(self, instance: InstanceRecord, *, max_queued: int) -> ExclusiveClaim:
        """Create the instance (status queued) at the end of the task's queue, iff something
        holds the task and fewer than `max_queued` wait (one transaction)."""
        ...

    def take_over(self, instance: InstanceRecord, *, holder: str) -> ExclusiveClaim:
        """Create the instance and make it the holder in place of `holder` (cover)."""
        ...

    def release_task(self, task_id: str, instance_id: str) -> str | None:
        """If `instance_id` holds the task, pass the hold to the oldest queued instance (returned)
        or clear it (None). A caller that does not hold the task changes nothing."""
        ...
