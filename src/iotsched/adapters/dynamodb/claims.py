"""Claims: an instance's first write with its counter, one by one or in batches."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError

from iotsched.adapters.dynamodb.codec import (
    _counter_item,
)
from iotsched.adapters.dynamodb.counter import Counters
from iotsched.adapters.dynamodb.keys import (
    _instance_key,
    _status_pk,
    counter_stripes,
    shard_parts,
)
from iotsched.adapters.dynamodb.transactions import (
    TRANSACTION_ACTIONS,
    _conditional_failure,
    _landed,
    _token,
)
from iotsched.core.instance_record import (
    InstanceRecord,
    InstanceStatus,
)
from iotsched.core.timeutil import iso, to_ms
from iotsched.ports.instances import MAX_CLAIM_GROUP


class Claims(Counters):
    """Claims: an instance's first write with its counter, one by one or in batches."""

    def claim_instance(self, instance: InstanceRecord) -> InstanceRecord | None:
        # The right to fire:
        #   dispatcher A: PutItem(if not exists) ── wins ──► its counter ──► plans, sends, ...
        #   dispatcher B: PutItem(if not exists) ── ConditionalCheckFailed + ALL_OLD ──► sees A's
        #   instance (resumes it only if A's dispatch lease expires)
        token = _token()
        try:
            self._single(
                f"claim of {instance.instance_id}",
                lambda: self._ddb.put_item(
                    TableName=self._table,
                    Item={**self._instance_item(instance), "write_token": {"S": token}},
                    ConditionExpression="attribute_not_exists(pk)",
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                ),
            )
        except ClientError as exc:
            if not _conditional_failure(exc):
                raise
            if not _landed(exc, token):
                old: Any = exc.response.get("Item")
                if old:
                    return self._instances_from([old])[0]
                existing = self.get_instance(instance.instance_id)
                if existing is None:  # pragma: no cover - the condition failed on an item
                    raise
                return existing
            # else our own put, its response lost: we won the claim
        if self._counted_alone(instance):
            self._put_counter(
                _counter_item(instance.instance_id, instance.remaining, instance.failed_shards)
            )
        return None

    def take_dispatch(self, instance_id: str, *, now: datetime, until: datetime) -> bool:
        return self._update_if(
            _instance_key(instance_id),
            "SET dispatch_lease_until_ms = :until",
            "#st IN (:planning, :reducing) AND (attribute_not_exists(dispatch_lease_until_ms) "
            "OR dispatch_lease_until_ms <= :now)",
            {"#st": "status"},
            {
                ":until": {"N": str(to_ms(until))},
                ":now": {"N": str(to_ms(now))},
                ":planning": {"S": InstanceStatus.PLANNING.value},
                ":reducing": {"S": InstanceStatus.REDUCING.value},
            },
        )

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
        # Fenced on the lease's end the caller set (or found, if none): a dispatcher that took
        # over set another, so the one it replaced stops at its next step. A lost response's
        # retry finds its own write token (`_update_if`), not a lost race.
        values: dict[str, Any] = {
            ":sent": {"N": str(sent)},
            ":until": {"N": str(to_ms(until))},
            ":planning": {"S": InstanceStatus.PLANNING.value},
        }
        if held is None:
            lease = "attribute_not_exists(dispatch_lease_until_ms)"
        else:
            lease = "dispatch_lease_until_ms = :held"
            values[":held"] = {"N": str(to_ms(held))}
        sets = ["sent = :sent", "dispatch_lease_until_ms = :until"]
        if waiting is not None:
            sets.append("waiting = :waiting")
            values[":waiting"] = {"S": waiting}
        if deadline is not None:
            # The body keeps the deadline it was claimed with; `deadline_at` overrides it, and
            # the instance's place in `by_deadline` moves with it.
            sets += ["deadline_at = :deadline", "open_sk = :open_sk"]
            values[":deadline"] = {"S": iso(deadline)}
            values[":open_sk"] = {"S": f"{iso(deadline)}#{instance_id}"}
        expression = "SET " + ", ".join(sets) + (" REMOVE waiting" if waiting is None else "")
        return self._update_if(
            _instance_key(instance_id),
            expression,
            f"#st = :planning AND {lease}",
            {"#st": "status"},
            values,
        )

    #
    # A tick with thousands of due tasks cannot afford a round trip per write. These pack many
    # independent conditional writes into TransactWriteItems requests (at most 100 actions,
    # 4 MB, each item once). A transaction is all or nothing, so when DynamoDB cancels one, its
    # CancellationReasons (one per action, in order; read by `transact.reason_kind`) say which
    # actions failed and why:
    #   ConditionalCheckFailed                   ──► that group lost: dropped (False)
    #   TransactionConflict, throttling          ──► that group is retried in the next round
    #   None (an innocent bystander)             ──► retried in the next round
    #   anything else (ValidationError, ...)     ──► that group dropped (False): the caller's
    #                                                one-by-one path meets the error itself
    # A request-level error: throttling or a conflict retries the chunk, anything else drops it.
    # A lost response is safe: botocore retries with the same ClientRequestToken, which
    # DynamoDB answers idempotently (a cancelled-then-retried round gets a fresh token).

    def claim_instances(self, groups: Sequence[Sequence[InstanceRecord]]) -> list[bool]:
        entries: list[list[Any]] = []
        late: dict[int, list[Any]] = {}  # counters sent after their group's claims
        for n, group in enumerate(groups):
            ids = [i.instance_id for i in group]
            if len(ids) > MAX_CLAIM_GROUP or len(set(ids)) != len(ids):
                entries.append([None])  # never sent: see _write_groups
                continue
            actions = [action for instance in group for action in self._claim_puts(instance)]
            if len(actions) > TRANSACTION_ACTIONS:
                # A group is one transaction: past its action limit (an open instance is two
                # puts), the counters follow the claims in transactions of their own, each
                # conditional on being new (a counter missing after a crash in between is made
                # by `_ensure_counter`, exactly).
                actions = [a for a in actions if "ConditionExpression" in a["Put"]]
                late[n] = [self._counter_put(i) for i in group if self._counted_alone(i)]
            entries.append(actions)
        won = self._write_groups(entries)
        self._write_groups([[put] for n, puts in late.items() if won[n] for put in puts])
        return won

    @staticmethod
    def _counted_alone(instance: InstanceRecord) -> bool:
        """Whether a claim makes the instance's counter item: not for one final as claimed (it
        never counts), nor for one counted on stripes (each made by its first count)."""
        return not instance.status.final and not counter_stripes(shard_parts(instance.plan.count))

    def _counter_put(self, instance: InstanceRecord) -> Any:
        counter = _counter_item(instance.instance_id, instance.remaining, instance.failed_shards)
        put = {"TableName": self._table, "Item": counter}
        return {"Put": {**put, "ConditionExpression": "attribute_not_exists(pk)"}}

    def _claim_puts(self, instance: InstanceRecord) -> list[Any]:
        """A claim's transaction actions: the instance if new, and (unless it is final as
        claimed: it never counts) its counter, unconditional: the instance's condition makes
        the transaction the only writer of both."""
        puts: list[Any] = [
            {
                "Put": {
                    "TableName": self._table,
                    "Item": self._instance_item(instance),
                    "ConditionExpression": "attribute_not_exists(pk)",
                }
            }
        ]
        if self._counted_alone(instance):
            counter = _counter_item(
                instance.instance_id, instance.remaining, instance.failed_shards
            )
            puts.append({"Put": {"TableName": self._table, "Item": counter}})
        return puts

    def mark_running(self, instance_ids: Sequence[str]) -> list[bool]:
        # The status and its index partition only: a `planning` instance has no submission
        # keys (they went when it left `scheduled`), its status_sk was written by the claim and
        # does not change, and it is not final. (Two clauses where `set_instance_status` has
        # five: the same result, and less for the emulator to evaluate per action.)
        entries: list[list[Any]] = [
            [
                {
                    "Update": {
                        "TableName": self._table,
                        "Key": _instance_key(instance_id),
                        "UpdateExpression": "SET #st = :running, status_pk = :status_pk",
                        "ConditionExpression": "#st = :planning",
                        "ExpressionAttributeNames": {"#st": "status"},
                        "ExpressionAttributeValues": {
                            ":running": {"S": InstanceStatus.RUNNING.value},
                            ":status_pk": {
                                "S": _status_pk(InstanceStatus.RUNNING, instance_id, self._buckets)
                            },
                            ":planning": {"S": InstanceStatus.PLANNING.value},
                        },
                    }
                }
            ]
            for instance_id in instance_ids
        ]
        return self._write_groups(entries)
