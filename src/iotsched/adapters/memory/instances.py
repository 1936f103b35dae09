"""Instance records in dicts: claims, status moves, follow-ups and the readers of instances."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import date, datetime
from typing import Any

from iotsched.adapters.dynamodb import transact_outcomes as transact
from iotsched.adapters.dynamodb.transact_outcomes import (
    Kind,
    Outcome,
)
from iotsched.core.buckets import DEFAULT_BUCKETS, bucket_of
from iotsched.core.instance_record import (
    FollowUp,
    InstanceRecord,
    InstanceStatus,
    incarnation_of,
    incarnation_order,
    listing_key,
)
from iotsched.core.shard_record import (
    ShardRecord,
    ShardStatus,
)
from iotsched.core.timeutil import to_ms
from iotsched.ports.instances import MAX_CLAIM_GROUP
from iotsched.ports.store_errors import WriteRejectedError

#: A test's stand-in for DynamoDB's answers: called with a transactional write's name and its
#: number of actions (in the DynamoDB adapter's order), it returns None (go ahead) or an error
#: response as botocore gives it (`{"Error": {...}, "CancellationReasons": [...]}`).
FaultHook = Callable[[str, int], Mapping[str, Any] | None]


def _ms(at: datetime | None) -> int | None:
    """An instant as DynamoDB stores a lease's end (whole milliseconds), for comparisons."""
    return None if at is None else to_ms(at)


def _owed(owed: Sequence[FollowUp]) -> list[FollowUp]:
    """Follow-ups as the store keeps them: a set, in a stable order (as DynamoDB's string set)."""
    return sorted(set(owed), key=lambda step: step.value)


class InstanceRecords:
    """Instances in dicts, one lock standing in for DynamoDB's per-item atomicity; the
    shards' part (`ShardRecords`) shares the dicts and the lock."""

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
        self,
        instance_id: str,
        *,
        sent: int,
        held: datetime | None,
        until: datetime,
        waiting: str | None = None,
        deadline: datetime | None = None,
    ) -> bool:
        with self._lock:
            inst = self._instances.get(instance_id)
            if (
                inst is None
                or inst.status is not InstanceStatus.PLANNING
                or _ms(inst.dispatch_lease_until) != _ms(held)
            ):
                return False
            update: dict[str, object] = {
                "sent": sent,
                "dispatch_lease_until": until,
                "waiting": waiting,
            }
            if deadline is not None:
                update["deadline"] = deadline
            self._instances[instance_id] = inst.model_copy(update=update)
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

    def instance_ended(self, instance_id: str) -> bool:
        found = self._instances.get(instance_id)
        return found is None or found.status.final

    def list_instances(
        self,
        *,
        task_id: str | None = None,
        status: InstanceStatus | None = None,
        limit: int = 100,
        before: str | None = None,
        incarnation: int | None = None,
    ) -> list[InstanceRecord]:
        # a task's in its items' key order (by incarnation, then slot); all by the status index's
        order = incarnation_order if task_id is not None else listing_key
        found = [
            i
            for i in self._instances.values()
            if (task_id is None or i.task_id == task_id)
            and (incarnation is None or incarnation_of(i.instance_id) == incarnation)
            and (status is None or i.status is status)
            and (before is None or order(i.instance_id) < order(before))
        ]
        found.sort(key=lambda i: order(i.instance_id), reverse=True)
        return found[:limit]

    def instances_for_date(self, task_id: str, day: date) -> list[InstanceRecord]:
        found = [
            i for i in self._instances.values() if i.task_id == task_id and i.business_date == day
        ]
        return sorted(found, key=lambda i: (i.created_at, i.instance_id))
