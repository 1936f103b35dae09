"""The instance ports: claims (exactly one caller creates each instance), the dispatch
lease, status moves that end an instance once, and the readers of instances.

`InstanceStore` is the whole instance store as the use-cases take it: these parts, the
shards, the start limits and the effect ledger.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime
from typing import Protocol

from iotsched.core.instance_record import (
    FollowUp,
    InstanceRecord,
    InstanceStatus,
)
from iotsched.ports.effects import EffectLedger
from iotsched.ports.shards import ShardCompletions, ShardLeases
from iotsched.ports.start_limits import ShardStartGates, TenantLines, TenantSlotLeases

#: The most instances one group of `InstanceClaims.claim_instances` may hold (a DynamoDB
#: transaction carries at most 100 actions; a group is one transaction's worth at most).
MAX_CLAIM_GROUP = 100


class InstanceClaims(Protocol):
    """The right to fire: an instance's first write, and client requests bound to one."""

    def record_request(self, request_key: str, instance_id: str) -> str:
        """Bind a client request id to an instance id, once; returns the id bound first."""
        ...

    def claim_instance(self, instance: InstanceRecord) -> InstanceRecord | None:
        """Create the instance iff its key is free: the right to fire.

        Returns None when this caller won the claim, else the instance already stored (in the
        same request: no second read). Exactly one of any number of concurrent callers wins.
        """
        ...

    def claim_instances(self, groups: Sequence[Sequence[InstanceRecord]]) -> list[bool]:
        """`claim_instance` for many due tasks in few requests (the tick's hot path).

        Each group (one task's firings of a tick) is all or nothing: True when this call created
        every instance of the group (the right to fire each), False when it created none of them
        (a key was taken: a duplicate tick, a manual run; or the store would not take the group
        in one piece: more than `MAX_CLAIM_GROUP` instances, an id twice, contention it gave up
        on). Groups are independent: one that loses does not hold the others back. A False says
        nothing about who holds what: the caller claims that group's instances one by one with
        `claim_instance`, which returns the existing instance. Exactly one of any number of
        concurrent callers creates each instance, whichever method each of them uses.
        """
        ...


class InstanceDispatch(Protocol):
    """Sending an instance's shard messages (or its reduce) under a dispatch lease."""

    def mark_running(self, instance_ids: Sequence[str]) -> list[bool]:
        """Move each instance from `planning` to `running` (every shard message sent).

        Each move is its own compare-and-set, as `set_instance_status(expected=planning,
        status=running)`: an instance that left `planning` meanwhile (finished, cancelled) is left
        alone and reported False. An id may appear once.
        """
        ...

    def take_dispatch(self, instance_id: str, *, now: datetime, until: datetime) -> bool:
        """Take the right to (re)send an instance's shard messages (or its reduce message).

        Succeeds iff the instance is still `planning` (or `reducing`) and no other dispatcher
        holds a live dispatch lease; guards against 20 duplicate ticks each re-sending every shard.
        """
        ...

    def advance_dispatch(
        self,
        instance_id: str,
        *,
        sent: int,
        held: datetime | None,
        until: datetime,
        waiting: str | None = None,
        deadline: datetime | None = None,
    ) -> bool:
        """Record that the first `sent` shard messages (in send order) went out, and move the
        dispatch lease to `until` (and the instance's deadline to `deadline`, when given), iff the instance is still `planning` and its dispatch lease
        is still `held`, the one the caller holds (None: none was set).

        The dispatcher of a large instance calls it after each step of its send: the lease
        lives while the send makes progress, and a dispatcher that took over (after the lease
        ended) or an instance that left `planning` refuses it, so the caller stops sending.
        An `until` at or before now gives the dispatch up for the next taker to resume.
        `waiting`: why the send waits until `until` (a quota), recorded on the instance; the
        same write clears it when None.
        """
        ...

    def start_reduce(self, instance_id: str, *, now: datetime, until: datetime) -> bool:
        """Move a drained instance whose shards all succeeded to `reducing` (counter back to 1,
        a dispatch lease until `until`); exactly one caller gets True and sends the reduce."""
        ...


class InstanceEnds(Protocol):
    """Status moves, an instance's end (exactly once) and the follow-ups it owes."""

    def set_instance_status(
        self,
        instance_id: str,
        *,
        expected: InstanceStatus,
        status: InstanceStatus,
        reason: str | None = None,
        finished_at: datetime | None = None,
        owed: Sequence[FollowUp] = (),
    ) -> bool:
        """Compare-and-set the instance status; False if it was not `expected`.

        A final `status` records the follow-ups `owed` in the same write (see `settle_followup`).
        """
        ...

    def finalize_instance(
        self,
        instance_id: str,
        *,
        status: InstanceStatus,
        finished_at: datetime,
        owed: Sequence[FollowUp] = (),
    ) -> bool:
        """End the instance iff it is open (planning, running, reducing) and its counter is zero.

        Exactly one of any number of concurrent callers gets True. The same write records the
        follow-ups `owed` (alert, release, dependents): whoever finds one owed does it, and
        strikes it off with `settle_followup`, so a death after this write loses none of them.
        """
        ...

    def end_instance(
        self,
        instance_id: str,
        *,
        status: InstanceStatus,
        reason: str,
        finished_at: datetime,
        owed: Sequence[FollowUp] = (),
    ) -> bool:
        """End an open instance (scheduled, queued, planning, running, reducing) before its
        shards are done.

        For cancellation and instance timeouts. Exactly one caller gets True; shards still
        running find the instance final and stop; shards not yet started never run. The
        follow-ups `owed` are recorded in the same write, as in `finalize_instance`.
        """
        ...

    def settle_followup(self, instance_id: str, step: FollowUp) -> bool:
        """Strike `step` off the instance's owed follow-ups (a conditional write).

        True if this call struck it; False if it was not owed (done by another caller).
        """
        ...

    def owing_instances(self, *, limit: int = 1000) -> list[InstanceRecord]:
        """Final instances with follow-ups still owed, oldest end first (for the sweeper)."""
        ...


class InstanceReads(Protocol):
    """Readers of instances: by id, by task and status, by business date, due or open."""

    def get_instance(self, instance_id: str) -> InstanceRecord | None:
        """The instance (strongly consistent read), or None."""
        ...

    def instance_ended(self, instance_id: str) -> bool:
        """True if the instance is final or gone: its status alone, read eventually consistent
        (an end may be seen a moment late), for a poll such as `ctx.cancelled()`'s."""
        ...

    def list_instances(
        self,
        *,
        task_id: str | None = None,
        status: InstanceStatus | None = None,
        limit: int = 100,
        before: str | None = None,
        incarnation: int | None = None,
    ) -> list[InstanceRecord]:
        """Instances, newest slot first, filtered by task and/or status; `before` (an instance
        id, the last of the previous page): only those listed after it. The order is the
        index's: by `<slot>[~suffix]#<id>` (`listing_key`), newest first; a task's, with
        `incarnation` (`TaskRecord.incarnation`), only that incarnation's, else every one's,
        the later incarnations' first (`incarnation_order`)."""
        ...

    def instances_for_date(self, task_id: str, day: date) -> list[InstanceRecord]:
        """Every instance of `task_id` for business date `day` (scheduled, reruns, manual runs,
        backfills), oldest first, however old: found by key, never in a window of recent ones."""
        ...

    def due_submissions(
        self, now: datetime, *, bucket: int | None = None, limit: int | None = None
    ) -> list[InstanceRecord]:
        """Submitted instances (status scheduled) whose `fire_at` is at or before `now`, in
        fire-at order; `bucket` and `limit` as in `TaskClocks.due_tasks`."""
        ...

    def open_instances(self, *, limit: int = 1000) -> list[InstanceRecord]:
        """Instances not yet final, earliest deadline first (index `by_deadline`)."""
        ...


class InstanceStore(
    InstanceClaims,
    InstanceDispatch,
    InstanceEnds,
    InstanceReads,
    ShardLeases,
    ShardCompletions,
    ShardStartGates,
    TenantSlotLeases,
    TenantLines,
    EffectLedger,
    Protocol,
):
    """Instances (claims) and their shard execution records: every part above, one object."""
