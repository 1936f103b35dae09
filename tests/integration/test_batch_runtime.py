"""The worker's batch path on the local runtime: real worker processes fed batches of 10.

`WorkerBatchSize=10` (template.yaml's default, stated here: the cost benchmark assumes it), so
that each worker invocation runs up to 10 shards and commits their completions together (one
transaction, one decrement per instance). Every shard must run
once and count once, whatever batches the queue hands out and however the two workers split
them.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from iotsched.bootstrap import build
from iotsched.core.instance_record import InstanceStatus
from iotsched.core.shard_record import ShardStatus
from iotsched.local.runtime import LocalRuntime
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.definitions.task_file import parse_task_file
from iotsched.services.wiring import Wiring
from iotsched.tasklib import registry
from tests.support import PATIENCE_S, started_runtime

pytestmark = [pytest.mark.slow, pytest.mark.moto]


# A lease margin (20 s) above the batch's commit allowance (10 s), and a function timeout
# (20 s) above a 2 s shard plus that allowance: the batch holds its finished shards until its
# last record (`ShardBatch` commits sooner only when a lease or the invocation nears its end).
PARAMETERS = {
    "WorkerTimeoutSeconds": "20",
    "ShardVisibilityTimeoutSeconds": "120",
    "WorkerBatchSize": "10",
}
ENV = {"IOTSCHED_LEASE_MARGIN_S": "20", "POWERTOOLS_LOG_LEVEL": "WARNING"}


@pytest.fixture(scope="module")
def runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRuntime]:
    logs = tmp_path_factory.mktemp("batch-runtime-logs")
    with started_runtime(logs, parameters=PARAMETERS, env=ENV, dispatchers=1) as rt:
        yield rt


def test_batches_of_ten_run_every_shard_once_and_count_it_once(runtime: LocalRuntime) -> None:
    services: Wiring = build(runtime.settings())
    start = datetime(2026, 1, 5, 9, 58, tzinfo=UTC)
    definitions = parse_task_file(
        {
            "tasks": [
                {
                    "id": f"batch-{name}",
                    "handler": "noop",
                    "trigger": {"rate": "1h"},
                    "sharding": {"strategy": "id_range", "shards": shards, "id_max": 100_000},
                    "timeout_s": 2,
                }
                for name, shards in (("a", 37), ("b", 23))
            ]
        },
        handlers=registry(),
    )
    apply_tasks(definitions, services.tasks, now=start)

    runtime.tick(datetime(2026, 1, 5, 10, 0, 20, tzinfo=UTC))

    ids = {"batch-a@2026-01-05T10:00Z": 37, "batch-b@2026-01-05T10:00Z": 23}

    def ended() -> bool:
        found = [services.instances.get_instance(i) for i in ids]
        return all(i is not None and i.status.final for i in found)

    assert runtime.wait_for(ended, PATIENCE_S)
    for instance_id, count in ids.items():
        inst = services.instances.get_instance(instance_id)
        assert inst is not None
        assert (inst.status, inst.remaining, inst.failed_shards) == (
            InstanceStatus.SUCCEEDED,
            0,
            0,
        )
        shards = services.instances.list_shards(instance_id)
        assert [s.index for s in shards] == list(range(count))
        for shard in shards:
            assert shard.status is ShardStatus.SUCCEEDED
            assert [a.outcome for a in shard.attempts] == ["succeeded"]  # ran once
    # The workers were handed batches, not one message at a time.
    workers = runtime.workers
    assert {w.batch_size for w in workers} == {10}
    assert sum(w.batches for w in workers) <= 30  # 60 messages: two or more per batch
