"""An instance's remaining-shard counter (an item of its own beside the shard records), and the
moves it decides. A completion decrements it in the transaction that writes its shard, so it
never counts a shard twice nor one that is not final; `finalize_instance` ends the instance
once at zero, `start_reduce` moves a drained instance to reducing once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError

from iotsched.adapters.dynamodb import transact_outcomes as transact
from iotsched.adapters.dynamodb.codec import (
    _counter_item,
    counts,
)
from iotsched.adapters.dynamodb.instances import Instances
from iotsched.adapters.dynamodb.keys import (
    _counter_key,
    _instance_key,
    _key_of,
    _status_pk,
    _stripe_key,
)
from iotsched.adapters.dynamodb.transact_outcomes import Kind
from iotsched.adapters.dynamodb.transactions import _conditional_failure, _rejected
from iotsched.core.instance_record import (
    FollowUp,
    InstanceStatus,
    listing_key,
)
from iotsched.core.timeutil import to_ms
from iotsched.ports.store_errors import StoreContendedError

_OPEN_VALUES = {f":{status.value}": status for status in InstanceStatus if not status.final}


class Counters(Instances):
    """An instance's remaining-shard counter, and the moves it decides."""

    def _put_counter(self, counter: dict[str, Any]) -> bool:
        """Create a counter item unless it exists (a plain conditional put: the claim's
        counter follows a single put, and a transaction would cost both items twice; a
        claimer that stalled past its dispatch lease may find it made by `_ensure_counter`)."""
        try:
            self._single(
                f"counter of {counter['pk']['S']}",
                lambda: self._ddb.put_item(
                    TableName=self._table,
                    Item=counter,
                    ConditionExpression="attribute_not_exists(pk)",
                ),
            )
        except ClientError as exc:
            if not _conditional_failure(exc):
                raise
            return False
        return True

    def _counter_allows(self, instance_id: str, test: Callable[[int, int], bool]) -> bool:
        """After a counter condition's refusal: whether the counter, made sure of, now passes
        `test(remaining, failed_shards)` (the write is then sent again), or the refusal stands
        (or there is no such instance)."""
        counter = self._ensure_counter(instance_id)
        return counter is not None and test(
            int(counter["remaining"]["N"]), int(counter["failed_shards"]["N"])
        )

    def _ensure_counter(self, instance_id: str) -> dict[str, Any] | None:
        """The instance's counter item, made first if it has none (None: no such instance).

        No decrement can precede the counter item (they are conditioned on it), so one made
        from the instance item is exact:
        - `planned` (this version's claim, its claimer died between its two puts): a counter
          at `planned`, conditional on there being none;
        - the previous version's counter on the instance item (`remaining`, `failed_shards`,
          an instance in flight during an upgrade): moved in one transaction that removes it
          from the instance item on the condition that it still holds the values read, so a
          decrement by a previous-version worker still running is refused (its shard is
          retried) rather than lost; one that lands first makes the move read again.
        """
        try:
            key = _instance_key(instance_id)
        except KeyError:
            return None
        for _ in range(transact.ROUNDS):
            read = self._batch_get([key, _counter_key(instance_id)])
            item = read.get(_key_of(key))
            if item is None:
                return None
            existing: dict[str, Any] | None = read.get(_key_of(_counter_key(instance_id)))
            if existing is not None:
                return existing
            remaining, failed, _ = counts(item, None)  # no unrun shard before the counter
            counter = _counter_item(instance_id, remaining, failed)
            if item.get("status", {}).get("S") == InstanceStatus.REDUCING.value:
                counter["reducing"] = {"BOOL": True}  # its count is the reduce's
            if "remaining" not in item:
                if self._put_counter(counter):
                    return counter
                continue  # made by a concurrent caller: read it
            put = {
                "TableName": self._table,
                "Item": counter,
                "ConditionExpression": "attribute_not_exists(pk)",
            }
            move = {
                "TableName": self._table,
                "Key": key,
                "UpdateExpression": "SET planned = :r REMOVE remaining, failed_shards",
                "ConditionExpression": "remaining = :r AND failed_shards = :f",
                "ExpressionAttributeValues": {
                    ":r": {"N": str(remaining)},
                    ":f": {"N": str(failed)},
                },
            }
            what = f"counter of {instance_id}"
            outcome = self._transaction([{"Put": put}, {"Update": move}], what=what)
            if outcome.kind is Kind.INVALID:
                raise _rejected(outcome, what)
            if outcome.kind is Kind.COMMITTED:
                return counter
            # moved by a concurrent caller, or decremented by a previous-version worker: again
        raise StoreContendedError(f"counter of {instance_id}: the instance kept changing")

    def finalize_instance(
        self,
        instance_id: str,
        *,
        status: InstanceStatus,
        finished_at: datetime,
        owed: Sequence[FollowUp] = (),
    ) -> bool:
        # One read of the counter, then one conditional write of the instance item (no
        # transaction: it would double the instance item's write units):
        #   counter 0, shards phase ──► SET final IF status IN (planning, running)
        #   counter 0, reduce phase (`reducing`: the reduce was counted) ──► IF status reducing
        # The counter leaves 0 only through start_reduce, which moves the instance to reducing
        # and marks the counter's phase in one transaction; so a reduce started between the
        # read and the write fails the write's condition, and a finalize never ends an
        # instance whose reduce is still to count. The status condition lets one caller win.
        # (On stripes, the same: their sum read, and stripe 0's mark of the reduce.)
        if self._stripes(instance_id):
            counted = self._striped(instance_id)
            if counted.remaining != 0:
                return False
            reducing = counted.reducing
        else:
            counter = self._read_counter(instance_id)
            if counter is None or int(counter["remaining"]["N"]) != 0:
                return False
            reducing = counter.get("reducing", {}).get("BOOL", False)
        values = {
            ":planning": {"S": InstanceStatus.PLANNING.value},
            ":running": {"S": InstanceStatus.RUNNING.value},
            ":reducing": {"S": InstanceStatus.REDUCING.value},
        }
        return self._set_status(
            instance_id,
            status=status,
            condition="#st = :reducing" if reducing else "#st IN (:planning, :running)",
            values={k: v for k, v in values.items() if (k == ":reducing") == reducing},
            finished_at=finished_at,
            owed=owed,
        )

    def _read_counter(self, instance_id: str) -> dict[str, Any] | None:
        """The instance's counter item (strongly consistent), made first if it has none (an
        upgrade's instance, a claimer's crash); None if there is no such instance."""
        try:
            _instance_key(instance_id)
        except KeyError:
            return None
        item: dict[str, Any] | None = self._ddb.get_item(
            TableName=self._table, Key=_counter_key(instance_id), ConsistentRead=True
        ).get("Item")
        return item if item is not None else self._ensure_counter(instance_id)

    def start_reduce(self, instance_id: str, *, now: datetime, until: datetime) -> bool:
        # Exactly one reduce: of all the callers that saw the counter reach zero (the last
        # shards, a duplicate completion, the sweeper) only one moves the instance on, and the
        # same transaction sets the counter to one, for the reduce.
        key = _instance_key(instance_id)
        move = {
            "Key": key,
            "UpdateExpression": (
                "SET #st = :reducing, dispatch_lease_until_ms = :until, "
                "status_pk = :status_pk, status_sk = :status_sk"
            ),
            "ConditionExpression": "#st IN (:planning, :running)",
            "ExpressionAttributeNames": {"#st": "status"},
            "ExpressionAttributeValues": {
                ":reducing": {"S": InstanceStatus.REDUCING.value},
                ":planning": {"S": InstanceStatus.PLANNING.value},
                ":running": {"S": InstanceStatus.RUNNING.value},
                ":until": {"N": str(to_ms(until))},
                ":status_pk": {
                    "S": _status_pk(InstanceStatus.REDUCING, instance_id, self._buckets)
                },
                ":status_sk": {"S": listing_key(instance_id)},
            },
        }
        if self._stripes(instance_id):
            return self._striped_reduce(instance_id, move)
        return self._counted_move(
            instance_id,
            move,
            {
                "Update": {
                    "TableName": self._table,
                    "Key": _counter_key(instance_id),
                    "UpdateExpression": "SET remaining = :one, reducing = :yes",
                    "ConditionExpression": "remaining = :zero AND failed_shards = :zero",
                    "ExpressionAttributeValues": {
                        ":one": {"N": "1"},
                        ":zero": {"N": "0"},
                        ":yes": {"BOOL": True},
                    },
                }
            },
            allows=lambda remaining, failed: remaining == 0 and failed == 0,
            what=f"reduce of {instance_id}",
        )

    def _striped_reduce(self, instance_id: str, move: dict[str, Any]) -> bool:
        """`start_reduce` of an instance counted on stripes: with every stripe read at zero
        remaining and none failed, the instance's move and stripe 0's mark of the reduce (it
        counts the reduce as one more shard to end) in one transaction. The move's status
        condition lets one caller win; the mark's, that the reduce is counted once."""
        counted = self._striped(instance_id)
        if counted.remaining != 0 or counted.failed_shards != 0 or counted.reducing:
            return False
        what = f"reduce of {instance_id}"
        # A stripe 0 no batch counted on is made by the mark: it takes the stripes' TTL.
        expiry = counted.expires_at_s
        mark = {
            "Update": {
                "TableName": self._table,
                "Key": _stripe_key(instance_id, 0),
                "UpdateExpression": "SET reducing = :yes"
                + (", expires_at = if_not_exists(expires_at, :exp)" if expiry else ""),
                "ConditionExpression": "attribute_not_exists(reducing)",
                "ExpressionAttributeValues": {
                    ":yes": {"BOOL": True},
                    **({":exp": {"N": str(expiry)}} if expiry else {}),
                },
            }
        }
        outcome = self._transaction(
            [{"Update": {"TableName": self._table, **move}}, mark], what=what
        )
        if outcome.kind is Kind.INVALID:
            raise _rejected(outcome, what)
        return outcome.kind is Kind.COMMITTED

    def _counted_move(
        self,
        instance_id: str,
        move: dict[str, Any],
        counter: dict[str, Any],
        *,
        allows: Callable[[int, int], bool],
        what: str,
    ) -> bool:
        """The instance item's `move` (an Update) and the action on its counter item, in one
        transaction: True if it committed. Exactly one of concurrent callers commits (the
        move's status condition holds once; the counter's holds once too). Cancellations,
        read with `transact.classify`:
          the move's ConditionalCheckFailed (status moved on) ──► False
          the counter's alone, the counter item absent ──► made (`_ensure_counter`), again
          the counter's alone, read again: it passes now ──► sent again; else ──► False
          TransactionConflict, throttling, None ──► sent again (then StoreContendedError)
          ValidationError, anything else ──► WriteRejectedError
        A lost response is answered by DynamoDB from the request token: committed."""
        actions = [{"Update": {"TableName": self._table, **move}}, counter]
        for _ in range(3):  # again while the counter, made sure of, passes the condition
            outcome = self._transaction(actions, what=what)
            if outcome.kind is Kind.COMMITTED:
                return True
            if outcome.kind is Kind.INVALID:
                raise _rejected(outcome, what)
            if outcome.failed != (1,) or not self._counter_allows(instance_id, allows):
                return False
        return False

    def end_instance(
        self,
        instance_id: str,
        *,
        status: InstanceStatus,
        reason: str,
        finished_at: datetime,
        owed: Sequence[FollowUp] = (),
    ) -> bool:
        return self._set_status(
            instance_id,
            status=status,
            # every open status: a submission not yet due (scheduled) is cancelled too
            condition=f"#st IN ({', '.join(_OPEN_VALUES)})",
            values={name: {"S": status.value} for name, status in _OPEN_VALUES.items()},
            reason=reason,
            finished_at=finished_at,
            owed=owed,
        )
