"""Shard completions and dead letters, with the counter they decrement."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from iotsched.adapters.dynamodb import transact_outcomes as transact
from iotsched.adapters.dynamodb.codec import (
    _epoch_s,
    attempt_end,
    attempt_value,
)
from iotsched.adapters.dynamodb.counter import Counters
from iotsched.adapters.dynamodb.keys import _counter_key, _stripe_key
from iotsched.adapters.dynamodb.shards import Shards
from iotsched.adapters.dynamodb.transact_outcomes import Kind
from iotsched.adapters.dynamodb.transactions import _rejected
from iotsched.core.attempt_record import Attempt
from iotsched.core.shard_record import (
    ShardRecord,
    ShardStatus,
    never_ran,
)
from iotsched.ports.shards import (
    CompletionResult,
    CompletionVerdict,
    ShardCompletion,
    StaleAttemptError,
)
from iotsched.ports.store_errors import StoreContendedError


class Completions(Shards, Counters):
    """Shard completions and dead letters, with the counter they decrement."""

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
        # The shard's final write and the counter decrement commit together or not at all:
        #   attempt n ── Transact[shard: attempt = n AND running → final; instance: remaining - 1]
        #   zombie attempt n-1 ── same transaction ── shard condition fails ──► nothing changes
        #   contention, throttling ──► sent again (a few rounds, then StoreContendedError)
        #   the counter's condition alone, its item absent ──► made (`_ensure_counter`), again
        completion = ShardCompletion(instance_id, index, status, attempt, error, result, expires_at)
        failed = 1 if status.failure else 0
        what = f"completion of {instance_id} shard {index}"
        actions = [
            self._final_write(completion),
            self._decrement(instance_id, failed=failed, expires_at=expires_at),
        ]
        for _ in range(3):  # again while the counter, made sure of, takes the count
            outcome = self._transaction(actions, what=what)
            if outcome.kind is Kind.INVALID:
                raise _rejected(outcome, what)
            if outcome.kind is Kind.COMMITTED:
                return self._counter(instance_id)
            if outcome.failed != (1,) or not self._counter_allows(
                instance_id, lambda remaining, _: remaining >= 1
            ):
                break  # the fence, or a counter already at zero
        raise StaleAttemptError(f"{instance_id} shard {index}: attempt {attempt.number} is stale")

    def _counter(self, instance_id: str) -> CompletionResult:
        """The counter right after a completion that decremented it: its item alone (or every
        stripe, read after the write: of concurrent last completions, at least the one whose
        read came last sees zero)."""
        if self._stripes(instance_id):
            counted = self._striped(instance_id)
            return CompletionResult(
                remaining=counted.remaining,
                failed_shards=counted.failed_shards,
                unrun_shards=counted.unrun_shards,
            )
        item = self._ddb.get_item(
            TableName=self._table, Key=_counter_key(instance_id), ConsistentRead=True
        )["Item"]
        return CompletionResult(
            remaining=int(item["remaining"]["N"]),
            failed_shards=int(item["failed_shards"]["N"]),
            unrun_shards=int(item.get("unrun_shards", {"N": "0"})["N"]),
        )

    def _final_write(self, c: ShardCompletion) -> Any:
        """A shard's final status, attempt entry, error and result, fenced on the attempt."""
        condition, names, values = self._fence(c.attempt.number)
        ended, attempt_names, attempt_values = attempt_end(c.attempt)
        names |= attempt_names
        names["#err"] = "error"
        names["#res"] = "result"
        result = c.result
        # the record's TTL, in its final write (none asked: kept)
        expiry = {":exp": {"N": str(_epoch_s(c.expires_at))}} if c.expires_at else {}
        return {
            "Update": {
                "TableName": self._table,
                "Key": self._shard_key(c.instance_id, c.index),
                "UpdateExpression": (
                    f"SET #st = :final, {ended}, #err = :err, #res = :res"
                    + (", expires_at = :exp" if expiry else "")
                    + " REMOVE lease_until_ms, open_pk, open_sk"
                ),
                "ConditionExpression": condition,
                "ExpressionAttributeNames": names,
                "ExpressionAttributeValues": {
                    **values,
                    ":final": {"S": c.status.value},
                    **attempt_values,
                    ":err": {"S": c.error or ""},
                    ":res": {
                        "S": json.dumps(result, separators=(",", ":")) if result is not None else ""
                    },
                    **expiry,
                },
            }
        }

    # A worker batch's completions in one transaction (up to 10 shards of an SQS batch):
    #   Transact[shard a: attempt = n_a AND running → final, ..., shard j: ...,
    #            instance X: remaining - 7 (remaining >= 7), instance Y: remaining - 3 (>= 3)]
    # A transaction may touch an item once, hence one decrement per instance, by its count.
    # When DynamoDB cancels it, CancellationReasons (one per action, in order) say why:
    #   a shard's ConditionalCheckFailed   ──► that attempt lost its fence: STALE, left out
    #   TransactionConflict, throttling, None ──► retried in the next round (the counts redone)
    #   a counter's ConditionalCheckFailed, its item absent ──► made (`_ensure_counter`), again
    #   a counter's ConditionalCheckFailed, none of its shards failing ──► its shards STALE
    #     (as `complete_shard` would say); with one of them failing, the count was wrong: retry
    #   anything else                       ──► that completion UNWRITTEN (its message returns)
    # A busy instance's counter is contended by every worker finishing its shards: contended
    # rounds go on with capped, jittered backoff for up to COMPLETION_BUDGET_S. Completions
    # still pending after that are UNWRITTEN (the worker makes their messages return soon).

    #: Completions per transaction: 50 shard writes and at most 50 counters are 100 actions.
    COMPLETIONS_PER_TRANSACTION = 50
    #: Rounds, and the time they may take, before contended completions are UNWRITTEN (well
    #: inside the 10 s a batch keeps between its commit and its leases' end).
    COMPLETION_ROUNDS = 12
    COMPLETION_BUDGET_S = 5.0

    def complete_shards(self, completions: Sequence[ShardCompletion]) -> list[CompletionVerdict]:
        keys = [(c.instance_id, c.index) for c in completions]
        if len(set(keys)) != len(keys):
            raise ValueError("a shard appears twice among the completions")
        verdicts = [CompletionVerdict.UNWRITTEN] * len(completions)
        step = self.COMPLETIONS_PER_TRANSACTION
        for first in range(0, len(completions), step):
            chunk = list(range(first, min(first + step, len(completions))))
            self._complete_chunk(completions, chunk, verdicts)
        return verdicts

    def _complete_chunk(
        self,
        completions: Sequence[ShardCompletion],
        pending: list[int],
        verdicts: list[CompletionVerdict],
    ) -> None:
        """Commit `pending` completions (see above), setting their verdicts."""
        budget_ends = time.monotonic() + self.COMPLETION_BUDGET_S
        for round_ in range(self.COMPLETION_ROUNDS):
            if not pending:
                return
            by_instance: dict[str, list[int]] = {}
            for n in pending:
                by_instance.setdefault(completions[n].instance_id, []).append(n)
            actions = [self._final_write(completions[n]) for n in pending]
            for instance_id, ns in by_instance.items():
                failed = sum(1 for n in ns if completions[n].status.failure)
                expiry = max((e for n in ns if (e := completions[n].expires_at)), default=None)
                actions.append(
                    self._decrement(instance_id, failed=failed, count=len(ns), expires_at=expiry)
                )
            sent = self._send(actions)
            if sent.kind is Kind.COMMITTED:
                for n in pending:
                    verdicts[n] = CompletionVerdict.COMMITTED
                return
            kinds = [transact.reason_kind(code) for code in sent.reasons]
            if not kinds:  # the whole request: sent again if contended, else all UNWRITTEN
                if sent.kind is not Kind.RETRY:
                    return
                kinds = [Kind.RETRY] * len(actions)
            settled: set[int] = set()
            contended = Kind.RETRY in kinds
            for n, kind in zip(pending, kinds[: len(pending)], strict=True):
                if kind in (Kind.RETRY, Kind.COMMITTED):
                    continue
                settled.add(n)  # an error of its own: UNWRITTEN, its message comes back
                if kind is Kind.CONDITION_FAILED:
                    verdicts[n] = CompletionVerdict.STALE  # this attempt lost its fence
            counters = zip(by_instance.items(), kinds[len(pending) :], strict=True)
            for (instance_id, ns), kind in counters:
                if kind in (Kind.RETRY, Kind.COMMITTED):
                    continue
                if kind is Kind.CONDITION_FAILED and settled.intersection(ns):
                    continue  # counted with a shard that failed: retried with the count redone
                if kind is Kind.CONDITION_FAILED and self._takes(instance_id, len(ns)):
                    continue  # it had no counter item: there is one now, again
                settled.update(ns)
                if kind is Kind.CONDITION_FAILED:  # the counter alone refused, as in
                    for n in ns:  # complete_shard: its shards are stale
                        verdicts[n] = CompletionVerdict.STALE
            pending = [n for n in pending if n not in settled]
            left = budget_ends - time.monotonic()
            if contended and pending:
                if left <= 0:
                    return
                time.sleep(min(left, transact.backoff_s(round_, cap_s=0.5)))

    def _takes(self, instance_id: str, count: int) -> bool:
        """`_counter_allows` for a batch's decrement by `count`; a contended one is left for a
        later round."""
        try:
            return self._counter_allows(instance_id, lambda remaining, _: remaining >= count)
        except StoreContendedError:
            return True

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
        # Read the shard, then Transact[shard: if still as read → failed, its running attempt
        # closed `lost`; instance: remaining - 1]:
        #   the shard already ended (read, or its condition failed) ──► None
        #   the shard moved since the read (a lease taken, an attempt released) ──► read again
        #   the counter at zero ──► None
        #   contention, throttling ──► sent again (a few rounds, then StoreContendedError)
        what = f"dead letter of {instance_id} shard {index}"
        for _ in range(transact.ROUNDS):
            shard = self.get_shard(instance_id, index)
            if shard is not None and shard.status.final:
                return None
            outcome = self._transaction(
                [
                    self._dead_letter_write(
                        instance_id, index, shard, bounds, max_attempts, error, now, expires_at
                    ),
                    self._decrement(
                        instance_id,
                        failed=1,
                        unrun=1 if never_ran(shard) else 0,
                        expires_at=expires_at,
                    ),
                ],
                what=what,
            )
            if outcome.kind is Kind.INVALID:
                raise _rejected(outcome, what)
            if outcome.kind is Kind.COMMITTED:
                return self._counter(instance_id)
            if 0 not in outcome.failed:  # the counter's condition alone:
                if self._counter_allows(instance_id, lambda remaining, _: remaining >= 1):
                    continue  # it had no item: there is one now
                return None  # it is at zero already
        raise StoreContendedError(f"{what}: the shard kept changing; try again")

    def _dead_letter_write(
        self,
        instance_id: str,
        index: int,
        shard: ShardRecord | None,
        bounds: dict[str, object],
        max_attempts: int,
        error: str,
        now: datetime,
        expires_at: datetime | None = None,
    ) -> Any:
        """The shard's end `failed`, conditioned on the state read (`shard`): no record, pending,
        or running attempt n, whose entry is closed `lost` in the same write."""
        names = {"#st": "status", "#err": "error"}
        values: dict[str, Any] = {
            ":failed": {"S": ShardStatus.FAILED.value},
            ":err": {"S": error},
            ":iid": {"S": instance_id},
            ":idx": {"N": str(index)},
            ":bounds": {"S": json.dumps(bounds, sort_keys=True)},
            ":zero": {"N": "0"},
            ":max": {"N": str(max_attempts)},
        }
        closing = ""
        if expires_at is not None:  # the record's TTL, in its final write
            closing += ", expires_at = :exp"
            values[":exp"] = {"N": str(_epoch_s(expires_at))}
        if shard is None:
            condition = "attribute_not_exists(pk)"
        elif shard.status is ShardStatus.PENDING:
            # No attempt runs; the number read, so that whether one ever ran is as read.
            condition = "#st = :pending AND attempt = :prev"
            values[":pending"] = {"S": ShardStatus.PENDING.value}
            values[":prev"] = {"N": str(shard.attempt)}
        else:
            n = shard.attempt
            condition = "#st = :running AND attempt = :prev"
            values[":running"] = {"S": ShardStatus.RUNNING.value}
            values[":prev"] = {"N": str(n)}
            if len(shard.attempts) == n >= 1 and shard.attempts[-1].outcome is None:
                lost = attempt_value(shard.attempts[-1].lost(now, error))["M"]
                for field in ("outcome", "ended_at", "duration_ms", "error"):
                    path = "#err" if field == "error" else field
                    closing += f", attempts[{n - 1}].{path} = :lost_{field}"
                    values[f":lost_{field}"] = lost[field]
        return {
            "Update": {
                "TableName": self._table,
                "Key": self._shard_key(instance_id, index),
                "UpdateExpression": (
                    "SET #st = :failed, #err = :err, instance_id = :iid, idx = :idx, "
                    "bounds = if_not_exists(bounds, :bounds), "
                    "attempt = if_not_exists(attempt, :zero), "
                    f"max_attempts = if_not_exists(max_attempts, :max){closing} "
                    "REMOVE lease_until_ms, open_pk, open_sk"
                ),
                "ConditionExpression": condition,
                "ExpressionAttributeNames": names,
                "ExpressionAttributeValues": values,
            }
        }

    def _decrement(
        self,
        instance_id: str,
        *,
        failed: int,
        count: int = 1,
        unrun: int = 0,
        expires_at: datetime | None = None,
    ) -> Any:
        """The instance's counter down by `count` shards, `failed` of them failed or timed out
        (`unrun` of those dead-lettered before any handler ran): an
        update of the counter item alone (small, no index key), never of the instance item
        (its plan, its index entries). Refused on a counter item that does not exist (see
        `_ensure_counter`). `expires_at`: the completed shards' TTL, which the counter takes
        in the same write (the last decrement's is the counter's)."""
        expiry = {":exp": {"N": str(_epoch_s(expires_at))}} if expires_at else {}
        if stripes := self._stripes(instance_id):
            # Any stripe counts (their sum is the count): one at random, so that batches of any
            # pattern of indexes spread evenly.
            stripe = random.randrange(stripes)
            return self._count_on_stripe(
                instance_id, stripe, count=count, failed=failed, unrun=unrun, expiry=expiry
            )
        unruns = {":unrun": {"N": str(unrun)}, ":zero": {"N": "0"}} if unrun else {}
        return {
            "Update": {
                "TableName": self._table,
                "Key": _counter_key(instance_id),
                "UpdateExpression": (
                    "SET remaining = remaining - :n, failed_shards = failed_shards + :failed"
                    + (", expires_at = :exp" if expiry else "")
                    + (
                        ", unrun_shards = if_not_exists(unrun_shards, :zero) + :unrun"
                        if unrun
                        else ""
                    )
                ),
                "ConditionExpression": "remaining >= :n",
                "ExpressionAttributeValues": {
                    ":n": {"N": str(count)},
                    ":failed": {"N": str(failed)},
                    **expiry,
                    **unruns,
                },
            }
        }

    def _count_on_stripe(
        self,
        instance_id: str,
        stripe: int,
        *,
        count: int,
        failed: int,
        unrun: int,
        expiry: dict[str, Any],
    ) -> Any:
        """`count` ended shards (`failed`, `unrun` of them) added to one stripe of an instance
        counted on stripes: no condition, as a shard is counted once by the fence of its final
        write in the same transaction, and an ADD makes a stripe not yet written."""
        adds = "ADD ended :n, failed_shards :failed, unrun_shards :unrun"
        return {
            "Update": {
                "TableName": self._table,
                "Key": _stripe_key(instance_id, stripe),
                "UpdateExpression": ("SET expires_at = :exp " if expiry else "") + adds,
                "ExpressionAttributeValues": {
                    ":n": {"N": str(count)},
                    ":failed": {"N": str(failed)},
                    ":unrun": {"N": str(unrun)},
                    **expiry,
                },
            }
        }
