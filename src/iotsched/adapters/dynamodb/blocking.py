"""The task's hold: exclusive claims, the queue behind one, its release."""

from __future__ import annotations

from typing import Any

from iotsched.adapters.dynamodb import transact_outcomes as transact
from iotsched.adapters.dynamodb.claims import Claims
from iotsched.adapters.dynamodb.keys import _task_key
from iotsched.adapters.dynamodb.transact_outcomes import Kind
from iotsched.adapters.dynamodb.transactions import _rejected
from iotsched.core.instance_record import InstanceRecord
from iotsched.ports.blocking import ClaimOutcome, ExclusiveClaim
from iotsched.ports.store_errors import StoreContendedError


class Blocking(Claims):
    """The task's hold: exclusive claims, the queue behind one, its release."""

    def _claim_with(self, instance: InstanceRecord, task_update: dict[str, Any]) -> str | None:
        """Put the instance and update its task in one transaction.

        Returns None on success, "instance" if the instance key was taken, "task" if the
        task's condition failed (and the instance's held). Contention and throttling are sent
        again (then StoreContendedError); an invalid request raises WriteRejectedError.
        """
        instance_put, *counter = self._claim_puts(instance)
        items: list[Any] = [
            instance_put,
            {
                "Update": {
                    "TableName": self._table,
                    "Key": _task_key(instance.task_id),
                    **task_update,
                }
            },
            *counter,  # last: the positions of the two conditions stay 0 and 1
        ]
        outcome = self._transaction(items, what=f"claim of {instance.instance_id}")
        if outcome.kind is Kind.COMMITTED:
            return None
        if outcome.kind is Kind.CONDITION_FAILED:
            return "instance" if 0 in outcome.failed else "task"
        raise _rejected(outcome, f"claim of {instance.instance_id}")

    def _duplicate(self, instance_id: str) -> ExclusiveClaim:
        return ExclusiveClaim(ClaimOutcome.DUPLICATE, existing=self.get_instance(instance_id))

    def claim_exclusive(self, instance: InstanceRecord) -> ExclusiveClaim:
        # The claim and the hold commit together:
        #   Transact[instance: if new; task: SET active = id IF no active]
        #   a second firing while the first runs ── task condition fails ──► BLOCKED by holder
        #   the hold released between the refusal and the read ──► tried again, a few times
        for _ in range(transact.ROUNDS):
            failed = self._claim_with(
                instance,
                {
                    "UpdateExpression": "SET active = :iid",
                    "ConditionExpression": "attribute_exists(pk) AND attribute_not_exists(active)",
                    "ExpressionAttributeValues": {":iid": {"S": instance.instance_id}},
                },
            )
            if failed == "instance":
                return self._duplicate(instance.instance_id)
            if failed is None:
                return ExclusiveClaim(ClaimOutcome.CLAIMED)
            task = self.get_task(instance.task_id)
            if task is None or task.active is not None:
                return ExclusiveClaim(ClaimOutcome.BLOCKED, holder=task.active if task else None)
        raise StoreContendedError(
            f"claim of {instance.instance_id}: the task's hold kept changing "
            f"({transact.ROUNDS} tries)"
        )

    def enqueue_instance(self, instance: InstanceRecord, *, max_queued: int) -> ExclusiveClaim:
        failed = self._claim_with(
            instance,
            {
                "UpdateExpression": "SET #q = list_append(if_not_exists(#q, :empty), :iid)",
                "ConditionExpression": (
                    "attribute_exists(active) AND (attribute_not_exists(#q) OR size(#q) < :max)"
                ),
                "ExpressionAttributeNames": {"#q": "queue"},
                "ExpressionAttributeValues": {
                    ":iid": {"L": [{"S": instance.instance_id}]},
                    ":empty": {"L": []},
                    ":max": {"N": str(max_queued)},
                },
            },
        )
        if failed == "instance":
            return self._duplicate(instance.instance_id)
        task = self.get_task(instance.task_id)
        holder = task.active if task else None
        if failed == "task":
            outcome = ClaimOutcome.FREE if holder is None else ClaimOutcome.FULL
            return ExclusiveClaim(outcome, holder=holder)
        return ExclusiveClaim(ClaimOutcome.CLAIMED, holder=holder)

    def take_over(self, instance: InstanceRecord, *, holder: str) -> ExclusiveClaim:
        failed = self._claim_with(
            instance,
            {
                "UpdateExpression": "SET active = :iid",
                "ConditionExpression": "active = :holder",
                "ExpressionAttributeValues": {
                    ":iid": {"S": instance.instance_id},
                    ":holder": {"S": holder},
                },
            },
        )
        if failed == "instance":
            return self._duplicate(instance.instance_id)
        if failed == "task":
            task = self.get_task(instance.task_id)
            return ExclusiveClaim(ClaimOutcome.BLOCKED, holder=task.active if task else None)
        return ExclusiveClaim(ClaimOutcome.CLAIMED)

    def release_task(self, task_id: str, instance_id: str) -> str | None:
        # Pass the hold on, guarded by what was read (a concurrent enqueue changes the size):
        #   UpdateItem SET active = queue[0], queue = rest IF active = me AND size(queue) = n
        for _ in range(5):
            task = self.get_task(task_id)
            if task is None or task.active != instance_id:
                return None
            names = {"#q": "queue"}
            values: dict[str, Any] = {":me": {"S": instance_id}}
            if task.queue:
                head, rest = task.queue[0], task.queue[1:]
                expression = "SET active = :head, #q = :rest"
                condition = "active = :me AND size(#q) = :n"
                values.update(
                    {
                        ":head": {"S": head},
                        ":rest": {"L": [{"S": i} for i in rest]},
                        ":n": {"N": str(len(task.queue))},
                    }
                )
            else:
                head = None
                expression = "REMOVE active"
                condition = "active = :me AND (attribute_not_exists(#q) OR size(#q) = :zero)"
                values[":zero"] = {"N": "0"}
            if self._update_if(_task_key(task_id), expression, condition, names, values):
                return head
        raise RuntimeError(f"could not release {task_id} from {instance_id}: too much contention")
