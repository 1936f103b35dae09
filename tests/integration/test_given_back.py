"""A worker invocation about to time out gives the records it has not started back at once.

One worker process fed batches of up to 10, a function timeout of 20 s, and a task of three
shards of 7 s each: one invocation receives all three, and 21 s of work does not fit in it. At
20 - 10 s (`ShardBatch.COMMIT_ALLOWANCE_S`) the batch gives back the record it has not started
(a fresh copy sent, the original acknowledged); the shard that is running then finishes inside the timeout, and the
next invocation runs the given-back one. Without that, the runtime kills the invocation at 20 s
in the middle of the third shard, whose message comes back only after the visibility timeout
(120 s here, 30 minutes by default) and whose attempt is lost.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from iotsched.bootstrap import build
from iotsched.core.instance_record import InstanceStatus
from iotsched.core.shard_record import ShardStatus
from iotsched.local.runtime import LocalRuntime
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.definitions.task_file import parse_task_file
from iotsched.services.wiring import Wiring
from iotsched.tasklib import registry
from tests.integration.test_batch_runtime import ENV, PARAMETERS  # 20 s functions, batches of 10
from tests.support import PATIENCE_S, started_runtime

pytestmark = [pytest.mark.slow, pytest.mark.moto]

SHARD_S = 7  # three do not fit in 20 s; the second starts ~3 s before the close


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("given-back-logs")


@pytest.fixture(scope="module")
def runtime(logs: Path) -> Iterator[LocalRuntime]:
    with started_runtime(logs, parameters=PARAMETERS, env=ENV, dispatchers=1, workers=1) as rt:
        yield rt


def given_back_counts(logs: Path) -> list[float]:
    """The ShardsGivenBack values of every EMF document the worker printed."""
    values: list[float] = []
    for path in logs.rglob("*"):
        if not path.is_file():
            continue
        for line in path.read_text(errors="replace").splitlines():
            if "ShardsGivenBack" not in line:
                continue
            try:
                document = json.loads(line)
            except ValueError:
                continue
            raw = document.get("ShardsGivenBack", [])
            values.extend(raw if isinstance(raw, list) else [raw])
    return values


def test_records_an_invocation_cannot_start_in_time_run_in_the_next_one(
    runtime: LocalRuntime, logs: Path
) -> None:
    services: Wiring = build(runtime.settings())
    definitions = parse_task_file(
        {
            "tasks": [
                {
                    "id": "slow",
                    "handler": "noop",
                    "trigger": {"rate": "1h"},
                    "sharding": {"strategy": "id_range", "shards": 3, "id_max": 300},
                    "params": {"seconds": SHARD_S},
                    "timeout_s": SHARD_S + 2,
                    "retry": {"max_attempts": 1},
                }
            ]
        },
        handlers=registry(),
    )
    apply_tasks(definitions, services.tasks, now=datetime(2026, 1, 5, 9, 58, tzinfo=UTC))
    runtime.tick(datetime(2026, 1, 5, 10, 0, 20, tzinfo=UTC))
    instance_id = "slow@2026-01-05T10:00Z"

    def ended() -> bool:
        found = services.instances.get_instance(instance_id)
        return found is not None and found.status.final

    assert runtime.wait_for(ended, PATIENCE_S)
    inst = services.instances.get_instance(instance_id)
    assert inst is not None
    assert (inst.status, inst.remaining, inst.failed_shards) == (InstanceStatus.SUCCEEDED, 0, 0)
    shards = services.instances.list_shards(instance_id)
    assert [(s.status, s.attempt) for s in shards] == [(ShardStatus.SUCCEEDED, 1)] * 3
    # the last shard started after the first invocation ended: after the other two finished
    ends = sorted(s.attempts[0].ended_at for s in shards if s.attempts[0].ended_at)
    last_start = max(s.attempts[0].started_at for s in shards)
    assert last_start >= ends[1]
    # and not a visibility timeout (120 s) after the batch was received, as a stranded message
    # would have been (the bound is the queue's mechanism, not the machine's speed)
    first_start = min(s.attempts[0].started_at for s in shards)
    assert (last_start - first_start).total_seconds() < 100
    # ... because the first invocation sent it back (the worker's ShardsGivenBack metric)
    # (the third one; on a slow machine the second may have been reached after the close too)
    assert sum(given_back_counts(logs)) >= 1
