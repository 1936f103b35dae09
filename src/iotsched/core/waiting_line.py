"""A tenant's waiting line for its in-flight slots (`max_concurrent_shards`), the pure part:
who may take a free slot, and how long a waiting shard stays away.

A shard that finds its tenant's slots full, or others already waiting, takes a ticket: the
tenant's line counts the tickets it gave (`issued`) and those whose holders started or gave up
(`served`). A ticket within `cap` of the served count may take a free slot; one further back
waits, for about half the time the line needs to reach it at the pace it was seen moving, so
that a shard far back wakes a few times over its whole wait, not every few seconds
(docs/design.md, section 20, "Waiting for a slot").
"""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from iotsched.core.value_types import Frozen

#: The shortest wait, and the longest of a ticket inside the window while every slot is held.
NEAR_WAIT_S = 15
MIN_WAIT_S = 1
#: The longest wait: SQS delays a message 900 s at most.
FAR_WAIT_S = 900
#: The pace a line is assumed to move at before a ticket has seen it move: one slot's worth of
#: shards every this many seconds per slot. Short, so that a first guess errs toward waking
#: early (one wake more) rather than late (passed by the tickets behind).
ASSUMED_SHARD_S = 2
#: How many seconds of line the assumed pace counts for in the estimate (`pace_per_s`).
PRIOR_S = 5
#: How much of the time the line needs to reach it a far ticket sleeps: each wake measures the
#: line's pace again, and the next sleep covers half of what is left (a pace that quickens
#: between wakes still finds the ticket awake before its turn).
SLEEP_SHARE = 0.75
#: A line that served nobody for this long while a slot stayed free has lost tickets (their
#: holders died between a start and its count, or went to the DLQ): the ticket that finds it so
#: moves the served count up to itself, so that the line never stops for good.
STALL_S = 3 * NEAR_WAIT_S


class LineState(Frozen):
    """A tenant's line as read: tickets given, tickets served, when the last was served."""

    issued: int = Field(default=0, ge=0)
    served: int = Field(default=0, ge=0)
    served_at: datetime | None = None

    @property
    def waiting(self) -> int:
        """Tickets given and not yet served."""
        return max(0, self.issued - self.served)


class WaitTicket(Frozen):
    """A waiting shard's place in its tenant's line, carried on its message from wait to wait:
    its number, and the served count it saw when it joined, and when (the line's pace since)."""

    number: int = Field(ge=1)
    seen_served: int = Field(ge=0)
    seen_at: datetime


def in_window(ticket: int, line: LineState, cap: int) -> bool:
    """Whether ticket `ticket` may take a free slot: within `cap` tickets of the served count
    (so the first-come order holds to within `cap` places, and a free slot is never left to a
    ticket that is slow to come back while the next ones are here)."""
    return ticket <= line.served + cap


def stalled(line: LineState, now: datetime) -> bool:
    """Whether the line served nobody for `STALL_S` (see `STALL_S`)."""
    return line.served_at is None or (now - line.served_at).total_seconds() >= STALL_S


def pace_per_s(ticket: WaitTicket | None, line: LineState, now: datetime, cap: int) -> float:
    """Tickets served per second: what this ticket saw the line serve since it joined, with the
    assumed pace (`ASSUMED_SHARD_S` per slot) weighing as `PRIOR_S` seconds of it, so that a
    short look (a burst of starts, or none) does not swing the estimate far."""
    assumed = cap / ASSUMED_SHARD_S
    if ticket is None:
        return assumed
    elapsed = max(0.0, (now - ticket.seen_at).total_seconds())
    moved = max(0, line.served - ticket.seen_served)
    return (moved + assumed * PRIOR_S) / (elapsed + PRIOR_S)


def wait_s(ticket: int, line: LineState, cap: int, pace: float) -> int:
    """How long ticket `ticket` stays away, at the line's `pace`. Outside the window: most
    (`SLEEP_SHARE`) of the time the line needs to bring it within the window, at most
    `FAR_WAIT_S`, so a wait of hours is a wake every 15 minutes and then one or two. Inside
    it, all slots held: about the time until its turn (`MIN_WAIT_S` to `NEAR_WAIT_S`)."""
    if pace <= 0:
        return NEAR_WAIT_S
    ahead = ticket - (line.served + cap)
    turn = min(NEAR_WAIT_S, max(1, min(ticket - line.served, cap)) / pace)
    if ahead <= 0:
        return int(max(MIN_WAIT_S, turn))
    # Never less than the window's last ticket waits.
    return int(min(FAR_WAIT_S, max(MIN_WAIT_S, turn, SLEEP_SHARE * ahead / pace)))
