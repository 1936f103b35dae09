"""The worker function names its log stream on an attempt's record, and its JSON lines of
`ctx.log` carry the attempt's keys, which the record's Logs Insights query filters on."""

from __future__ import annotations

import io
import json

import pytest

from iotsched import bootstrap
from iotsched.clock import ManualClock
from iotsched.context import ShardContext
from iotsched.local.host import FakeLambdaContext
from tests.unit.test_function_metrics import fire_scan, load, sqs_event


def test_the_workers_lines_carry_the_attempt_and_the_record_names_the_stream(
    monkeypatch: pytest.MonkeyPatch, clock: ManualClock
) -> None:
    def chatty(ctx: ShardContext) -> None:
        ctx.log("flashing", devices=3)
        raise RuntimeError("flash failed")

    services = bootstrap.build_memory(clock=clock, handlers={"chatty": chatty})
    monkeypatch.setenv("AWS_LAMBDA_LOG_STREAM_NAME", "2026/12/02/[$LATEST]0123")
    worker = load(monkeypatch, "worker", services)
    instance, queue = fire_scan(services, "chatty", retry={"max_attempts": 1})
    # Powertools keeps one handler per service name across reloads: read what it writes here.
    printed = io.StringIO()
    monkeypatch.setattr(worker.logger.registered_handler, "stream", printed)

    worker.lambda_handler(sqs_event(queue, [1]), FakeLambdaContext("worker", 60))

    lines = [json.loads(line) for line in printed.getvalue().splitlines() if "{" in line]
    (flashing,) = [line for line in lines if line.get("message") == "flashing"]
    assert (flashing["instance_id"], flashing["shard"], flashing["attempt"]) == (
        instance.instance_id,
        1,
        1,
    )
    assert flashing["fields"] == {"devices": 3}
    shard = services.instances.get_shard(instance.instance_id, 1)
    assert shard is not None
    log = shard.attempts[0].log
    assert log is not None
    assert (log.log_group, log.log_stream) == ("/aws/lambda/worker", "2026/12/02/[$LATEST]0123")
    assert log.insights_query is not None
    assert f'instance_id = "{instance.instance_id}" and shard = 1 and attempt = 1' in (
        log.insights_query
    )
    assert log.lines[0].message == "flashing"
    assert "RuntimeError: flash failed" in log.lines[-1].message
