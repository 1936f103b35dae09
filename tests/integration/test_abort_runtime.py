"""Abort criteria on the local runtime: real worker processes, the emulator's DynamoDB, SQS and
SNS. 60 shards, `noop` failing 30 % of them, `abort: {failure_percent: 20, min_executed: 10,
action: pause}`: the instance ends `aborted` once its first batches commit, no shard starts
after the decision (the shards started when it is seen are the only ones that ever start),
one `instance_aborted` alert is recorded, and the task is paused with the note."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from iotsched.adapters.aws import AwsClients
from iotsched.core.instance_record import InstanceStatus
from iotsched.core.shard_record import ShardStatus
from iotsched.local.runtime import LocalRuntime
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.definitions.task_file import parse_task_file
from iotsched.services.wiring import Wiring
from iotsched.tasklib import registry
from tests.support import PATIENCE_S

pytestmark = [pytest.mark.slow, pytest.mark.moto]

SHARDS = 60
#: every third shard and one more in ten (30 %): each batch of ten holds some
FAILING = [i for i in range(SHARDS) if i % 10 in (1, 4, 7)]
SLOT = datetime(2026, 2, 3, 10, 0, tzinfo=UTC)
INSTANCE = "fleet-push@2026-02-03T10:00Z"


def queue_drained(runtime: LocalRuntime) -> bool:
    """No shard message is waiting or in flight."""
    sqs = AwsClients(region="us-east-1", endpoint_url=runtime.endpoint_url).sqs()
    url = runtime.settings().shard_queue_url
    attributes = sqs.get_queue_attributes(
        QueueUrl=url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return all(int(v) == 0 for v in attributes.values())


def test_an_abort_stops_the_fleet_with_real_workers(
    runtime: LocalRuntime, services: Wiring
) -> None:
    definitions = parse_task_file(
        {
            "tasks": [
                {
                    "id": "fleet-push",
                    "handler": "noop",
                    "trigger": {"rate": "1h"},
                    "timeout_s": 2,
                    "retry": {"max_attempts": 1},
                    "sharding": {
                        "strategy": "static",
                        "shards": [{"n": i} for i in range(SHARDS)],
                    },
                    "params": {"seconds": 0.2, "fail": FAILING},
                    "abort": {"failure_percent": 20, "min_executed": 10, "action": "pause"},
                }
            ]
        },
        handlers=registry(),
    )
    apply_tasks(definitions, services.tasks, now=datetime(2026, 2, 3, 9, 58, tzinfo=UTC))
    runtime.tick(SLOT)

    def aborted() -> bool:
        found = services.instances.get_instance(INSTANCE)
        return found is not None and found.status is InstanceStatus.ABORTED

    assert runtime.wait_for(aborted, PATIENCE_S, 0.02)
    # every message is consumed (those never started are acknowledged unstarted)
    assert runtime.wait_for(lambda: queue_drained(runtime), PATIENCE_S, 0.2)
    time.sleep(0.5)  # a start in flight would have written its record by now
    shards = services.instances.list_shards(INSTANCE)
    # No shard started after the abort was decided: every record left began its attempt before
    # the instance ended. (A start whose stale read still said running takes its lease, reads
    # the fence closed and gives the lease back: its record may show for a moment, so a
    # snapshot at the abort can hold a shard that never ran, and miss one leased just before.)
    decided = services.instances.get_instance(INSTANCE)
    assert decided is not None and decided.finished_at is not None
    assert all(s.attempts[0].started_at <= decided.finished_at for s in shards)
    assert 10 <= len(shards) < SHARDS
    assert all(len(s.attempts) == 1 for s in shards)
    assert runtime.wait_for(
        lambda: all(s.status.final for s in services.instances.list_shards(INSTANCE)),
        PATIENCE_S,
        0.1,
    )
    ended = services.instances.get_instance(INSTANCE)
    assert ended is not None and ended.status is InstanceStatus.ABORTED
    assert ended.reason is not None and "at or above 20% after at least 10" in ended.reason
    statuses = {s.status for s in services.instances.list_shards(INSTANCE)}
    assert statuses <= {ShardStatus.SUCCEEDED, ShardStatus.FAILED, ShardStatus.CANCELLED}

    def settled() -> bool:
        if not (services.instances.get_instance(INSTANCE) or ended).owed:
            return True
        # The worker that ended it does its follow-ups; one killed at its timeout between the
        # end and them (a loaded machine) leaves them to the sweeper, which runs every minute
        # when deployed: this runtime's clock is the test's, so the test sweeps.
        runtime.sweep()
        return not (services.instances.get_instance(INSTANCE) or ended).owed

    assert runtime.wait_for(settled, PATIENCE_S, 2.0)
    alerts = [a for a in services.alert_log.recent(limit=200) if a.instance_id == INSTANCE]
    assert [a.type for a in alerts] == ["instance_aborted"]
    assert alerts[0].reason == ended.reason
    task = services.tasks.get_task("fleet-push")
    assert task is not None and task.paused
    assert task.pause_note == f"aborted {INSTANCE}: {ended.reason}"
