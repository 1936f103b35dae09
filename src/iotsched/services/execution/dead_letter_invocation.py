"""One dead-lettered shard message as the DLQ function takes it (`take_dead_letter`): handled
under a span that continues its sender's trace, and the counts it adds to the function's
metrics (the dead letter, and the instance it ended, if any)."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from iotsched.services.execution.dead_letters import handle_dead_letter
from iotsched.services.port_sets import LifecyclePorts

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DeadLetterRun:
    """What taking one dead letter did, and its metrics."""

    outcome: str
    counts: dict[str, int]


def take_dead_letter(body: str, services: LifecyclePorts) -> DeadLetterRun:
    """End the dead-lettered shard; raising (a store error) leaves the message to come back."""
    # A child of the span that sent the message (its body carries it, under the local tracer).
    with services.tracer.span("dead_letter", parent=trace_of(body)):
        outcome = handle_dead_letter(body, services)
    counts = {"DeadLetters": 1}
    counts.update(services.ends.drain())  # a dead letter may end its instance
    log.warning("dead-lettered shard message", extra={"outcome": outcome})
    return DeadLetterRun(outcome, counts)


def trace_of(body: str) -> str | None:
    """The sender's span a message body carries, if any."""
    try:
        trace = json.loads(body).get("trace")
    except (ValueError, AttributeError):
        return None
    return trace if isinstance(trace, str) else None
