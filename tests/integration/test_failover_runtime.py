"""Failover at the template's default timeouts, on the local runtime with real processes.

The worker function's timeout and the shard queue's visibility are the template's defaults
(300 s and 1,800 s, the 6x rule kept); only the lease (6 s) and the sweep period (every 5 s, the
test delivers the Sweep rule's event) are shortened, so the test runs in well under a minute.
A worker process is SIGKILLed mid-shard: its shard is taken over through the sweeper's fresh
message long before its message would reappear.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from iotsched import bootstrap
from iotsched.core.attempt_record import AttemptOutcome
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
SHARD_S = 12  # two leases: it needs its renewals


@pytest.fixture(scope="module")
def runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRuntime]:
    with started_runtime(
        tmp_path_factory.mktemp("failover-logs"),
        parameters={
            "WorkerTimeoutSeconds": "300",
            "ShardVisibilityTimeoutSeconds": str(VISIBILITY_S),
            "ShardLeaseSeconds": str(LEASE_S),
        },
        env={"POWERTOOLS_LOG_LEVEL": "WARNING"},
        dispatchers=1,
    ) as rt:
        yield rt


def _shard(services: Wiring, instance_id: str) -> ShardRecord | None:
    found = services.instances.list_shards(instance_id)
    return found[0] if found else None


@pytest.mark.slow
@pytest.mark.moto
def test_a_worker_killed_mid_shard_is_taken_over_within_a_lease_and_a_sweep(
    runtime: LocalRuntime,
) -> None:
    services = bootstrap.build(runtime.settings())
    definition = {
        "id": "failover",
        "handler": "noop",
        "trigger": {"at": "2026-03-02T10:00:00Z"},
        "timeout_s": 300,
        "retry": {"max_attempts": 3, "backoff_s": 0},
        "params": {"seconds": SHARD_S},
    }
    apply_tasks(
        parse_task_file({"tasks": [definition]}, handlers=registry()),
        services.tasks,
        now=datetime(2026, 3, 2, 9, 58, tzinfo=UTC),
    )
    (result,) = runtime.tick(datetime(2026, 3, 2, 10, 0, tzinfo=UTC))
    instance_id = "failover@2026-03-02T10:00Z"
    assert result.report["claimed"] == [instance_id]

    # Attempt 1 runs and its worker renews the lease (no heartbeat: the noop only sleeps).
    first: list[datetime] = []

    def renewed() -> bool:
        shard = _shard(services, instance_id)
        if shard is None or shard.status is not ShardStatus.RUNNING or shard.lease_until is None:
            return False
        if not first:
            first.append(shard.lease_until)
        return shard.lease_until > first[0]

    assert runtime.wait_for(renewed, PATIENCE_S, 0.2), "attempt 1 never renewed its lease"
    running = _shard(services, instance_id)
    assert running is not None and running.owner is not None
    index = next(i for i, w in enumerate(runtime.workers) if running.owner.startswith(w.name))
    runtime.kill_worker(index)
    died = time.time()

    # The sweeper, every 5 s, finds the lease expired (6 s after the last renewal) and sends a
    # fresh message, or the held message comes back; a worker takes the shard over as attempt 2.
    requeued: list[str] = []
    last_sweep = float("-inf")

    def taken_over() -> bool:
        nonlocal last_sweep
        if time.monotonic() - last_sweep >= SWEEP_EVERY_S:
            last_sweep = time.monotonic()
            requeued.extend(runtime.sweep().get("requeued_shards", []))
        shard = _shard(services, instance_id)
        return shard is not None and shard.attempt >= 2

    assert runtime.wait_for(taken_over, PATIENCE_S, 0.2), "the shard was not taken over"
    # Whichever comes first takes over: the sweeper's fresh message, or the dead worker's own
    # message, back within a lease (its invocation held it); the other finds the lease live
    # (one takeover: attempt 2 below).
    assert requeued in ([], [f"{instance_id}#0"])

    def final() -> bool:
        inst = services.instances.get_instance(instance_id)
        return inst is not None and inst.status.final

    assert runtime.wait_for(final, PATIENCE_S, 0.5)
    inst = services.instances.get_instance(instance_id)
    shard = _shard(services, instance_id)
    assert inst is not None and shard is not None
    assert (inst.status, shard.status, shard.attempt) == (
        InstanceStatus.SUCCEEDED,
        ShardStatus.SUCCEEDED,
        2,
    )
    lost, second = shard.attempts
    assert (lost.outcome, second.outcome) == (AttemptOutcome.LOST, AttemptOutcome.SUCCEEDED)
    # the killed process's attempt, closed lost when another process's attempt took over
    assert lost.worker == running.owner and second.worker != running.owner
    assert lost.ended_at == second.started_at
    resumed_after_s = second.started_at.timestamp() - died
    # within a lease and a sweep period (plus the machine's load), not a visibility timeout
    assert 0 < resumed_after_s < LEASE_S + SWEEP_EVERY_S + 20, resumed_after_s
    assert resumed_after_s < VISIBILITY_S / 10
