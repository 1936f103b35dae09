"""Read models for operators, JSON-able: a task and its upcoming fires, an instance, its shards
(and why a shard waits)."""

from __future__ import annotations

from datetime import datetime
from itertools import islice
from typing import Any

from iotsched.core.attempt_record import Attempt
from iotsched.core.fires import exclusions, stop_reason, upcoming
from iotsched.core.group_windows import shard_window
from iotsched.core.instance_record import InstanceRecord
from iotsched.core.messages import send_order
from iotsched.core.shard_record import (
    ShardRecord,
    ShardStatus,
)
from iotsched.core.task_record import TaskRecord
from iotsched.core.timeutil import iso
from iotsched.core.trigger_text import describe_trigger
from iotsched.core.windows import is_open
from iotsched.services.fleet import rollout
from iotsched.services.tenancy import pacing


def task_view(task: TaskRecord) -> dict[str, Any]:
    """A task as `tasks list` shows it."""
    d = task.definition
    trigger = d.trigger.model_dump(mode="json", exclude_defaults=True)
    return {
        "id": d.id,
        "tenant": d.tenant,
        "handler": d.handler,
        "trigger": trigger,
        "trigger_text": describe_trigger(d.trigger),
        "timezone": d.timezone,
        "enabled": d.enabled,
        "paused": task.paused,
        "pause_note": task.pause_note,
        "sharding": d.sharding.strategy.value,
        "version": task.version,
        "next_fire": iso(task.next_fire) if task.next_fire else None,
        "last_slot": iso(task.last_slot) if task.last_slot else None,
        "runs": task.runs,
        "stop_reason": stop_reason(d, task.runs, task.next_fire),
        "excluded_dates": {
            day.isoformat(): source for day, source in sorted(exclusions(d, task.calendars).items())
        },
    }


def upcoming_fires(task: TaskRecord, count: int = 5) -> list[datetime]:
    """The task's next `count` fire instants (UTC), from its clock: none while paused (the tick
    fires nothing), for a one-time task that has fired, or for an after-trigger."""
    if task.next_fire is None or task.paused or not task.definition.enabled:
        return []
    fires = upcoming(
        task.definition,
        next_fire=task.next_fire,
        last_slot=task.last_slot,
        runs=task.runs,
        calendars=task.calendars,
    )
    # Slots waiting for one window opening fire at one instant: listed once.
    instants: list[datetime] = []
    for fire in islice(fires, MAX_LOOKED_AT):
        if fire.excluded_by is None and fire.fire_at not in instants:
            instants.append(fire.fire_at)
            if len(instants) == count:
                break
    return instants


#: Slots `upcoming_fires` looks at, at most (a minutely task waiting for a weekly window).
MAX_LOOKED_AT = 20_000


def instance_view(inst: InstanceRecord) -> dict[str, Any]:
    """An instance as `instances` shows it."""
    shards = inst.plan.count
    duration = (inst.finished_at - inst.created_at).total_seconds() if inst.finished_at else None
    return {
        "instance_id": inst.instance_id,
        "task_id": inst.task_id,
        "tenant": inst.tenant,
        "slot": iso(inst.slot),
        "trigger_kind": inst.trigger_kind.value,
        "business_date": inst.business_date.isoformat(),
        "status": inst.status.value,
        "reason": inst.reason,
        "shards": shards,
        "remaining": inst.remaining,
        "failed_shards": inst.failed_shards,
        "covers": [iso(s) for s in inst.covers],
        "covers_count": inst.covers_count,
        "created_at": iso(inst.created_at),
        "finished_at": iso(inst.finished_at) if inst.finished_at else None,
        "duration_s": duration,
        "task_version": inst.task_version,
        "run": inst.run,
        "rerun_of": inst.rerun_of,
        "rerun_shards": inst.only,
        "priority": inst.priority.value,
        "waiting": inst.waiting,
    }


def _held(
    inst: InstanceRecord,
    index: int,
    bounds: dict[str, Any],
    unsent: set[int],
    now: datetime | None,
) -> bool:
    """True if an open instance's unstarted shard is held back: not sent yet, or its window
    closed at `now` (its message waits as a delayed copy until the window opens)."""
    if index in unsent:
        return True
    if now is None or inst.window is None or inst.status.final:
        return False
    window = shard_window(inst.window, bounds)
    return window is not None and not is_open(window, now)


#: The grid's status of a shard held back from starting: a paced instance's shard not sent yet
#: (its rate or window), or one whose window (the instance's, or its device group's) is closed
#: at `now`; it is `pending` once it may start.
WAITING = "waiting"


def _status(record: ShardRecord, inst: InstanceRecord) -> str:
    """A record's status as shown: a pending one of an ended instance never runs (cancelled)."""
    if inst.status.final and record.status is ShardStatus.PENDING:
        return ShardStatus.CANCELLED.value
    return record.status.value


def shard_views(
    inst: InstanceRecord, records: list[ShardRecord], now: datetime | None = None
) -> list[dict[str, Any]]:
    """Every planned shard, with its execution record where one exists (else pending, or
    waiting: see `WAITING`; a window's hold is read at `now`, when given)."""
    by_index = {r.index: r for r in records}
    # A shard with no record never started: pending while the instance is open, cancelled
    # (never to run) once it has ended.
    unstarted = (ShardStatus.CANCELLED if inst.status.final else ShardStatus.PENDING).value
    # A paced instance (rollout, window) sends its shards as they may start: those not sent
    # yet wait for their turn (`waiting`), the others are on the queue (`pending`).
    unsent: set[int] = set()
    if not inst.status.final and (rollout.paced(inst) or pacing.cap_paced(inst)):
        unsent = set(send_order(inst)[inst.sent :])
    views = []
    for index, bounds in enumerate(inst.plan.all_bounds()):
        record = by_index.get(index)
        waiting = WAITING if record is None and _held(inst, index, bounds, unsent, now) else None
        if inst.only is not None and index not in inst.only:
            views.append(
                {
                    "index": index,
                    "bounds": bounds,
                    "status": "not_rerun",  # this run re-did other shards; see earlier runs
                    "attempt": 0,
                    "owner": None,
                    "error": None,
                    "keys_written": [],
                    "keys_count": 0,
                    "attempts": [],
                }
            )
            continue
        views.append(
            {
                "index": index,
                "bounds": bounds,
                "status": _status(record, inst) if record else waiting or unstarted,
                "attempt": record.attempt if record else 0,
                "owner": record.owner if record else None,
                "error": record.error if record else None,
                "keys_written": record.keys_written if record else [],
                "keys_count": record.keys_count if record else 0,
                "attempts": [_attempt_view(a) for a in record.attempts] if record else [],
                "result": record.result if record else None,
            }
        )
    reduce = by_index.get(inst.plan.count)
    if reduce is not None:  # the reduce's own record, after the shards
        views.append(
            {
                "index": reduce.index,
                "bounds": reduce.bounds,
                "status": reduce.status.value,
                "attempt": reduce.attempt,
                "owner": reduce.owner,
                "error": reduce.error,
                "keys_written": reduce.keys_written,
                "keys_count": reduce.keys_count,
                "attempts": [_attempt_view(a) for a in reduce.attempts],
                "result": reduce.result,
            }
        )
    return views


def _attempt_view(attempt: Attempt) -> dict[str, Any]:
    """An attempt as the shard views give it: its log's counts and whereabouts, without its
    lines (the logs route and `iotsched logs` give those), so that a page of shards stays
    small."""
    return attempt.model_dump(mode="json", exclude={"log": {"lines"}})
