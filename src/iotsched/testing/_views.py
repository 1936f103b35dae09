"""What a test reads of a task's instance run by `TaskHarness`: `TaskRun` and its `ShardRun`s,
snapshots built from the records the scheduler wrote."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any

from iotsched.core.instance_record import (
    InstanceRecord,
    InstanceStatus,
)
from iotsched.core.logs import LogLine
from iotsched.core.shard_record import (
    ShardRecord,
    ShardStatus,
)
from iotsched.services.operations.logs import (
    LogReadPorts,
    read_log,
)
from iotsched.testing._run import Effect


@dataclass(frozen=True)
class ShardRun:
    """One shard (or the reduce) of an instance, as its execution record says.

    Attributes:
        index: the shard's index (the reduce's is the shard count).
        status: `pending`, `running`, `succeeded`, `failed`, `timed_out` or `cancelled`.
        bounds: its bounds.
        result: what its handler returned (stored as JSON), if it succeeded.
        error: the error of its last attempt (`RetryShard: device service busy`), if any.
        attempts: how many attempts it took.
        logs: the log lines of every attempt, oldest attempt first.
    """

    index: int
    status: str
    bounds: Mapping[str, Any]
    result: Mapping[str, Any] | None
    error: str | None
    attempts: int
    logs: list[LogLine]


@dataclass(frozen=True)
class TaskRun:
    """An instance of a task and where it stands (a snapshot: read it again with
    `TaskHarness.instance`).

    Attributes:
        instance_id: the instance (`<task>@<slot>`, a rerun `...~run2`).
        task_id: its task.
        status: `scheduled`, `queued`, `planning`, `running`, `reducing`, or a final one:
            `succeeded`, `failed`, `timed_out`, `cancelled`, `skipped`, `aborted`.
        reason: why it ended so, where the scheduler says (`upstream_failed`, ...).
        business_date: its business date.
        params: its params, as the shards receive them.
        shards: every shard of its plan, by index (those not started yet `pending`).
        reduce: its reduce, once it started (None without one).
        effects: the effects its attempts claimed with `ctx.once`, in order.
        skipped: the keys `ctx.once` refused its attempts (claimed before).
        alerts: the alerts raised for it, each as the JSON subscribers receive.
    """

    instance_id: str
    task_id: str
    status: str
    reason: str | None
    business_date: date
    params: Mapping[str, Any]
    shards: list[ShardRun]
    reduce: ShardRun | None
    effects: list[Effect]
    skipped: list[str]
    alerts: list[dict[str, Any]]

    @property
    def ended(self) -> bool:
        """True once its status is final."""
        return InstanceStatus(self.status).final

    @property
    def results(self) -> list[Mapping[str, Any] | None]:
        """Each shard's result, by index (None: not succeeded, or returned nothing)."""
        return [s.result for s in self.shards]

    @property
    def reduce_result(self) -> Mapping[str, Any] | None:
        """What the reduce returned, if it succeeded."""
        return self.reduce.result if self.reduce is not None else None

    @property
    def logs(self) -> list[LogLine]:
        """Every attempt's log lines: shard by shard, then the reduce's."""
        runs = [*self.shards, *([self.reduce] if self.reduce is not None else [])]
        return [line for shard in runs for line in shard.logs]


def task_run(
    instance: InstanceRecord,
    records: Sequence[ShardRecord],
    services: LogReadPorts,
    *,
    effects: Sequence[tuple[Effect, bool]],
    alerts: Sequence[dict[str, Any]],
) -> TaskRun:
    """The view of `instance` from its shard records; `effects`: every `ctx.once` seen by the
    harness, with whether it claimed the key."""
    by_index = {r.index: r for r in records}
    count = instance.plan.count
    indexes = instance.only if instance.only is not None else range(count)
    shards = [
        _shard(by_index[i], services)
        if i in by_index
        else ShardRun(
            index=i,
            status=ShardStatus.PENDING.value,
            bounds=instance.plan.bounds(i),
            result=None,
            error=None,
            attempts=0,
            logs=[],
        )
        for i in indexes
    ]
    reduce = _shard(by_index[count], services) if count in by_index else None
    mine = [(e, claimed) for e, claimed in effects if e.instance_id == instance.instance_id]
    return TaskRun(
        instance_id=instance.instance_id,
        task_id=instance.task_id,
        status=instance.status.value,
        reason=instance.reason,
        business_date=instance.business_date,
        params=instance.params,
        shards=shards,
        reduce=reduce,
        effects=[e for e, claimed in mine if claimed],
        skipped=[e.key for e, claimed in mine if not claimed],
        alerts=[a for a in alerts if a.get("instance_id") == instance.instance_id],
    )


def _shard(record: ShardRecord, services: LogReadPorts) -> ShardRun:
    last = record.attempts[-1] if record.attempts else None
    return ShardRun(
        index=record.index,
        status=record.status.value,
        bounds=record.bounds,
        result=record.result,
        error=record.error or (last.error if last is not None else None),
        attempts=len(record.attempts),
        logs=[
            line
            for attempt in record.attempts
            for line in read_log(record.instance_id, record.index, attempt.number, services).lines
        ],
    )
