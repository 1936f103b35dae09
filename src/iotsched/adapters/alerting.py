"""Alerts at least once, deduplicated by alert id: record the alert `pending`, publish it to
SNS, then strike the pending mark. A publisher's death leaves the record pending, published
again by the next publish of the id or by the sweeper; a record already published is not
published again. A death between the topic and the mark sends it twice: subscribers
deduplicate by `alert_id` (docs/task-files.md, "Alerts").

The log itself is `iotsched.adapters.dynamodb.alerts.DynamoDBAlertLog`.
"""

from __future__ import annotations

from datetime import datetime

from iotsched.adapters.dynamodb.alerts import DynamoDBAlertLog, Recorded
from iotsched.core.alert_message import Alert
from iotsched.ports.clock import Clock
from iotsched.ports.messaging import (
    AlertEntry,
    AlertSink,
)

__all__ = ["DedupAlertSink", "DynamoDBAlertLog", "Recorded"]


class DedupAlertSink:
    """One alert per alert id, at least once: record pending, publish, mark published."""

    def __init__(self, log: DynamoDBAlertLog, sink: AlertSink, clock: Clock) -> None:
        self._log = log
        self._sink = sink
        self._clock = clock

    def publish(self, alert: Alert) -> None:
        """Publish unless an alert with the same id was published before.

        An error from the topic leaves the record pending and propagates: a retry of the same
        id, or the sweeper, publishes it.
        """
        stamped = (
            alert if alert.raised_at else alert.model_copy(update={"raised_at": self._clock.now()})
        )
        if self._log.record(stamped) is Recorded.PUBLISHED:
            return
        if stamped.silenced_until is not None and self._clock.now() < stamped.silenced_until:
            return  # held by a silence: recorded pending, the sweeper publishes it at its end
        self._sink.publish(stamped)
        self._log.published(stamped.alert_id)

    def recent(self, *, limit: int = 50) -> list[Alert]:
        """Alerts newest first."""
        return self._log.recent(limit=limit)

    def entries(self, *, limit: int = 50) -> list[AlertEntry]:
        """Alerts newest first, with their pending state."""
        return self._log.entries(limit=limit)

    def unpublished(self, *, before: datetime, limit: int = 100) -> list[Alert]:
        """Alerts whose publish was never confirmed (see `DynamoDBAlertLog.unpublished`)."""
        return self._log.unpublished(before=before, limit=limit)
