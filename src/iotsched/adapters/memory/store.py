"""The stores as the ports see them: MemoryInstanceStore, and MemoryStore with the task's hold."""

from __future__ import annotations

import threading

from iotsched.adapters.dynamodb.transact_outcomes import Kind
from iotsched.adapters.memory.gates import StartGates
from iotsched.adapters.memory.shards import ShardRecords
from iotsched.adapters.memory.slots import TenantSlots
from iotsched.adapters.memory.tasks import MemoryTaskStore
from iotsched.core.buckets import DEFAULT_BUCKETS
from iotsched.core.instance_record import InstanceRecord
from iotsched.ports.blocking import ClaimOutcome, ExclusiveClaim
from iotsched.ports.store_errors import WriteRejectedError


class MemoryInstanceStore(StartGates, TenantSlots, ShardRecords):
    """InstanceStore in dicts, one lock standing in for DynamoDB's per-item atomicity."""


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
