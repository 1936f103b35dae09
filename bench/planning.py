"""Planning an `id_range` instance of 100 shards over 10k, 100k and 1M devices.

What the dispatcher does at claim time, in this process: `build_instance` (which plans the
shards with `plan_shards`), then `shard_messages` and their JSON bodies, all 100 of them. Time:
median of runs by time.perf_counter (tracemalloc off); memory: tracemalloc's peak over one run.
The plan stores the id space and the shard count, never the devices, so neither should grow
with the device count.
"""

from __future__ import annotations

import time
import tracemalloc
from datetime import UTC, datetime
from typing import Any

from bench.common import median, rounded

DEVICES = (10_000, 100_000, 1_000_000)
SHARDS = 100
AT = datetime(2026, 12, 5, 0, 0, tzinfo=UTC)
GROWTH_ALLOWED = 1.10  # peak at 1M within 10% of the peak at 10k


def _plan(devices: int) -> int:
    from iotsched.core.decisions import Firing
    from iotsched.core.instance_record import (
        InstanceStatus,
        TriggerKind,
    )
    from iotsched.core.task_definition import TaskDefinition
    from iotsched.core.task_record import TaskRecord
    from iotsched.services.scheduling.build import build_instance
    from iotsched.services.scheduling.send import shard_messages

    definition = TaskDefinition.model_validate(
        {
            "id": f"plan-{devices}",
            "handler": "noop",
            "trigger": {"rate": "1h"},
            "sharding": {"strategy": "id_range", "shards": SHARDS, "id_max": devices},
        }
    )
    instance = build_instance(
        TaskRecord(definition=definition, version=1, next_fire=AT, updated_at=AT),
        Firing(slot=AT, kind=TriggerKind.SCHEDULED, status=InstanceStatus.PLANNING),
        claimed_at=AT,
        dispatch_lease_s=60,
    )
    bodies = [m.model_dump_json() for m in shard_messages(instance)]
    return sum(len(b) for b in bodies)


def run(*, runs: int = 7) -> dict[str, Any]:
    """Time and peak memory at each device count."""
    _plan(DEVICES[0])  # imports and pydantic's first-use work, outside the figures
    seconds: dict[int, list[float]] = {n: [] for n in DEVICES}
    for _ in range(runs):
        for devices in DEVICES:
            started = time.perf_counter()
            _plan(devices)
            seconds[devices].append(time.perf_counter() - started)
    peaks: dict[int, float] = {}
    sizes: dict[int, int] = {}
    for devices in DEVICES:
        tracemalloc.start()
        sizes[devices] = _plan(devices)
        _current, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        peaks[devices] = peak / (1024 * 1024)
    growth = peaks[DEVICES[-1]] / peaks[DEVICES[0]]
    return {
        "shards": SHARDS,
        "runs": runs,
        "median_ms": {str(n): rounded(median(v) * 1000, 2) for n, v in seconds.items()},
        "plan_peak_mb": {str(n): rounded(p, 3) for n, p in peaks.items()},
        "message_bytes": {str(n): s for n, s in sizes.items()},
        "peak_growth_1m_over_10k": rounded(growth, 3),
        "met": growth <= GROWTH_ALLOWED,
    }


if __name__ == "__main__":
    import json
    import sys

    sys.stdout.write(json.dumps(run(), indent=1) + "\n")
