"""The queues and the alert sink in memory: what was sent and published, for tests to see."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence
from datetime import datetime, timedelta

from iotsched.core.alert_message import Alert
from iotsched.core.shard_message import (
    ShardMessage,
    with_trace,
)
from iotsched.ports.clock import Clock
from iotsched.ports.messaging import (
    AlertEntry,
    BucketTick,
    MessageTooLargeError,
    QueueDepth,
)
from iotsched.ports.tracing import (
    NoTracer,
    Tracer,
)

#: What SQS accepts in one message (and, batched, in one request).
MAX_MESSAGE_BYTES = 1024 * 1024
#: The longest delay SQS accepts on a message (DelaySeconds).
MAX_DELAY_S = 900


class MemoryShardQueue:
    """ShardQueue that keeps what was sent, in order, and counts batch requests; each
    message's delay (`delays`) and, with a clock, the instant it becomes visible (`visible_at`).

    `held` is the last `hold_visibility` of each receipt (`held_until`: when that makes the
    message visible again, on `clock`); `refuse_holds` lists receipts whose hold does not
    apply, and `fail_holds` makes that many hold requests fail as a whole.
    """

    def __init__(self, clock: Clock | None = None, *, tracer: Tracer | None = None) -> None:
        """`tracer`: messages sent without a trace take its current carrier, as on SQS."""
        self._tracer = tracer or NoTracer()
        self.sent: list[ShardMessage] = []
        # Per message sent: its delay, and when it becomes visible (on `clock`, if given).
        self.delays: list[int] = []
        self.visible_at: list[datetime | None] = []
        self.requests = 0
        self.visibility: dict[str, int] = {}
        self.held: dict[str, int] = {}
        self.held_until: dict[str, datetime] = {}
        self.hold_requests = 0
        self.refuse_holds: set[str] = set()
        self.fail_holds = 0
        self._clock = clock
        self._lock = threading.Lock()

    def send(self, messages: Sequence[ShardMessage], *, delays: Sequence[int] | None = None) -> int:
        messages = with_trace(messages, self._tracer.carrier())
        for message in messages:
            size = len(message.model_dump_json().encode())
            if size > MAX_MESSAGE_BYTES:
                raise MessageTooLargeError(f"a shard message of {size} bytes exceeds the limit")
        delay_of = list(delays) if delays is not None else [0] * len(messages)
        if len(delay_of) != len(messages) or any(not 0 <= d <= MAX_DELAY_S for d in delay_of):
            raise ValueError(f"delays {delay_of} for {len(messages)} messages (0 to 900 s each)")
        with self._lock:
            now = self._clock.now() if self._clock is not None else None
            self.delays.extend(delay_of)
            self.visible_at.extend(
                None if now is None else now + timedelta(seconds=d) for d in delay_of
            )
            self.sent.extend(messages)
            batches = (len(messages) + 9) // 10
            self.requests += batches
            return batches

    def extend_visibility(self, receipt_handle: str, seconds: int) -> None:
        self.visibility[receipt_handle] = seconds

    def hold_visibility(self, receipt_handles: Sequence[str], seconds: int) -> set[str]:
        with self._lock:
            self.hold_requests += (len(receipt_handles) + 9) // 10
            if self.fail_holds > 0:
                self.fail_holds -= 1
                raise ConnectionError("the hold request failed")
            refused = {h for h in receipt_handles if h in self.refuse_holds}
            for handle in receipt_handles:
                if handle in refused:
                    continue
                self.held[handle] = seconds
                if self._clock is not None:
                    self.held_until[handle] = self._clock.now() + timedelta(seconds=seconds)
            return refused


class MemoryAlertSink:
    """AlertSink and AlertLog in a list, deduplicated by alert id like the real one."""

    def __init__(self, clock: Clock | None = None) -> None:
        self.published: list[Alert] = []
        self.held: dict[str, Alert] = {}  # recorded, held by a silence until it ends
        self._ids: set[str] = set()
        self._lock = threading.Lock()
        self._clock = clock

    def publish(self, alert: Alert) -> None:
        with self._lock:
            if alert.alert_id in self._ids:
                return
            if alert.raised_at is None and self._clock is not None:
                alert = alert.model_copy(update={"raised_at": self._clock.now()})
            until = alert.silenced_until
            if until is not None and (self._clock is None or self._clock.now() < until):
                self.held.setdefault(alert.alert_id, alert)
                return
            alert = self.held.pop(alert.alert_id, alert)
            self._ids.add(alert.alert_id)
            self.published.append(alert)

    def recent(self, *, limit: int = 50) -> list[Alert]:
        # newest raised first, as the DynamoDB log's sort key (`<raised at>#<id>`) orders them
        ordered = sorted(
            enumerate(self.published),
            key=lambda e: (e[1].raised_at is not None, e[1].raised_at, e[1].alert_id, e[0]),
            reverse=True,
        )
        return [alert for _, alert in ordered][:limit]

    def entries(self, *, limit: int = 50) -> list[AlertEntry]:
        return [AlertEntry(alert, pending=False) for alert in self.recent(limit=limit)]

    def unpublished(self, *, before: datetime, limit: int = 100) -> list[Alert]:
        # a publish here is one step, recorded and published together, unless a silence holds it
        with self._lock:
            ended = [
                a for a in self.held.values() if a.silenced_until and a.silenced_until < before
            ]
        return sorted(ended, key=lambda a: (a.silenced_until, a.alert_id))[:limit]


class MemoryDispatchQueue:
    """DispatchQueue that keeps what was sent (`sent`, in order) and each hold (`held`)."""

    def __init__(self, *, tracer: Tracer | None = None) -> None:
        """`tracer`: ticks take its current carrier, as on SQS."""
        self.sent: list[BucketTick] = []
        self.held: dict[str, int] = {}
        self._lock = threading.Lock()
        self._tracer = tracer or NoTracer()

    def send_ticks(self, ticks: Sequence[BucketTick]) -> list[str]:
        carrier = self._tracer.carrier()
        if carrier is not None:
            ticks = [t if t.trace else dataclasses.replace(t, trace=carrier) for t in ticks]
        with self._lock:
            first = len(self.sent)
            self.sent.extend(ticks)
            return [f"tick-{n}" for n in range(first, first + len(ticks))]

    def hold(self, receipt_handle: str, seconds: int) -> None:
        with self._lock:
            self.held[receipt_handle] = seconds


class MemoryQueueGauge:
    """QueueGauge over no queue: the in-memory shard queue keeps every message it was sent (a
    test runs them by hand), so it has no depth to report; a test sets `queues` to what SQS
    would say."""

    def __init__(self, queues: Sequence[QueueDepth] = ()) -> None:
        self.queues = list(queues)
        self.requests = 0

    def depths(self) -> list[QueueDepth]:
        self.requests += 1
        return list(self.queues)
