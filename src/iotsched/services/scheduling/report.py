"""`TickReport`: what a dispatch did (claims, resumptions, skips, messages sent).

Every step of a dispatch adds to the report its caller hands it: the tick's pages, a manual
run, a released hold starting the next queued instance. It holds data only, so every dispatch
module can take one without depending on another.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime


@dataclass
class TickReport:
    """What one tick did; logged and turned into metrics by the dispatcher Lambda."""

    now: datetime
    bucket: int | None = None  # the bucket dispatched; None: every bucket
    due_tasks: int = 0
    claimed: list[str] = field(default_factory=list)
    duplicate_claims: int = 0
    resumed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    queued: list[str] = field(default_factory=list)
    covered: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    failed_tasks: list[str] = field(default_factory=list)  # dispatch raised: still due, alerted
    messages_sent: int = 0
    send_requests: int = 0

    def merge(self, other: TickReport) -> None:
        """Add what `other` (a page of this tick) did; `due_tasks` is counted by the tick."""
        self.claimed += other.claimed
        self.duplicate_claims += other.duplicate_claims
        self.resumed += other.resumed
        self.skipped += other.skipped
        self.queued += other.queued
        self.covered += other.covered
        self.failed += other.failed
        self.failed_tasks += other.failed_tasks
        self.messages_sent += other.messages_sent
        self.send_requests += other.send_requests

    def as_dict(self) -> dict[str, object]:
        """JSON-able summary."""
        return {
            "now": self.now.isoformat(),
            "bucket": self.bucket,
            "due_tasks": self.due_tasks,
            "claimed": self.claimed,
            "duplicate_claims": self.duplicate_claims,
            "resumed": self.resumed,
            "skipped": self.skipped,
            "queued": self.queued,
            "covered": self.covered,
            "failed": self.failed,
            "failed_tasks": self.failed_tasks,
            "messages_sent": self.messages_sent,
            "send_requests": self.send_requests,
        }
