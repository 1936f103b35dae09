"""A dead worker's unstarted batch records, at the template's default timeouts, on the local
runtime with real worker processes.

Worker timeout 300 s and visibility 1,800 s (the template's defaults, the 6x rule kept), three
records per invocation; only the lease (6 s, and with it the records' visibility hold) and the
sweep period (every 5 s, the test delivers the Sweep rule's event) are shortened. The worker
holding the batch is SIGKILLed during its first record: the two records it had not started come
back within a hold and another worker runs each once, long before their visibility timeout.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from iotsched import bootstrap
from iotsched.core.instance_record import InstanceStatus
from iotsched.core.shard_record import (
    ShardRecord,
    ShardStatus,
)
from iotsched.local.runtime import LocalRuntime
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.definitions.task_file import parse_task_file
from iotsched.services.wiring import Wiring
from iotsched.tasklib import registry
from tests.support import PATIENCE_S, started_runtime

LEASE_S = 6
SWEEP_EVERY_S = 5.0
VISIBILITY_S = 1800
SHARD_S = 4


@pytest.fixture(scope="module")
def runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRuntime]:
    with started_runtime(
        tmp_path_factory.mktemp("batch-failover-logs"),
        parameters={
            "WorkerTimeoutSeconds": "300",
            "ShardVisibilityTimeoutSeconds": str(VISIBILITY_S),
            "ShardLeaseSeconds": str(LEASE_S),
            "WorkerBatchSize": "3",
        },
        env={"POWERTOOLS_LOG_LEVEL": "WARNING"},
        dispatchers=1,
    ) as rt:
        yield rt


def _shards(services: Wiring, instance_id: str) -> dict[int, ShardRecord]:
    return {s.index: s for s in services.instances.list_shards(instance_id)}


@pytest.mark.slow
@pytest.mark.moto
def test_a_killed_worker_s_unstarted_records_run_elsewhere_within_a_hold(
    runtime: LocalRuntime,
) -> None:
    services = bootstrap.build(runtime.settings())
    definition = {
        "id": "batchfail",
        "handler": "noop",
        "trigger": {"at": "2026-03-02T10:00:00Z"},
        "timeout_s": 300,
        "sharding": {"strategy": "static", "shards": [{"n": 0}, {"n": 1}, {"n": 2}]},
        "retry": {"max_attempts": 3, "backoff_s": 0},
        "params": {"seconds": SHARD_S},
    }
    apply_tasks(
        parse_task_file({"tasks": [definition]}, handlers=registry()),
        services.tasks,
        now=datetime(2026, 3, 2, 9, 58, tzinfo=UTC),
    )
    instance_id = "batchfail@2026-03-02T10:00Z"
    # The three messages wait while the workers are paused, so that one receive takes them all.
    with runtime.workers_paused():
        (result,) = runtime.tick(datetime(2026, 3, 2, 10, 0, tzinfo=UTC))
        assert result.report["claimed"] == [instance_id]

    # Shard 0 runs and renews its lease (so the batch's hold was renewed too); 1 and 2 wait.
    first: list[datetime] = []

    def renewed() -> bool:
        shard = _shards(services, instance_id).get(0)
        if shard is None or shard.status is not ShardStatus.RUNNING or shard.lease_until is None:
            return False
        if not first:
            first.append(shard.lease_until)
        return shard.lease_until > first[0]

    assert runtime.wait_for(renewed, PATIENCE_S, 0.1), "shard 0 never renewed its lease"
    running = _shards(services, instance_id)
    assert set(running) == {0}, "shards 1 and 2 were not waiting in shard 0's batch"
    owner = running[0].owner
    assert owner is not None
    index = next(i for i, w in enumerate(runtime.workers) if owner.startswith(w.name))
    runtime.kill_worker(index)
    died = time.time()

    # Records 2 and 3 come back within a hold (6 s) and another worker runs them; shard 0 is
    # taken over (its own message, or the sweeper's fresh one once its lease ended).
    last_sweep = float("-inf")

    def final() -> bool:
        nonlocal last_sweep
        if time.monotonic() - last_sweep >= SWEEP_EVERY_S:
            last_sweep = time.monotonic()
            runtime.sweep()
        inst = services.instances.get_instance(instance_id)
        return inst is not None and inst.status.final

    assert runtime.wait_for(final, PATIENCE_S, 0.2), "the instance never ended"
    inst = services.instances.get_instance(instance_id)
    assert inst is not None and inst.status is InstanceStatus.SUCCEEDED
    shards = _shards(services, instance_id)
    assert {i: (s.status, s.attempt) for i, s in shards.items()} == {
        0: (ShardStatus.SUCCEEDED, 2),
        1: (ShardStatus.SUCCEEDED, 1),  # once each: never started by the dead worker
        2: (ShardStatus.SUCCEEDED, 1),
    }
    for i in (1, 2):
        (attempt,) = shards[i].attempts
        assert attempt.worker is not None and not attempt.worker.startswith(owner)
        started_after_s = attempt.started_at.timestamp() - died
        # within a hold and the shards ahead of it in the new batch (plus the machine's load),
        # not a visibility timeout
        assert 0 < started_after_s < LEASE_S + 2 * SHARD_S + 30, (i, started_after_s)
        assert started_after_s < VISIBILITY_S / 20
