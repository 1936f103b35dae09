"""Logs per attempt, on the in-memory services: what a handler logs is captured per attempt,
its tail kept on the record within the inline limit, the whole log written to the log store
when the tail does not hold it, never mixed between concurrent attempts, and an S3 failure
never changes the shard's outcome."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any, cast

import pytest

from iotsched import bootstrap
from iotsched.adapters.attempt_logs import MemoryAttemptLogs
from iotsched.adapters.memory.queues import MemoryShardQueue
from iotsched.clock import ManualClock
from iotsched.context import ShardContext
from iotsched.core import logs as attempt_logs
from iotsched.core.attempt_record import Attempt
from iotsched.core.logs import INLINE_BYTES, INLINE_LINES, AttemptLog, LogLine
from iotsched.core.shard_message import ShardMessage
from iotsched.core.shard_record import ShardStatus
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.execution.batch import (
    ShardBatch,
    run_shard,
)
from iotsched.services.execution.capture import LogStream
from iotsched.services.execution.outcomes import ShardOutcome
from iotsched.services.operations.logs import (
    AttemptNotFoundError,
    read_log,
)
from iotsched.services.scheduling.tick import dispatch_tick
from iotsched.services.wiring import Wiring
from iotsched.tasklib import registry
from tests.support import T0, task
from tests.unit.test_shard_batch import S, delivery

handler_log = logging.getLogger("acme.firmware")


def setup(
    clock: ManualClock, handlers: Mapping[str, Any], *, shards: int = 1, retention: int = 30
) -> tuple[Wiring, list[ShardMessage]]:
    services = bootstrap.build_memory(clock=clock, handlers={**registry(), **handlers})
    apply_tasks(
        [
            task(
                "t",
                handler="work",
                trigger={"rate": "15m"},
                sharding={"strategy": "static", "shards": [{"n": i} for i in range(shards)]},
                retry={"max_attempts": 1},
                retention={"days": retention},
            )
        ],
        services.tasks,
        now=T0 - 7 * 60 * S,
    )
    clock.set(T0 + 3 * S)
    dispatch_tick(clock.now(), services)
    return services, list(cast("MemoryShardQueue", services.queue).sent)


def only_attempt(services: Wiring, message: ShardMessage) -> Attempt:
    shard = services.instances.get_shard(message.instance_id, message.shard)
    assert shard is not None
    (attempt,) = shard.attempts
    return attempt


def logs_of(services: Wiring) -> MemoryAttemptLogs:
    return cast("MemoryAttemptLogs", services.attempt_logs)


def three_lines_then_fail(ctx: ShardContext) -> None:
    handler_log.warning("reading block %d", ctx.shard)
    ctx.log("devices read", devices=120)
    logging.getLogger("acme.other").error("gateway 7 refused")
    raise RuntimeError("firmware server down")


def test_a_failing_attempt_keeps_its_lines_and_its_traceback_inline(clock: ManualClock) -> None:
    services, (message,) = setup(clock, {"work": three_lines_then_fail})

    assert run_shard(delivery(message), services, worker="w") is ShardOutcome.FAILED

    attempt = only_attempt(services, message)
    assert attempt.log is not None
    lines = attempt.log.lines
    assert [(line.level, line.message) for line in lines[:3]] == [
        ("WARNING", "reading block 0"),
        ("INFO", "devices read"),
        ("ERROR", "gateway 7 refused"),
    ]
    assert lines[1].fields == {"devices": 120} and lines[1].logger is None
    assert (lines[0].logger, lines[2].logger) == ("acme.firmware", "acme.other")
    # The failure, last, with its traceback (the handler's frame named).
    assert lines[3].level == "ERROR"
    assert "RuntimeError: firmware server down" in lines[3].message
    assert "three_lines_then_fail" in lines[3].message
    assert all(line.at == T0 + 3 * S for line in lines)  # the services' clock
    assert (attempt.log.line_count, attempt.log.truncated, attempt.log.object_key) == (
        4,
        False,
        None,
    )
    assert attempt.log.byte_count == len(attempt_logs.encode(lines))
    # The tail holds it all: no object written (a PUT costs more than the shard's records).
    assert logs_of(services).objects == {}
    # The scheduler's own lines are not the handler's.
    assert not any(line.logger and line.logger.startswith("iotsched.services") for line in lines)


def test_an_attempt_that_logs_nothing_adds_nothing_to_its_record(clock: ManualClock) -> None:
    services, (message,) = setup(clock, {"work": lambda ctx: None})
    assert run_shard(delivery(message), services, worker="w") is ShardOutcome.SUCCEEDED
    assert only_attempt(services, message).log is None


def test_a_log_larger_than_the_inline_limit_is_whole_in_the_bucket(clock: ManualClock) -> None:
    def chatty(ctx: ShardContext) -> None:
        for n in range(300):
            ctx.log(f"device {n:04d} updated", n=n)

    services, (message,) = setup(clock, {"work": chatty}, retention=45)
    assert run_shard(delivery(message), services, worker="w") is ShardOutcome.SUCCEEDED

    log = only_attempt(services, message).log
    assert log is not None and log.truncated and log.object_error is None
    assert log.object_key == f"logs/90d/t/{message.instance_id}/0/1.jsonl"  # 45 days: tier 90
    body = logs_of(services).objects[log.object_key]
    whole = attempt_logs.decode(body)
    assert [line.message for line in whole] == [f"device {n:04d} updated" for n in range(300)]
    assert [line.fields["n"] for line in whole] == list(range(300))
    assert (log.line_count, log.byte_count) == (300, len(body))
    # The tail: the last lines, within the limits.
    assert 0 < len(log.lines) <= INLINE_LINES
    assert len(attempt_logs.encode(log.lines)) <= INLINE_BYTES
    assert log.lines == whole[-len(log.lines) :]
    # The read side gives the whole log from the object.
    read = read_log(message.instance_id, 0, None, services)
    assert read.source == "object" and read.lines == whole


def test_one_line_over_the_inline_limit_is_cut_inline_and_whole_in_the_bucket(
    clock: ManualClock,
) -> None:
    big = "x" * (3 * INLINE_BYTES)
    services, (message,) = setup(clock, {"work": lambda ctx: ctx.log(big)})
    assert run_shard(delivery(message), services, worker="w") is ShardOutcome.SUCCEEDED
    log = only_attempt(services, message).log
    assert log is not None and log.truncated and log.object_key is not None
    (inline,) = log.lines
    assert inline.message.endswith(attempt_logs.CUT) and len(inline.encoded()) <= INLINE_BYTES
    (whole,) = attempt_logs.decode(logs_of(services).objects[log.object_key])
    assert whole.message == big


def test_an_s3_failure_leaves_the_outcome_and_says_the_object_is_missing(
    clock: ManualClock,
) -> None:
    def chatty_failure(ctx: ShardContext) -> None:
        for n in range(100):
            handler_log.warning("retrying device %d", n)
        raise ValueError("gave up")

    services, (message,) = setup(clock, {"work": chatty_failure})
    logs_of(services).failing = "AccessDenied: no PutObject"

    assert run_shard(delivery(message), services, worker="w") is ShardOutcome.FAILED

    shard = services.instances.get_shard(message.instance_id, 0)
    assert shard is not None and shard.status is ShardStatus.FAILED
    assert shard.error == "ValueError: gave up"
    log = shard.attempts[0].log
    assert log is not None and log.truncated
    assert (log.object_key, log.object_error) == (None, "AccessDenied: no PutObject")
    assert log.lines[-1].level == "ERROR" and "ValueError: gave up" in log.lines[-1].message
    assert logs_of(services).objects == {}
    read = read_log(message.instance_id, 0, 1, services)
    assert read.source == "inline" and read.lines == log.lines and not read.complete


def test_concurrent_attempts_never_mix_their_lines(clock: ManualClock) -> None:
    both_logging = threading.Barrier(2)

    def interleaved(ctx: ShardContext) -> None:
        for n in range(50):
            handler_log.warning("shard %d line %d", ctx.shard, n)
            ctx.log(f"ctx {ctx.shard}:{n}")
            if n % 10 == 0:
                both_logging.wait(timeout=10)  # the two attempts log at the same time

    services, messages = setup(clock, {"work": interleaved}, shards=2)
    outcomes: dict[int, ShardOutcome] = {}

    def run(message: ShardMessage) -> None:
        outcomes[message.shard] = run_shard(delivery(message, message.shard), services, worker="w")

    threads = [threading.Thread(target=run, args=(m,)) for m in messages]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert outcomes == {0: ShardOutcome.SUCCEEDED, 1: ShardOutcome.SUCCEEDED}

    for message in messages:
        log = only_attempt(services, message).log
        assert log is not None and log.object_key is not None
        whole = attempt_logs.decode(logs_of(services).objects[log.object_key])
        expected = []
        for n in range(50):
            expected += [f"shard {message.shard} line {n}", f"ctx {message.shard}:{n}"]
        assert [line.message for line in whole] == expected


def test_a_batch_names_the_workers_log_stream_and_an_insights_query(clock: ManualClock) -> None:
    services, (message,) = setup(clock, {"work": lambda ctx: ctx.log("one line")})
    batch = ShardBatch(
        services,
        worker="w",
        log_stream=LogStream("/aws/lambda/worker", "2026/12/02/[$LATEST]abc"),
    )
    batch.run(delivery(message))
    batch.commit()
    log = only_attempt(services, message).log
    assert log is not None and log.line_count == 1
    assert (log.log_group, log.log_stream) == ("/aws/lambda/worker", "2026/12/02/[$LATEST]abc")
    assert log.insights_query == (
        "fields @timestamp, level, message"
        f' | filter instance_id = "{message.instance_id}" and shard = 0 and attempt = 1'
        " | sort @timestamp asc"
    )


def test_reading_an_attempt_that_does_not_exist_says_so(clock: ManualClock) -> None:
    services, (message,) = setup(clock, {"work": three_lines_then_fail})
    run_shard(delivery(message), services, worker="w")
    for shard, attempt in ((0, 2), (5, None)):
        try:
            read_log(message.instance_id, shard, attempt, services)
        except AttemptNotFoundError:
            continue
        raise AssertionError(f"shard {shard} attempt {attempt} was found")


def test_the_tail_keeps_the_last_lines_within_both_limits() -> None:
    lines = [LogLine(at=T0, level="INFO", message=f"{n}") for n in range(100)]
    kept, truncated = attempt_logs.tail(lines)
    assert truncated and kept == lines[-INLINE_LINES:]
    wide = [LogLine(at=T0, level="INFO", message="y" * 400) for _ in range(10)]
    kept, truncated = attempt_logs.tail(wide)
    assert truncated and kept == wide[-len(kept) :]
    assert (
        len(attempt_logs.encode(kept))
        <= INLINE_BYTES
        < len(attempt_logs.encode(wide[-len(kept) - 1 :]))
    )
    assert attempt_logs.tail(lines[:3]) == (lines[:3], False)
    assert AttemptLog().complete


def test_retention_tiers_keep_an_object_at_least_as_long_as_its_record() -> None:
    for days in (1, 7, 8, 30, 31, 365, 366, 3650):
        tier = attempt_logs.retention_tier(days)
        assert tier >= days and tier in attempt_logs.RETENTION_TIERS


def test_a_process_that_configures_no_logging_still_prints_its_warnings(
    clock: ManualClock, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    services, (message,) = setup(clock, {"work": three_lines_then_fail})
    run_shard(delivery(message), services, worker="w")  # the router is on the root logger now
    root = logging.getLogger()
    routers = [h for h in root.handlers if type(h).__name__ == "_Router"]
    assert len(routers) == 1
    monkeypatch.setattr(root, "handlers", routers)  # as in a process without logging set up
    logging.getLogger("acme.elsewhere").warning("printed as Python's last resort would")
    logging.getLogger("acme.elsewhere").info("below the last resort's level")
    assert capsys.readouterr().err == "printed as Python's last resort would\n"
