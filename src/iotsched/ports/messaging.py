"""The queue, fault and alert ports: the shard and dispatch queues (at least once), fault
injection points, the alert sink and log, and the queues' depths."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from iotsched.core.alert_message import Alert
from iotsched.core.shard_message import ShardMessage


class MessageTooLargeError(ValueError):
    """A shard message larger than the queue accepts: the instance cannot be dispatched."""


@dataclass(frozen=True)
class BucketTick:
    """One bucket's share of a tick: the dispatch queue's message."""

    minute: datetime
    bucket: int
    trace: str | None = None  # the local tracer's carrier of the tick's span (docs/design.md, 16)


class ShardQueue(Protocol):
    """The shard queue (SQS standard: at least once, sometimes late, sometimes twice)."""

    def send(self, messages: Sequence[ShardMessage], *, delays: Sequence[int] | None = None) -> int:
        """Send all messages (batches of 10); returns the number of requests made. `delays`:
        seconds (0 to 900) each message stays hidden after it is sent, in `messages`' order.

        Entries a batch reports as failed are retried; raises if any is still unsent.
        """
        ...

    def extend_visibility(self, receipt_handle: str, seconds: int) -> None:
        """Hide a received message for `seconds` more, counted from now (heartbeat, backoff)."""
        ...

    def hold_visibility(self, receipt_handles: Sequence[str], seconds: int) -> set[str]:
        """Hide each received message for `seconds`, counted from now, in batches of 10
        (ChangeMessageVisibilityBatch); returns the receipt handles whose change did not apply
        (the message may no longer be in flight under that receipt: received by another
        consumer, or deleted). Raises when a request failed as a whole: its changes may or may
        not have applied."""
        ...


class DispatchQueue(Protocol):
    """The fanned-out tick's queue: one message per bucket and minute (at least once)."""

    def send_ticks(self, ticks: Sequence[BucketTick]) -> list[str]:
        """Send one message per tick; returns their message ids, in order.

        Raises:
            RuntimeError: some could not be sent after retries (the tick is retried).
        """
        ...

    def hold(self, receipt_handle: str, seconds: int) -> None:
        """Keep a received message invisible `seconds` from now (it comes back then)."""
        ...


class Faults(Protocol):
    """Fault injection points for chaos runs; production uses `NoFaults`."""

    def after_claim(self, instance_id: str) -> None:
        """Called after a claim, before its shard messages are sent."""
        ...

    def at(self, point: str, instance_id: str) -> None:
        """Called at a named point of a use-case (e.g. between an instance's end and each of
        its follow-ups); a test's injector may raise there to stand for a process death."""
        ...


class NoFaults:
    """No fault is ever injected."""

    def after_claim(self, instance_id: str) -> None:
        """Nothing happens."""

    def at(self, point: str, instance_id: str) -> None:
        """Nothing happens."""


class AlertSink(Protocol):
    """Where alerts go (SNS topic, with filter attributes)."""

    def publish(self, alert: Alert) -> None:
        """Publish one alert, once per `alert_id`: a second publish of the same id is dropped
        (a conditional write records it first). Delivery downstream is at least once."""
        ...


@dataclass(frozen=True)
class AlertEntry:
    """An alert as the log holds it: `pending` until the topic confirmed its publish."""

    alert: Alert
    pending: bool


class AlertLog(Protocol):
    """The alerts recorded, published or pending, for operators (`iotsched alerts`)."""

    def recent(self, *, limit: int = 50) -> list[Alert]:
        """Alerts newest first, with `raised_at` set."""
        ...

    def entries(self, *, limit: int = 50) -> list[AlertEntry]:
        """`recent`, each alert with whether its publish is still pending."""
        ...

    def unpublished(self, *, before: datetime, limit: int = 100) -> list[Alert]:
        """Alerts recorded before `before` whose publish was never confirmed (the publisher
        died between its record and the topic): the sweeper publishes them again."""
        ...


@dataclass(frozen=True)
class QueueDepth:
    """One queue's approximate message counts, as SQS reports them (eventually consistent:
    figures of the last minute or so, not an exact count)."""

    queue: str  # what the queue is: `normal`, `high`, `low` (shard queues), `dead_letter`
    visible: int  # waiting to be received (ApproximateNumberOfMessages)
    in_flight: int  # received, not yet deleted (ApproximateNumberOfMessagesNotVisible)
    delayed: int  # sent with a delay not yet over (ApproximateNumberOfMessagesDelayed)


class QueueGauge(Protocol):
    """How deep the shard queues and their dead-letter queue are, for operators."""

    def depths(self) -> list[QueueDepth]:
        """Every queue's counts, shard queues by priority (high, normal, low) and then the
        dead-letter queue; one request per queue, nothing written."""
        ...
