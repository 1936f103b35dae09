"""A tenant's `max_concurrent_shards` on the local runtime: real worker processes, real SQS
delays. A tenant capped at one shard in flight has its shards deferred while one runs, and
every shard still succeeds, never two of them running at once."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from iotsched.bootstrap import build
from iotsched.core.instance_record import InstanceStatus
from iotsched.core.shard_record import ShardStatus
from iotsched.local.runtime import LocalRuntime
from iotsched.services.definitions.apply import apply_task_file
from iotsched.services.tenancy.slots import SLOT_RETRY_S
from iotsched.services.wiring import Wiring
from iotsched.tasklib import registry
from tests.integration.conftest import ENV, PARAMETERS
from tests.support import PATIENCE_S, started_runtime

pytestmark = [pytest.mark.slow, pytest.mark.moto]


@pytest.fixture(scope="module")
def runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRuntime]:
    """The runtime of the other tests, with one shard per invocation, so that the two worker
    processes run shards side by side (the cap is then what keeps them apart)."""
    logs = tmp_path_factory.mktemp("runtime-logs")
    parameters = {**PARAMETERS, "WorkerBatchSize": "1"}
    with started_runtime(logs, parameters=parameters, env=ENV, dispatchers=1) as rt:
        yield rt


@pytest.fixture(scope="module")
def services(runtime: LocalRuntime) -> Wiring:
    return build(runtime.settings())


# Each shard: 2 units of this long (the runtime's worker times out after 4 s).
UNIT_S = 0.4


def test_a_capped_tenant_runs_one_shard_at_a_time_and_every_shard_succeeds(
    runtime: LocalRuntime, services: Wiring, tmp_path: Path
) -> None:
    start_log = tmp_path / "starts.jsonl"
    start = datetime(2026, 1, 5, 9, 58, tzinfo=UTC)
    apply_task_file(
        {
            "tenants": [{"name": "acme", "quotas": {"max_concurrent_shards": 1}}],
            "tasks": [
                {
                    "id": "capped",
                    "tenant": "acme",
                    "handler": "chaos",
                    "trigger": {"rate": "1h"},
                    "sharding": {"strategy": "id_range", "shards": 4, "id_max": 40},
                    "params": {"effects": 2, "unit_seconds": UNIT_S, "start_log": str(start_log)},
                    "timeout_s": 30,
                }
            ],
        },
        handlers=registry(),
        store=lambda: services.tasks,
        now=lambda: start,
        actor="test",
    )
    runtime.tick(datetime(2026, 1, 5, 10, 0, 20, tzinfo=UTC))
    instance_id = "capped@2026-01-05T10:00Z"

    def final() -> bool:
        inst = services.instances.get_instance(instance_id)
        return inst is not None and inst.status.final

    assert runtime.wait_for(final, PATIENCE_S)
    inst = services.instances.get_instance(instance_id)
    assert inst is not None and inst.status is InstanceStatus.SUCCEEDED
    assert inst.tenant_cap == 1
    shards = services.instances.list_shards(instance_id)
    assert [s.status for s in shards] == [ShardStatus.SUCCEEDED] * 4
    assert all(len(s.attempts) == 1 for s in shards), [
        [(a.outcome, a.error, a.worker) for a in s.attempts] for s in shards
    ]  # deferred, never failed or retried
    # One at a time: each attempt started after the one before had run its two units.
    starts = sorted(json.loads(line)["time"] for line in start_log.read_text().splitlines())
    assert len(starts) == 4
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert all(gap >= 2 * UNIT_S - 0.1 for gap in gaps), gaps
    # Two workers took shards at once and one was deferred: it came back a delay later.
    assert max(gaps) >= SLOT_RETRY_S - 1, gaps


def test_a_capped_tenants_instances_send_one_after_another(
    runtime: LocalRuntime, services: Wiring, tmp_path: Path
) -> None:
    """Two instances of one capped tenant claimed in one tick: the second sends nothing until
    the first has ended (the worker that ends it hands the line over), then runs in turn."""
    start_log = tmp_path / "starts.jsonl"

    def task(task_id: str) -> dict[str, object]:
        return {
            "id": task_id,
            "tenant": "globex",
            "handler": "chaos",
            "trigger": {"rate": "1h"},
            "sharding": {"strategy": "id_range", "shards": 3, "id_max": 30},
            "params": {"effects": 1, "unit_seconds": UNIT_S, "start_log": str(start_log)},
            "timeout_s": 30,
        }

    apply_task_file(
        {
            "tenants": [{"name": "globex", "quotas": {"max_concurrent_shards": 1}}],
            "tasks": [task("line-first"), task("line-second")],
        },
        handlers=registry(),
        store=lambda: services.tasks,
        now=lambda: datetime(2026, 1, 5, 12, 58, tzinfo=UTC),
        actor="test",
    )
    runtime.tick(datetime(2026, 1, 5, 13, 0, 20, tzinfo=UTC))
    ids = [f"line-{n}@2026-01-05T13:00Z" for n in ("first", "second")]

    def both_final() -> bool:
        found = [services.instances.get_instance(i) for i in ids]
        return all(inst is not None and inst.status.final for inst in found)

    assert runtime.wait_for(both_final, PATIENCE_S)
    for instance_id in ids:
        inst = services.instances.get_instance(instance_id)
        assert inst is not None and inst.status is InstanceStatus.SUCCEEDED, instance_id
    starts: dict[str, list[float]] = {i: [] for i in ids}
    for line in start_log.read_text().splitlines():
        record = json.loads(line)
        starts[record["instance_id"]].append(record["time"])
    first, second = (sorted(starts[i]) for i in ids)
    assert len(first) == len(second) == 3
    # The second's first shard started once the first's last had run its unit.
    assert second[0] >= first[-1] + UNIT_S - 0.1, (first, second)
    assert services.instances.tenant_line_head("globex") is None
