"""The task's hold port: for non-parallel blocking policies, which instance holds a task and
which wait behind it, decided atomically with each instance's claim."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from iotsched.core.instance_record import InstanceRecord


class ClaimOutcome(StrEnum):
    """What an exclusive or queued claim came to."""

    CLAIMED = "claimed"  # this caller holds the task (or queued behind it)
    DUPLICATE = "duplicate"  # the instance key was taken: see `existing`
    BLOCKED = "blocked"  # another instance holds the task: see `holder`
    FULL = "full"  # serial: the queue holds max_queued already
    FREE = "free"  # serial: nothing holds the task any more; claim it instead


@dataclass(frozen=True)
class ExclusiveClaim:
    """The answer to `claim_exclusive`, `enqueue_instance` and `take_over`."""

    outcome: ClaimOutcome
    existing: InstanceRecord | None = None
    holder: str | None = None


class BlockingStore(Protocol):
    """The task's hold for non-parallel blocking policies, decided atomically with the claim."""

    def claim_exclusive(self, instance: InstanceRecord) -> ExclusiveClaim:
        """Create the instance and make it the task's holder, iff its key is free and nothing
        holds the task (one transaction). BLOCKED names the holder."""
        ...

    def enqueue_instance(self, instance: InstanceRecord, *, max_queued: int) -> ExclusiveClaim:
        """Create the instance (status queued) at the end of the task's queue, iff something
        holds the task and fewer than `max_queued` wait (one transaction)."""
        ...

    def take_over(self, instance: InstanceRecord, *, holder: str) -> ExclusiveClaim:
        """Create the instance and make it the holder in place of `holder` (cover)."""
        ...

    def release_task(self, task_id: str, instance_id: str) -> str | None:
        """If `instance_id` holds the task, pass the hold to the oldest queued instance (returned)
        or clear it (None). A caller that does not hold the task changes nothing."""
        ...
