"""The S3 attempt log store on the emulator: an object reads back as written, a missing key is
None, and a refused write raises `LogObjectError`, which the worker records on the attempt
without changing the shard's outcome."""

from __future__ import annotations

import dataclasses
import uuid

import pytest

from iotsched.adapters.attempt_logs import S3AttemptLogs
from iotsched.adapters.aws import AwsClients
from iotsched.clock import ManualClock
from iotsched.context import ShardContext
from iotsched.core.shard_record import ShardStatus
from iotsched.ports.logs import LogObjectError
from iotsched.services.execution.batch import run_shard
from iotsched.services.execution.outcomes import ShardOutcome
from tests.unit.test_attempt_logs import setup
from tests.unit.test_shard_batch import delivery

pytestmark = pytest.mark.moto


def test_objects_read_back_and_a_missing_one_is_none(moto_clients: AwsClients) -> None:
    bucket = f"logs-{uuid.uuid4().hex[:12]}"
    s3 = moto_clients.s3()
    s3.create_bucket(Bucket=bucket)
    store = S3AttemptLogs(lambda: s3, bucket)
    key = "logs/30d/t/t@2026-11-29T12:00Z/0/1.jsonl"
    store.put(key, b'{"message": "one"}\n')
    assert store.get(key) == b'{"message": "one"}\n'
    assert store.get("logs/30d/t/t@2026-11-29T12:00Z/0/2.jsonl") is None
    with pytest.raises(LogObjectError, match="NoSuchBucket"):
        S3AttemptLogs(lambda: s3, f"{bucket}-absent").put(key, b"x\n")
    with pytest.raises(LogObjectError, match="NoSuchBucket"):
        S3AttemptLogs(lambda: s3, f"{bucket}-absent").get(key)


def test_a_log_is_created_once_and_never_overwritten(moto_clients: AwsClients) -> None:
    # Create-only: a retried put of a log that landed is read as written, and a second
    # writer of the key (a handler, with the worker's role) leaves the first log as it was.
    bucket = f"logs-{uuid.uuid4().hex[:12]}"
    s3 = moto_clients.s3()
    s3.create_bucket(Bucket=bucket)
    store = S3AttemptLogs(lambda: s3, bucket)
    key = "logs/30d/t/t@2026-11-29T12:00Z/0/1.jsonl"
    store.put(key, b'{"message": "the attempt\'s own"}\n')
    store.put(key, b'{"message": "written over"}\n')  # no error: already there
    assert store.get(key) == b'{"message": "the attempt\'s own"}\n'


def test_a_refused_put_leaves_the_shard_failed_as_it_was_and_says_so(
    moto_clients: AwsClients, clock: ManualClock
) -> None:
    def chatty_failure(ctx: ShardContext) -> None:
        for n in range(40):
            ctx.log(f"line {n}")
        raise ValueError("gave up")

    services, (message,) = setup(clock, {"work": chatty_failure})
    missing = S3AttemptLogs(moto_clients.s3_logs, f"absent-{uuid.uuid4().hex[:12]}")
    services = dataclasses.replace(services, attempt_logs=missing)

    assert run_shard(delivery(message), services, worker="w") is ShardOutcome.FAILED

    shard = services.instances.get_shard(message.instance_id, 0)
    assert shard is not None and shard.status is ShardStatus.FAILED
    log = shard.attempts[0].log
    assert log is not None and log.truncated and log.object_key is None
    assert log.object_error is not None and "NoSuchBucket" in log.object_error
    assert [line.message for line in log.lines][-2] == "line 39"
