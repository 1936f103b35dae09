"""The demo's fleet phase: device-touching tasks under a rollout rate and abort criteria.

The tasks of `examples/fleet-tasks.yaml` are fired by hand when the demo starts and run in real
time (rollout rates count the workers' clock, the real one) while the simulated days replay.
What it reports is computed from the records: shard starts per minute, the abort's reason and
figures, shard starts after the abort (0 when the fence held) and the alerts raised.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from iotsched.core.instance_record import InstanceRecord
from iotsched.core.task_definition import TaskDefinition
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.definitions.task_file import parse_task_file
from iotsched.services.operations.on_demand import run_now
from iotsched.services.wiring import Wiring
from iotsched.tasklib import registry

FLEET_FILE = Path(__file__).resolve().parent.parent / "examples" / "fleet-tasks.yaml"
#: How often the phase's wait sweeps: the sweeper sends a paced instance's next shards.
SWEEP_EVERY_S = 5.0


def fleet_tasks() -> list[TaskDefinition]:
    """The fleet tasks the demo applies."""
    data = yaml.safe_load(FLEET_FILE.read_text(encoding="utf-8"))
    return parse_task_file(data, handlers=registry())


def start_fleet(services: Wiring) -> list[str]:
    """Apply the fleet tasks and fire each once, now; returns the instance ids."""
    definitions = fleet_tasks()
    apply_tasks(definitions, services.tasks, now=services.clock.now(), actor="local:demo")
    return [run_now(d.id, services)[0].instance_id for d in definitions]


def wait_fleet(
    services: Wiring, instance_ids: list[str], sweep: Callable[[], object], timeout_s: float
) -> bool:
    """Wait until every fleet instance ended, sweeping now and then; False on timeout."""
    deadline = time.monotonic() + timeout_s
    next_sweep = 0.0
    while time.monotonic() < deadline:
        instances = [services.instances.get_instance(i) for i in instance_ids]
        if all(i is not None and i.status.final for i in instances):
            return True
        if time.monotonic() >= next_sweep:
            sweep()
            next_sweep = time.monotonic() + SWEEP_EVERY_S
        time.sleep(0.5)
    return False


def fleet_summary(services: Wiring, instance_ids: list[str]) -> dict[str, Any]:
    """What the rollout and the abort criteria did, per fleet instance, from the records."""
    alerts = services.alert_log.recent(limit=200)
    rows: dict[str, Any] = {}
    for instance_id in instance_ids:
        instance = services.instances.get_instance(instance_id)
        if instance is None:
            continue
        rows[instance.task_id] = _instance_figures(services, instance, alerts)
    return rows


def _instance_figures(
    services: Wiring, instance: InstanceRecord, alerts: list[Any]
) -> dict[str, Any]:
    starts = [
        attempt.started_at
        for shard in services.instances.list_shards(instance.instance_id)
        if shard.index < instance.plan.count
        for attempt in shard.attempts
    ]
    per_minute = Counter(s.replace(second=0, microsecond=0) for s in starts)
    rollout = instance.rollout
    row: dict[str, Any] = {
        "instance_id": instance.instance_id,
        "status": instance.status.value,
        "reason": instance.reason,
        "shards_planned": instance.plan.count,
        "shard_starts": len(starts),
        "starts_per_minute": [per_minute[m] for m in sorted(per_minute)],
        "max_starts_in_a_minute": max(per_minute.values(), default=0),
        "rate_limit_per_minute": rollout.max_shards_per_minute if rollout else None,
        "alerts": sorted(a.type for a in alerts if a.instance_id == instance.instance_id),
    }
    if instance.abort is not None and instance.finished_at is not None:
        row["starts_after_the_end"] = sum(1 for s in starts if s > instance.finished_at)
        task = services.tasks.get_task(instance.task_id)
        row["task_paused"] = bool(task and task.paused)
        row["pause_note"] = task.pause_note if task else None
    return row


def fleet_lines(rows: dict[str, Any]) -> list[str]:
    """The fleet phase told in a few lines."""
    lines = []
    for task_id, row in rows.items():
        minutes = " + ".join(str(n) for n in row["starts_per_minute"]) or "0"
        line = (
            f"{task_id}: {row['status']}, {row['shard_starts']} of {row['shards_planned']} "
            f"shards started ({minutes} a minute; limit {row['rate_limit_per_minute']})"
        )
        if row["status"] == "aborted":
            line += (
                f"; {row['reason']}; {row.get('starts_after_the_end', 0)} starts after the "
                f"abort; alerts {', '.join(row['alerts']) or 'none'}"
                + ("; task paused" if row.get("task_paused") else "")
            )
        lines.append(line)
    return lines
