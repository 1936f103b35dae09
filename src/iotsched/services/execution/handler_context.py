"""What a handler sees of its attempt (`shard_context`): the heartbeat, the effect ledger, the
cancel watch, the partial results of a reduce; and what it may return (`checked_result`).

`shard_context` takes `ClockedInstancePorts` (runs, effects, the time they are stamped
with); `run_ids` and `CancelWatch` read instances only (`InstancePorts`).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from iotsched.context import ResourceCache, ShardContext
from iotsched.core.attempt_record import (
    LISTED_KEYS,
    Attempt,
)
from iotsched.core.shard_message import ShardMessage
from iotsched.core.shard_record import (
    ShardRecord,
    ShardStatus,
)
from iotsched.core.task_policies import EFFECT_RETENTION_FLOOR_DAYS
from iotsched.ports.shards import StaleAttemptError
from iotsched.ports.tracing import (
    NoTracer,
    Tracer,
)
from iotsched.services.execution.capture import (
    HANDLER_LOGGER,
    AttemptCapture,
)
from iotsched.services.execution.renewal import LeaseRenewal
from iotsched.services.execution.timer import AttemptTimer
from iotsched.services.port_sets import (
    ClockedInstancePorts,
    InstancePorts,
)

MAX_RESULT_BYTES = 32 * 1024


class ResultTooLargeError(ValueError):
    """A partial result too large for the execution record."""


def checked_result(result: object) -> Mapping[str, Any] | None:
    """A handler's partial result: a small JSON object (large results belong in S3 under a
    key the handler derives from the instance and shard, with only that key returned here)."""
    if result is None:
        return None
    if not isinstance(result, Mapping):
        raise TypeError(f"a handler returns a mapping or None, not {type(result).__name__}")
    size = len(json.dumps(result, default=str))
    if size > MAX_RESULT_BYTES:
        raise ResultTooLargeError(
            f"partial result of {size} bytes exceeds {MAX_RESULT_BYTES}; write it to object "
            "storage and return its key"
        )
    stored: dict[str, Any] = json.loads(json.dumps(result, default=str))  # JSON-safe, as stored
    return stored


def run_ids(instance_id: str, services: InstancePorts) -> list[str]:
    """Every run up to `instance_id`'s, oldest first (the first run, then `~run2`, ...)."""
    instance = services.instances.get_instance(instance_id)
    if instance is None or instance.rerun_of is None:
        return [instance_id]
    return [instance.rerun_of] + [f"{instance.rerun_of}~run{n}" for n in range(2, instance.run + 1)]


class CancelWatch:
    """Answers `ctx.cancelled()`: reads the instance's status at most once per `interval_s`,
    the attempt's lease renewal period, however often the handler asks."""

    def __init__(self, instance_id: str, services: InstancePorts, *, interval_s: float) -> None:
        self._instance_id = instance_id
        self._services = services
        self.interval_s = interval_s
        self._checked = float("-inf")
        self.seen = False
        self.stale = False  # the attempt lost its lease: stop (its writes are refused anyway)

    def __call__(self) -> bool:
        if self.seen or self.stale:
            return True
        if time.monotonic() - self._checked >= self.interval_s:
            self._checked = time.monotonic()
            self.seen = self._services.instances.instance_ended(self._instance_id)
        return self.seen


def shard_context(
    message: ShardMessage,
    attempt: Attempt,
    services: ClockedInstancePorts,
    renewal: LeaseRenewal,
    cancelled: Callable[[], bool],
    timer: AttemptTimer,
    commit_pending: Callable[[], object],
    *,
    retention_days: int,
    capture: AttemptCapture | None = None,
    tracer: Tracer | None = None,
    on_beat: Callable[[datetime], None] | None = None,
    resources: ResourceCache | None = None,
) -> ShardContext:
    """The context of one attempt; `resources`: what `ctx.resource` gets (the container's,
    `Wiring.resources`; None: this process's)."""

    def heartbeat() -> datetime:
        if renewal.lost:
            raise StaleAttemptError(
                f"{message.instance_id} shard {message.shard}: attempt {attempt.number} lost "
                "the lease"
            )
        now = services.clock.now()
        renewal.beat(now)
        renewal.heartbeat(now)  # fenced where it writes: a zombie learns it there
        if on_beat is not None:  # the tenant's slot the attempt holds lives as long
            on_beat(now)
        timer.extend()
        # A handler that heartbeats may run past the leases of the batch's finished shards:
        # their completions commit now rather than after it.
        with timer.deferred():
            commit_pending()
        return now + timedelta(seconds=message.timeout_s)

    def partials() -> list[dict[str, Any]]:
        if not message.reduce:
            raise RuntimeError("partials() is for a task's reduce handler")
        # Oldest run first, so that a rerun's result replaces the one it re-did.
        latest: dict[int, ShardRecord] = {}
        for run_id in run_ids(message.instance_id, services):
            for s in services.instances.list_shards(run_id):
                if s.index != message.shard and s.status is ShardStatus.SUCCEEDED:
                    latest[s.index] = s
        return [
            {"shard": s.index, "bounds": s.bounds, "result": s.result}
            for s in sorted(latest.values(), key=lambda s: s.index)
        ]

    claimed = [0]  # keys this attempt claimed: the first LISTED_KEYS go on its record

    # An effect key outlives the task's retention if need be: while a copy of the shard's
    # message can still come back, the key must be there to stop the effect running again.
    effect_days = max(retention_days, EFFECT_RETENTION_FLOOR_DAYS)

    spans = tracer or NoTracer()

    def record_effect(key: str, writes: tuple[Mapping[str, Any], ...]) -> bool:
        with spans.span(
            "once",
            task_id=message.task_id,
            instance_id=message.instance_id,
            shard=message.shard,
            attempt=attempt.number,
            effect_key=key,
        ) as span:
            done = services.instances.record_effect(
                key,
                instance_id=message.instance_id,
                index=message.shard,
                attempt=attempt.number,
                writes=writes,
                listed=claimed[0] < LISTED_KEYS,
                expires_at=services.clock.now() + timedelta(days=effect_days),
            )
            span.annotate(claimed=done)
        claimed[0] += done
        return done

    handler_log = logging.getLogger(HANDLER_LOGGER)
    keys = {"instance_id": message.instance_id, "shard": message.shard, "attempt": attempt.number}

    def log_line(level: str, message_text: str, fields: Mapping[str, Any]) -> None:
        if capture is not None:
            capture.add(level, message_text, fields=fields)
        # The function's own log too (on AWS, JSON lines with the attempt's keys).
        number = logging.getLevelName(level.upper())
        handler_log.log(
            number if isinstance(number, int) else logging.INFO,
            message_text,
            extra={**keys, "fields": dict(fields)},
        )

    ctx = ShardContext(
        instance_id=message.instance_id,
        task_id=message.task_id,
        tenant=message.tenant,
        shard=message.shard,
        bounds=message.bounds,
        params=message.params,
        business_date=message.business_date,
        data_interval_start=message.data_interval_start,
        data_interval_end=message.data_interval_end,
        attempt=attempt.number,
        deadline=attempt.started_at + timedelta(seconds=message.timeout_s),
        worker=attempt.worker if attempt.worker else "",
        _heartbeat=heartbeat,
        _record_effect=record_effect,
        _cancelled=cancelled,
        _partials=partials,
        _log=log_line,
    )
    if resources is not None:
        ctx._resource = resources.get
    return ctx
