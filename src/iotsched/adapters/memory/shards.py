"""Shard records in dicts: leases, completions, dead letters and effect keys."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from iotsched.adapters.dynamodb import transact_outcomes as transact
from iotsched.adapters.dynamodb.transact_outcomes import Kind
from iotsched.adapters.memory.instances import InstanceRecords
from iotsched.core.attempt_record import Attempt
from iotsched.core.decisions import LeaseVerdict, decide_lease
from iotsched.core.shard_record import (
    ShardRecord,
    ShardStatus,
    never_ran,
)
from iotsched.ports.effects import EffectConditionError
from iotsched.ports.shards import (
    CompletionResult,
    CompletionVerdict,
    LeaseResult,
    ShardCompletion,
    StaleAttemptError,
)
from iotsched.ports.store_errors import StoreContendedError, WriteRejectedError


class ShardRecords(InstanceRecords):
    """Shards of the instances, under the same lock."""

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
            attempts = [*shard.attempts[:-1], _ended(shard.attempts[-1], attempt)]
            self._shards[(instance_id, index)] = shard.model_copy(
                update={
                    "status": ShardStatus.PENDING,
                    "lease_until": None,
                    "owner": None,
                    "attempts": attempts,
                    "error": attempt.error,
                }
            )

    def give_back_lease(self, taken: ShardRecord) -> None:
        key = (taken.instance_id, taken.index)
        with self._lock:
            shard = self._shards.get(key)
            if shard is None and taken.attempt == 1:
                return  # given back already (as DynamoDB's delete sent again)
            if (
                shard is None
                or shard.status is not ShardStatus.RUNNING
                or (shard.attempt, shard.owner, shard.lease_until)
                != (taken.attempt, taken.owner, taken.lease_until)
            ):
                raise StaleAttemptError(f"{key[0]} shard {key[1]}: take not ours")
            if taken.attempt == 1:  # no record, as before the first take
                del self._shards[key]
                return
            self._shards[key] = shard.model_copy(
                update={
                    "status": ShardStatus.PENDING,
                    "attempt": taken.attempt - 1,
                    "attempts": shard.attempts[:-1],
                    "lease_until": None,
                    "owner": None,
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
            attempts = [*shard.attempts[:-1], _ended(shard.attempts[-1], attempt)]
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
            failed = inst.failed_shards + (1 if status.failure else 0)
            self._instances[instance_id] = inst.model_copy(
                update={"remaining": inst.remaining - 1, "failed_shards": failed}
            )
            return CompletionResult(
                remaining=inst.remaining - 1, failed_shards=failed, unrun_shards=inst.unrun_shards
            )

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
                        "attempts": [*shard.attempts[:-1], _ended(shard.attempts[-1], c.attempt)],
                        "error": c.error,
                        "result": dict(c.result) if c.result is not None else None,
                        "expires_at": c.expires_at,
                    }
                )
                inst = self._instances[c.instance_id]
                failed = inst.failed_shards + (1 if c.status.failure else 0)
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
            unrun = inst.unrun_shards + (1 if never_ran(shard) else 0)
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
                update={
                    "remaining": inst.remaining - 1,
                    "failed_shards": failed,
                    "unrun_shards": unrun,
                }
            )
            return CompletionResult(
                remaining=inst.remaining - 1, failed_shards=failed, unrun_shards=unrun
            )

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


def _ended(recorded: Attempt, ended: Attempt) -> Attempt:
    """The worker's end of an attempt over its recorded entry, as DynamoDB's field-by-field
    write leaves it: the keys the entry lists stay (an effect whose response the worker never
    saw is listed there and not in the worker's own list)."""
    return ended.model_copy(update={"keys": recorded.keys})
