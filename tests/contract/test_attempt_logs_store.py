"""An attempt's log survives every store's writes: a released attempt keeps it while the next
attempt runs, the completion of the last writes its own, and floats, unicode and a log near the
inline limit read back as written. The item stays far from DynamoDB's 400 KB."""

from __future__ import annotations

from datetime import timedelta

from iotsched.core.attempt_record import Attempt
from iotsched.core.logs import INLINE_BYTES, INLINE_LINES, AttemptLog, LogLine, tail
from iotsched.core.shard_record import ShardStatus
from iotsched.ports.shards import ShardCompletion
from tests.contract.conftest import Store
from tests.contract.test_store import S, claimed, ended, lease, shard_of
from tests.support import T0


def a_log(word: str, lines: int) -> AttemptLog:
    written = [
        LogLine(
            at=T0 + n * S,
            level="WARNING",
            message=f'{word} {n} ünïcödé "quoted"',
            logger="acme.firmware",
            fields={"ratio": 0.25 * n, "ok": n % 2 == 0, "nested": {"n": n}},
        )
        for n in range(lines)
    ]
    kept, truncated = tail(written)
    return AttemptLog(
        lines=kept,
        line_count=lines,
        byte_count=sum(len(line.encoded()) for line in written),
        truncated=truncated,
        object_key=f"logs/30d/t/x/0/{word}.jsonl" if truncated else None,
        log_group="/aws/lambda/worker",
        log_stream="2026/12/02/[$LATEST]abc",
        insights_query='fields @timestamp | filter instance_id = "x"',
    )


def with_log(attempt: Attempt, log: AttemptLog) -> Attempt:
    return attempt.model_copy(update={"log": log})


def test_a_released_attempt_keeps_its_log_and_the_completion_writes_the_next(
    store: Store,
) -> None:
    inst = claimed(store, shards=1)
    first = lease(store, inst, max_attempts=2).shard
    first_log = a_log("first", 3)
    store.release_shard(
        inst.instance_id,
        0,
        attempt=with_log(ended(first, at=T0 + 5 * S, outcome="failed", error="boom"), first_log),
    )
    second = lease(store, inst, worker="w2", at=T0 + 40 * S, max_attempts=2).shard
    assert second.attempts[0].log == first_log  # what the lease returned
    second_log = a_log("second", 200)
    assert second_log.truncated and len(second_log.lines) <= INLINE_LINES
    done = with_log(ended(second, at=T0 + 50 * S, outcome="succeeded"), second_log)
    store.complete_shards(
        [
            ShardCompletion(
                instance_id=inst.instance_id,
                index=0,
                status=ShardStatus.SUCCEEDED,
                attempt=done,
                expires_at=T0 + timedelta(days=30),
            )
        ]
    )
    stored = shard_of(store, inst)
    assert stored.status is ShardStatus.SUCCEEDED
    assert [a.log for a in stored.attempts] == [first_log, second_log]
    assert stored.attempts[1].log is not None
    assert stored.attempts[1].log.lines[-1].fields == {
        "ratio": 49.75,
        "ok": False,
        "nested": {"n": 199},
    }
    # The tail's bytes stay within the stated figure (the item far below 400 KB).
    total = sum(len(line.encoded()) for a in stored.attempts if a.log for line in a.log.lines)
    assert total <= 2 * INLINE_BYTES


def test_an_attempt_without_a_log_reads_back_without_one(store: Store) -> None:
    inst = claimed(store, shards=1)
    shard = lease(store, inst).shard
    store.complete_shards(
        [
            ShardCompletion(
                instance_id=inst.instance_id,
                index=0,
                status=ShardStatus.FAILED,
                attempt=ended(shard, at=T0 + 5 * S, outcome="failed", error="x"),
                error="x",
            )
        ]
    )
    assert shard_of(store, inst).attempts[0].log is None
