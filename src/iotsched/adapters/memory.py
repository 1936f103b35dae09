"""In-memory fakes of every port, for unit tests and the contract suite.

They enforce the same conditions as the DynamoDB/SQS/SNS adapters (the contract tests run one
suite on both) and record what tests need to see: sent messages and published alerts.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, date, datetime, timedelta
from typing import Any

from iotsched.adapters import transact
from iotsched.adapters.transact import Kind, Outcome
from iotsched.core.buckets import DEFAULT_BUCKETS, bucket_of
from iotsched.core.decisions import LeaseVerdict, decide_lease
from iotsched.core.model import AfterTrigger
from iotsched.core.records import (
    Alert,
    Attempt,
    FollowUp,
    InstanceRecord,
    InstanceStatus,
    ShardMessage,
    ShardRecord,
    ShardStatus,
    TaskRecord,
    listing_key,
)
from iotsched.core.timeutil import to_ms
from iotsched.ports import (
    MAX_CLAIM_GROUP,
    AlertEntry,
    BucketTick,
    ClaimOutcome,
    Clock,
    CompletionResult,
    CompletionVerdict,
    EffectConditionError,
    ExclusiveClaim,
    LeaseResult,
    MessageTooLargeError,
    ShardCompletion,
    StaleAttemptError,
    StoreContendedError,
    TaskAdvance,
    TickLease,
    WriteRejectedError,
)

#: A test's stand-in for DynamoDB's answers: called with a transactional write's name and its
#: number of actions (in the DynamoDB adapter's order), it returns None (go ahead) or an error
#: response as botocore gives it (`{"Error": {...}, "CancellationReasons": [...]}`).
FaultHook = Callable[[str, int], Mapping[str, Any] | None]

#: What SQS accepts in one message (and, batched, in one request).
MAX_MESSAGE_BYTES = 1024 * 1024


def _ms(at: datetime | None) -> int | None:
    """An instant as DynamoDB stores a lease's end (whole milliseconds), for comparisons."""
    return None if at is None else to_ms(at)


def _owed(owed: Sequence[FollowUp]) -> list[FollowUp]:
    """Follow-ups as the store keeps them: a set, in a stable order (as DynamoDB's string set)."""
    return sorted(set(owed), key=lambda step: step.value)


class MemoryTaskStore:
    """TaskStore in a dict."""

    def __init__(self, *, buckets: int = DEFAULT_BUCKETS) -> None:
        self._tasks: dict[str, TaskRecord] = {}
        self._lock = threading.Lock()
        self._buckets = buckets
        self._ticks: dict[int, dict[str, Any]] = {}  # bucket -> its dispatch lease

    def put_tasks(self, tasks: Sequence[TaskRecord]) -> None:
        with self._lock:
            for task in tasks:
                current = self._tasks.get(task.task_id)
                hold = {"active": current.active, "queue": current.queue} if current else {}
                self._tasks[task.task_id] = task.model_copy(update=hold)

    def get_task(self, task_id: str) -> TaskRecord | None:
        return self._tasks.get(task_id)

    def children_of(self, task_id: str) -> list[str]:
        return sorted(
            t.task_id
            for t in self._tasks.values()
            if isinstance(t.definition.trigger, AfterTrigger)
            and task_id in t.definition.trigger.after
        )

    def list_tasks(self, *, after: str | None = None, limit: int | None = None) -> list[TaskRecord]:
        ids = [k for k in sorted(self._tasks) if after is None or k > after]
        return [self._tasks[k] for k in ids[:limit]]

    def due_tasks(
        self, now: datetime, *, bucket: int | None = None, limit: int | None = None
    ) -> list[TaskRecord]:
        return sorted(
            (
                t
                for t in self._tasks.values()
                if t.fires
                and t.next_fire is not None
                and t.next_fire <= now
                and (bucket is None or bucket_of(t.task_id, self._buckets) == bucket)
            ),
            key=lambda t: (t.next_fire, t.task_id),
        )[:limit]

    def take_tick(
        self, bucket: int, minute: datetime, *, owner: str, now: datetime, until: datetime
    ) -> TickLease:
        with self._lock:
            lease = self._ticks.setdefault(bucket, {})
            free = lease.get("until") is None or lease["until"] <= now or lease["owner"] == owner
            fresh = lease.get("done") != minute
            if free and fresh:
                lease.update(owner=owner, until=until, minute=minute)
                return TickLease(taken=True, owner=owner, minute=minute, until=until)
            live = lease.get("until") is not None and lease["until"] > now
            return TickLease(
                taken=False,
                owner=lease["owner"] if live else None,
                minute=lease["minute"] if live else None,
                until=lease["until"] if live else None,
                done=lease.get("done"),
            )

    def release_tick(self, bucket: int, *, owner: str, minute: datetime, done: bool) -> bool:
        with self._lock:
            lease = self._ticks.get(bucket, {})
            if lease.get("owner") != owner:
                return False
            lease["until"] = datetime.fromtimestamp(0, tz=UTC)
            if done:
                lease["done"] = minute
            return True

    def delete_task(self, task_id: str) -> bool:
        with self._lock:
            task = self._tasks.get(task_id)
            if task is None or task.active is not None:
                return False
            del self._tasks[task_id]
            return True

    def set_paused(
        self, task_id: str, *, paused: bool, next_fire: datetime | None, last_slot: datetime | None
    ) -> bool:
        with self._lock:
            task = self._tasks.get(task_id)
            if task is None:
                return False
            self._tasks[task_id] = task.model_copy(
                update={"paused": paused, "next_fire": next_fire, "last_slot": last_slot}
            )
            return True

    def advance_task(
        self,
        task_id: str,
        *,
        expected_next_fire: datetime | None,
        next_fire: datetime | None,
        last_slot: datetime | None,
    ) -> bool:
        with self._lock:
            task = self._tasks.get(task_id)
            if task is None or task.next_fire != expected_next_fire:
                return False
            self._tasks[task_id] = task.model_copy(
                update={
                    "next_fire": next_fire,
                    "last_slot": last_slot if last_slot is not None else task.last_slot,
                }
            )
            return True

    def advance_tasks(self, advances: Sequence[TaskAdvance]) -> list[bool]:
        return [
            self.advance_task(
                a.task_id,
                expected_next_fire=a.expected_next_fire,
                next_fire=a.next_fire,
                last_slot=a.last_slot,
            )
            for a in advances
        ]


class MemoryInstanceStore:
    """InstanceStore in dicts, one lock standing in for DynamoDB's per-item atomicity."""

    def __init__(self, *, buckets: int = DEFAULT_BUCKETS) -> None:
        self._buckets = buckets
        self._instances: dict[str, InstanceRecord] = {}
        self._shards: dict[tuple[str, int], ShardRecord] = {}
        # Running attempts whose lease is in the lease index: as DynamoDBStore's, an attempt
        # enters it with the first move of its lease's end (`extend_lease`), not with the take.
        self._indexed: set[tuple[str, int]] = set()
        self._effects: dict[str, tuple[str, int, int]] = {}
        self.effect_writes: dict[str, list[Mapping[str, Any]]] = {}
        self.effect_expiry: dict[str, datetime | None] = {}  # when each key may be deleted
        self._requests: dict[str, str] = {}
        self._lock = threading.Lock()
        self.fault_hook: FaultHook | None = None

    def _transaction(self, operation: str, actions: int, *, what: str) -> Outcome:
        """As the DynamoDB adapter's transactions under the faults a test injects: COMMITTED
        (then the write is applied here), or the injected outcome, sent again while it says
        retry (then StoreContendedError)."""
        hook = self.fault_hook
        if hook is None:
            return transact.COMMITTED
        return transact.retrying(
            lambda: transact.classify(hook(operation, actions), actions), what=what
        )

    def claim_instance(self, instance: InstanceRecord) -> InstanceRecord | None:
        with self._lock:
            existing = self._instances.get(instance.instance_id)
            if existing is not None:
                return existing
            self._instances[instance.instance_id] = instance
            return None

    def claim_instances(self, groups: Sequence[Sequence[InstanceRecord]]) -> list[bool]:
        # As the DynamoDB adapter: a group is one transaction (at most MAX_CLAIM_GROUP
        # actions, each item once), all of it or none of it.
        won = []
        with self._lock:
            for group in groups:
                ids = [i.instance_id for i in group]
                if (
                    len(ids) > MAX_CLAIM_GROUP
                    or len(set(ids)) != len(ids)
                    or any(i in self._instances for i in ids)
                ):
                    won.append(False)
                    continue
                self._instances.update((i.instance_id, i) for i in group)
                won.append(True)
        return won

    def mark_running(self, instance_ids: Sequence[str]) -> list[bool]:
        return [
            self.set_instance_status(
                i, expected=InstanceStatus.PLANNING, status=InstanceStatus.RUNNING
            )
            for i in instance_ids
        ]

    def take_dispatch(self, instance_id: str, *, now: datetime, until: datetime) -> bool:
        with self._lock:
            inst = self._instances.get(instance_id)
            if inst is None or inst.status not in (
                InstanceStatus.PLANNING,
                InstanceStatus.REDUCING,
            ):
                return False
            if inst.dispatch_lease_until is not None and inst.dispatch_lease_until > now:
                return False
            self._instances[instance_id] = inst.model_copy(update={"dispatch_lease_until": until})
            return True

    def advance_dispatch(
        self, instance_id: str, *, sent: int, held: datetime | None, until: datetime
    ) -> bool:
        with self._lock:
            inst = self._instances.get(instance_id)
            if (
                inst is None
                or inst.status is not InstanceStatus.PLANNING
                or _ms(inst.dispatch_lease_until) != _ms(held)
            ):
                return False
            self._instances[instance_id] = inst.model_copy(
                update={"sent": sent, "dispatch_lease_until": until}
            )
            return True

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
        with self._lock:
            inst = self._instances.get(instance_id)
            if inst is None or inst.status is not expected:
                return False
            update: dict[str, object] = {"status": status}
            if reason is not None:
                update["reason"] = reason
            if finished_at is not None:
                update["finished_at"] = finished_at
            if owed and status.final:
                update["owed"] = _owed(owed)
            self._instances[instance_id] = inst.model_copy(update=update)
            return True

    def finalize_instance(
        self,
        instance_id: str,
        *,
        status: InstanceStatus,
        finished_at: datetime,
        owed: Sequence[FollowUp] = (),
    ) -> bool:
        with self._lock:
            inst = self._instances.get(instance_id)
            if inst is None or inst.status.final or inst.remaining != 0:
                return False
            self._instances[instance_id] = inst.model_copy(
                update={"status": status, "finished_at": finished_at, "owed": _owed(owed)}
            )
            return True

    def settle_followup(self, instance_id: str, step: FollowUp) -> bool:
        with self._lock:
            inst = self._instances.get(instance_id)
            if inst is None or step not in inst.owed:
                return False
            self._instances[instance_id] = inst.model_copy(
                update={"owed": [s for s in inst.owed if s is not step]}
            )
            return True

    def owing_instances(self, *, limit: int = 1000) -> list[InstanceRecord]:
        found = [i for i in self._instances.values() if i.owed]
        found.sort(key=lambda i: (i.finished_at or i.created_at, i.instance_id))
        return found[:limit]

    def _counted_move(self, what: str) -> bool:
        """An injected outcome of the DynamoDB adapter's transaction of the instance's move to
        reducing and its counter (2 actions): False if the move's condition failed, True to go ahead (the
        counter's refusal alone is decided again on the counter as it is, as the adapter
        does after reading it)."""
        outcome = self._transaction("counted_move", 2, what=what)
        if outcome.kind is Kind.INVALID:
            raise WriteRejectedError(f"{what}: {outcome.describe()}")
        return outcome.kind is Kind.COMMITTED or outcome.failed == (1,)

    def start_reduce(self, instance_id: str, *, now: datetime, until: datetime) -> bool:
        if not self._counted_move(f"reduce of {instance_id}"):
            return False
        with self._lock:
            inst = self._instances.get(instance_id)
            if (
                inst is None
                or inst.status not in (InstanceStatus.PLANNING, InstanceStatus.RUNNING)
                or inst.remaining != 0
                or inst.failed_shards != 0
            ):
                return False
            self._instances[instance_id] = inst.model_copy(
                update={
                    "status": InstanceStatus.REDUCING,
                    "remaining": 1,
                    "dispatch_lease_until": until,
                }
            )
            return True

    def end_instance(
        self,
        instance_id: str,
        *,
        status: InstanceStatus,
        reason: str,
        finished_at: datetime,
        owed: Sequence[FollowUp] = (),
    ) -> bool:
        with self._lock:
            inst = self._instances.get(instance_id)
            if inst is None or inst.status.final:
                return False
            self._instances[instance_id] = inst.model_copy(
                update={
                    "status": status,
                    "reason": reason,
                    "finished_at": finished_at,
                    "owed": _owed(owed),
                }
            )
            return True

    def due_submissions(
        self, now: datetime, *, bucket: int | None = None, limit: int | None = None
    ) -> list[InstanceRecord]:
        found = [
            i
            for i in self._instances.values()
            if i.status is InstanceStatus.SCHEDULED
            and i.fire_at is not None
            and i.fire_at <= now
            and (bucket is None or bucket_of(i.instance_id, self._buckets) == bucket)
        ]
        return sorted(found, key=lambda i: (i.fire_at, i.instance_id))[:limit]

    def record_request(self, request_key: str, instance_id: str) -> str:
        with self._lock:
            return self._requests.setdefault(request_key, instance_id)

    def open_instances(self, *, limit: int = 1000) -> list[InstanceRecord]:
        found = [i for i in self._instances.values() if not i.status.final]
        found.sort(key=lambda i: (i.deadline, i.instance_id))
        return found[:limit]

    def expired_leases(self, now: datetime, *, limit: int = 1000) -> list[ShardRecord]:
        found = [
            s
            for key, s in self._shards.items()
            if s.status is ShardStatus.RUNNING
            and key in self._indexed
            and s.lease_until is not None
            and s.lease_until <= now
        ]
        found.sort(key=lambda s: (s.lease_until, s.instance_id, s.index))
        return found[:limit]

    def get_instance(self, instance_id: str) -> InstanceRecord | None:
        return self._instances.get(instance_id)

    def list_instances(
        self,
        *,
        task_id: str | None = None,
        status: InstanceStatus | None = None,
        limit: int = 100,
        before: str | None = None,
    ) -> list[InstanceRecord]:
        found = [
            i
            for i in self._instances.values()
            if (task_id is None or i.task_id == task_id)
            and (status is None or i.status is status)
            and (before is None or listing_key(i.instance_id) < listing_key(before))
        ]
        found.sort(key=lambda i: listing_key(i.instance_id), reverse=True)
        return found[:limit]

    def instances_for_date(self, task_id: str, day: date) -> list[InstanceRecord]:
        found = [
            i for i in self._instances.values() if i.task_id == task_id and i.business_date == day
        ]
        return sorted(found, key=lambda i: (i.created_at, i.instance_id))

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
        with self._lock:
            shard = self._shards.get((instance_id, index))
            verdict = decide_lease(shard, now=now, max_attempts=max_attempts)
            if verdict is not LeaseVerdict.TAKE:
                assert shard is not None
                return LeaseResult(taken=False, shard=shard)
            number = (shard.attempt if shard else 0) + 1
            attempts = list(shard.attempts) if shard else []
            if shard is not None and shard.status is ShardStatus.RUNNING and attempts:
                attempts[-1] = attempts[-1].lost(now)  # a takeover: its lease expired
            attempts.append(Attempt(number=number, worker=worker, started_at=now))
            taken = ShardRecord(
                instance_id=instance_id,
                index=index,
                bounds=dict(shard.bounds) if shard else dict(bounds),
                status=ShardStatus.RUNNING,
                attempt=number,
                max_attempts=max_attempts,
                owner=worker,
                lease_until=lease_until,
                attempts=attempts,
            )
            self._shards[(instance_id, index)] = taken
            if indexed:
                self._indexed.add((instance_id, index))
            else:  # a new attempt starts out of the index
                self._indexed.discard((instance_id, index))
            return LeaseResult(taken=True, shard=taken)

    def _fenced(self, instance_id: str, index: int, attempt: int) -> ShardRecord:
        shard = self._shards.get((instance_id, index))
        if shard is None or shard.attempt != attempt or shard.status is not ShardStatus.RUNNING:
            raise StaleAttemptError(
                f"{instance_id} shard {index}: attempt {attempt} lost the lease"
            )
        return shard

    def extend_lease(
        self,
        instance_id: str,
        index: int,
        *,
        attempt: int,
        until: datetime,
        was: datetime | None = None,
    ) -> None:
        with self._lock:
            shard = self._fenced(instance_id, index, attempt)
            if was is not None and shard.lease_until != was:
                raise StaleAttemptError(f"{instance_id} shard {index}: the lease was renewed")
            self._shards[(instance_id, index)] = shard.model_copy(update={"lease_until": until})
            self._indexed.add((instance_id, index))

    def release_shard(self, instance_id: str, index: int, *, attempt: Attempt) -> None:
        with self._lock:
            shard = self._fenced(instance_id, index, attempt.number)
            attempts = [*shard.attempts[:-1], attempt]
            self._shards[(instance_id, index)] = shard.model_copy(
                update={
                    "status": ShardStatus.PENDING,
                    "lease_until": None,
                    "owner": None,
                    "attempts": attempts,
                    "error": attempt.error,
                }
            )

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
        what = f"completion of {instance_id} shard {index}"
        outcome = self._transaction("complete_shard", 2, what=what)
        # the counter's refusal alone is decided again on the counter (as the adapter does)
        if outcome.kind is Kind.CONDITION_FAILED and outcome.failed != (1,):
            raise StaleAttemptError(
                f"{instance_id} shard {index}: attempt {attempt.number} is stale"
            )
        if outcome.kind is Kind.INVALID:
            raise WriteRejectedError(f"{what}: {outcome.describe()}")
        with self._lock:
            shard = self._shards.get((instance_id, index))
            inst = self._instances.get(instance_id)
            if inst is None:
                raise StaleAttemptError(f"{instance_id} does not exist")
            # A lease taken by `attempt` (running), or an exhausted lease ended by the next
            # message (timed_out): either way fenced on the attempt number.
            if (
                shard is None
                or shard.attempt != attempt.number
                or shard.status is not ShardStatus.RUNNING
            ):
                raise StaleAttemptError(
                    f"{instance_id} shard {index}: attempt {attempt.number} is stale"
                )
            attempts = [*shard.attempts[:-1], attempt]
            self._shards[(instance_id, index)] = shard.model_copy(
                update={
                    "status": status,
                    "lease_until": None,
                    "attempts": attempts,
                    "error": error,
                    "result": dict(result) if result is not None else None,
                    "expires_at": expires_at,
                }
            )
            failed = inst.failed_shards + (0 if status is ShardStatus.SUCCEEDED else 1)
            self._instances[instance_id] = inst.model_copy(
                update={"remaining": inst.remaining - 1, "failed_shards": failed}
            )
            return CompletionResult(remaining=inst.remaining - 1, failed_shards=failed)

    #: As DynamoDBStore's: contended rounds before the completions are UNWRITTEN.
    COMPLETION_ROUNDS = 12

    def complete_shards(self, completions: Sequence[ShardCompletion]) -> list[CompletionVerdict]:
        keys = [(c.instance_id, c.index) for c in completions]
        if len(set(keys)) != len(keys):
            raise ValueError("a shard appears twice among the completions")
        actions = len(completions) + len({c.instance_id for c in completions})
        hook = self.fault_hook
        for _ in range(self.COMPLETION_ROUNDS if hook else 1):
            outcome = transact.classify(hook("complete_shards", actions) if hook else None, actions)
            if outcome.kind is not Kind.RETRY:
                break
        if outcome.kind is not Kind.COMMITTED:  # contended throughout, or refused: not written
            return [CompletionVerdict.UNWRITTEN] * len(completions)
        with self._lock:
            # As the DynamoDB transaction: every shard whose fence holds, with one decrement
            # per instance by their number (refused, with its shards, if it would go below 0).
            verdicts = [
                CompletionVerdict.COMMITTED
                if self._holds(c.instance_id, c.index, c.attempt.number)
                and c.instance_id in self._instances
                else CompletionVerdict.STALE
                for c in completions
            ]
            counts: dict[str, int] = {}
            for c, verdict in zip(completions, verdicts, strict=True):
                if verdict is CompletionVerdict.COMMITTED:
                    counts[c.instance_id] = counts.get(c.instance_id, 0) + 1
            short = {i for i, n in counts.items() if self._instances[i].remaining < n}
            for n, c in enumerate(completions):
                if c.instance_id in short:
                    verdicts[n] = CompletionVerdict.STALE
                if verdicts[n] is not CompletionVerdict.COMMITTED:
                    continue
                shard = self._shards[(c.instance_id, c.index)]
                self._shards[(c.instance_id, c.index)] = shard.model_copy(
                    update={
                        "status": c.status,
                        "lease_until": None,
                        "attempts": [*shard.attempts[:-1], c.attempt],
                        "error": c.error,
                        "result": dict(c.result) if c.result is not None else None,
                        "expires_at": c.expires_at,
                    }
                )
                inst = self._instances[c.instance_id]
                failed = inst.failed_shards + (0 if c.status is ShardStatus.SUCCEEDED else 1)
                self._instances[c.instance_id] = inst.model_copy(
                    update={"remaining": inst.remaining - 1, "failed_shards": failed}
                )
            return verdicts

    def _holds(self, instance_id: str, index: int, attempt: int) -> bool:
        shard = self._shards.get((instance_id, index))
        return (
            shard is not None and shard.attempt == attempt and shard.status is ShardStatus.RUNNING
        )

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
        what = f"dead letter of {instance_id} shard {index}"
        # As the DynamoDB adapter: the shard read first (final: None), then the transaction; a
        # shard condition that fails means it moved since the read: read it again.
        for _ in range(transact.ROUNDS):
            with self._lock:
                read = self._shards.get((instance_id, index))
            if read is not None and read.status.final:
                return None
            outcome = self._transaction("dead_letter_shard", 2, what=what)
            if outcome.kind is Kind.INVALID:
                raise WriteRejectedError(f"{what}: {outcome.describe()}")
            if outcome.kind is Kind.CONDITION_FAILED and 0 in outcome.failed:
                continue
            # the counter's refusal alone is decided on the counter as it is (`_dead_letter`)
            return self._dead_letter(
                instance_id, index, bounds, max_attempts, error, now, expires_at
            )
        raise StoreContendedError(f"{what}: the shard kept changing; try again")

    def _dead_letter(
        self,
        instance_id: str,
        index: int,
        bounds: dict[str, object],
        max_attempts: int,
        error: str,
        now: datetime,
        expires_at: datetime | None,
    ) -> CompletionResult | None:
        with self._lock:
            inst = self._instances.get(instance_id)
            shard = self._shards.get((instance_id, index))
            if inst is None or inst.remaining < 1 or (shard is not None and shard.status.final):
                return None
            if shard is None:
                shard = ShardRecord(
                    instance_id=instance_id,
                    index=index,
                    bounds=dict(bounds),
                    status=ShardStatus.PENDING,
                    max_attempts=max_attempts,
                )
            attempts = list(shard.attempts)
            if (
                shard.status is ShardStatus.RUNNING
                and len(attempts) == shard.attempt >= 1
                and attempts[-1].outcome is None
            ):
                attempts[-1] = attempts[-1].lost(now, error)  # the attempt it ends, as DynamoDB's
            self._shards[(instance_id, index)] = shard.model_copy(
                update={
                    "status": ShardStatus.FAILED,
                    "lease_until": None,
                    "error": error,
                    "attempts": attempts,
                    "expires_at": expires_at,
                }
            )
            failed = inst.failed_shards + 1
            self._instances[instance_id] = inst.model_copy(
                update={"remaining": inst.remaining - 1, "failed_shards": failed}
            )
            return CompletionResult(remaining=inst.remaining - 1, failed_shards=failed)

    def get_shard(self, instance_id: str, index: int) -> ShardRecord | None:
        return self._shards.get((instance_id, index))

    def list_shards(self, instance_id: str) -> list[ShardRecord]:
        return sorted(
            (s for (iid, _), s in self._shards.items() if iid == instance_id),
            key=lambda s: s.index,
        )

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
        # The DynamoDB adapter's actions: 0 the shard's fence, 1 the effect, 2.. the writes.
        outcome = self._transaction("record_effect", 2 + len(writes), what=f"effect {key!r}")
        if outcome.kind is Kind.CONDITION_FAILED:
            if 0 in outcome.failed:
                raise StaleAttemptError(
                    f"{instance_id} shard {index}: attempt {attempt} lost the lease"
                )
            if 1 in outcome.failed:
                return False
            write = outcome.failed[0] - 2
            raise EffectConditionError(
                f"effect {key!r}: the condition of its write {write} failed; nothing was "
                "written and the key is not claimed",
                index=write,
            )
        if outcome.kind is Kind.INVALID:
            raise WriteRejectedError(f"effect {key!r} not recorded: {outcome.describe()}")
        with self._lock:
            shard = self._fenced(instance_id, index, attempt)
            if key in self._effects:
                return False
            self._effects[key] = (instance_id, index, attempt)
            self.effect_expiry[key] = expires_at
            self.effect_writes[key] = list(writes)  # committed with the key (not interpreted)
            if listed:
                last = shard.attempts[-1]
                attempts = [
                    *shard.attempts[:-1],
                    last.model_copy(update={"keys": [*last.keys, key]}),
                ]
                self._shards[(instance_id, index)] = shard.model_copy(update={"attempts": attempts})
            return True


class MemoryStore(MemoryTaskStore, MemoryInstanceStore):
    """Both stores as one object (as DynamoDBStore is), with the blocking hold on tasks.

    One lock serves both, standing in for a DynamoDB transaction across the two items.
    """

    def __init__(self, *, buckets: int = DEFAULT_BUCKETS) -> None:
        MemoryTaskStore.__init__(self, buckets=buckets)
        MemoryInstanceStore.__init__(self, buckets=buckets)
        self._lock = threading.RLock()  # type: ignore[assignment]

    def _holding(self, instance: InstanceRecord, update: dict[str, object]) -> None:
        task = self._tasks[instance.task_id]
        self._tasks[instance.task_id] = task.model_copy(update=update)
        self._instances[instance.instance_id] = instance

    def _claimed_with(self, instance: InstanceRecord) -> ExclusiveClaim | None:
        """An injected outcome of the claim's transaction (0 the instance, 1 the task, 2 the
        counter of an instance not final), as the DynamoDB adapter reads it; None: go ahead."""
        what = f"claim of {instance.instance_id}"
        outcome = self._transaction("claim", 2 if instance.status.final else 3, what=what)
        if outcome.kind is Kind.INVALID:
            raise WriteRejectedError(f"{what}: {outcome.describe()}")
        if outcome.kind is Kind.CONDITION_FAILED and 0 in outcome.failed:
            return ExclusiveClaim(
                ClaimOutcome.DUPLICATE, existing=self._instances.get(instance.instance_id)
            )
        return None

    def claim_exclusive(self, instance: InstanceRecord) -> ExclusiveClaim:
        injected = self._claimed_with(instance)
        if injected is not None:
            return injected
        with self._lock:
            existing = self._instances.get(instance.instance_id)
            if existing is not None:
                return ExclusiveClaim(ClaimOutcome.DUPLICATE, existing=existing)
            holder = self._tasks[instance.task_id].active
            if holder is not None:
                return ExclusiveClaim(ClaimOutcome.BLOCKED, holder=holder)
            self._holding(instance, {"active": instance.instance_id})
            return ExclusiveClaim(ClaimOutcome.CLAIMED)

    def enqueue_instance(self, instance: InstanceRecord, *, max_queued: int) -> ExclusiveClaim:
        injected = self._claimed_with(instance)
        if injected is not None:
            return injected
        with self._lock:
            existing = self._instances.get(instance.instance_id)
            if existing is not None:
                return ExclusiveClaim(ClaimOutcome.DUPLICATE, existing=existing)
            task = self._tasks[instance.task_id]
            if task.active is None:
                return ExclusiveClaim(ClaimOutcome.FREE)
            if len(task.queue) >= max_queued:
                return ExclusiveClaim(ClaimOutcome.FULL, holder=task.active)
            self._holding(instance, {"queue": [*task.queue, instance.instance_id]})
            return ExclusiveClaim(ClaimOutcome.CLAIMED, holder=task.active)

    def take_over(self, instance: InstanceRecord, *, holder: str) -> ExclusiveClaim:
        injected = self._claimed_with(instance)
        if injected is not None:
            return injected
        with self._lock:
            existing = self._instances.get(instance.instance_id)
            if existing is not None:
                return ExclusiveClaim(ClaimOutcome.DUPLICATE, existing=existing)
            current = self._tasks[instance.task_id].active
            if current != holder:
                return ExclusiveClaim(ClaimOutcome.BLOCKED, holder=current)
            self._holding(instance, {"active": instance.instance_id})
            return ExclusiveClaim(ClaimOutcome.CLAIMED)

    def release_task(self, task_id: str, instance_id: str) -> str | None:
        with self._lock:
            task = self._tasks.get(task_id)
            if task is None or task.active != instance_id:
                return None
            head = task.queue[0] if task.queue else None
            self._tasks[task_id] = task.model_copy(update={"active": head, "queue": task.queue[1:]})
            return head


class MemoryShardQueue:
    """ShardQueue that keeps what was sent, in order, and counts batch requests.

    `held` is the last `hold_visibility` of each receipt (`held_until`: when that makes the
    message visible again, on `clock`); `refuse_holds` lists receipts whose hold does not
    apply, and `fail_holds` makes that many hold requests fail as a whole.
    """

    def __init__(self, clock: Clock | None = None) -> None:
        self.sent: list[ShardMessage] = []
        self.requests = 0
        self.visibility: dict[str, int] = {}
        self.held: dict[str, int] = {}
        self.held_until: dict[str, datetime] = {}
        self.hold_requests = 0
        self.refuse_holds: set[str] = set()
        self.fail_holds = 0
        self._clock = clock
        self._lock = threading.Lock()

    def send(self, messages: Sequence[ShardMessage]) -> int:
        for message in messages:
            size = len(message.model_dump_json().encode())
            if size > MAX_MESSAGE_BYTES:
                raise MessageTooLargeError(f"a shard message of {size} bytes exceeds the limit")
        with self._lock:
            self.sent.extend(messages)
            batches = (len(messages) + 9) // 10
            self.requests += batches
            return batches

    def extend_visibility(self, receipt_handle: str, seconds: int) -> None:
        self.visibility[receipt_handle] = seconds

    def hold_visibility(self, receipt_handles: Sequence[str], seconds: int) -> set[str]:
        with self._lock:
            self.hold_requests += (len(receipt_handles) + 9) // 10
            if self.fail_holds > 0:
                self.fail_holds -= 1
                raise ConnectionError("the hold request failed")
            refused = {h for h in receipt_handles if h in self.refuse_holds}
            for handle in receipt_handles:
                if handle in refused:
                    continue
                self.held[handle] = seconds
                if self._clock is not None:
                    self.held_until[handle] = self._clock.now() + timedelta(seconds=seconds)
            return refused


class MemoryAlertSink:
    """AlertSink and AlertLog in a list, deduplicated by alert id like the real one."""

    def __init__(self, clock: Clock | None = None) -> None:
        self.published: list[Alert] = []
        self._ids: set[str] = set()
        self._lock = threading.Lock()
        self._clock = clock

    def publish(self, alert: Alert) -> None:
        with self._lock:
            if alert.alert_id in self._ids:
                return
            self._ids.add(alert.alert_id)
            if alert.raised_at is None and self._clock is not None:
                alert = alert.model_copy(update={"raised_at": self._clock.now()})
            self.published.append(alert)

    def recent(self, *, limit: int = 50) -> list[Alert]:
        # newest raised first, as the DynamoDB log's sort key (`<raised at>#<id>`) orders them
        ordered = sorted(
            enumerate(self.published),
            key=lambda e: (e[1].raised_at is not None, e[1].raised_at, e[1].alert_id, e[0]),
            reverse=True,
        )
        return [alert for _, alert in ordered][:limit]

    def entries(self, *, limit: int = 50) -> list[AlertEntry]:
        return [AlertEntry(alert, pending=False) for alert in self.recent(limit=limit)]

    def unpublished(self, *, before: datetime, limit: int = 100) -> list[Alert]:
        return []  # a publish here is one step: recorded and published together


class MemoryDispatchQueue:
    """DispatchQueue that keeps what was sent (`sent`, in order) and each hold (`held`)."""

    def __init__(self) -> None:
        self.sent: list[BucketTick] = []
        self.held: dict[str, int] = {}
        self._lock = threading.Lock()

    def send_ticks(self, ticks: Sequence[BucketTick]) -> list[str]:
        with self._lock:
            first = len(self.sent)
            self.sent.extend(ticks)
            return [f"tick-{n}" for n in range(first, first + len(ticks))]

    def hold(self, receipt_handle: str, seconds: int) -> None:
        with self._lock:
            self.held[receipt_handle] = seconds
