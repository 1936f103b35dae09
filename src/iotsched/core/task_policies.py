"""A task's run policies as its file states them: overlapping instances (`blocking:`), missed
slots (`misfire:`), attempts per shard (`retry:`) and how long its records are kept
(`retention:`)."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field

from iotsched.core.value_types import Frozen


class BlockingPolicy(StrEnum):
    """What a new firing does while an earlier instance of the same task is still open."""

    DISCARD = "discard"  # the new firing is recorded skipped (reason: blocked)
    SERIAL = "serial"  # the new firing waits, queued, at most `max_queued`
    COVER = "cover"  # the running instance is asked to stop; the new one starts
    PARALLEL = "parallel"  # both run


class MisfirePolicy(StrEnum):
    """What happens to slots missed while no tick reached the task."""

    SKIP = "skip"  # every missed slot is recorded skipped (reason: misfire)
    FIRE_ONCE = "fire_once"  # one instance for the latest slot, covering the missed ones
    CATCH_UP = "catch_up"  # each missed slot, oldest first, at most `max_catch_up`


class Blocking(Frozen):
    """Overlap policy; see `BlockingPolicy`."""

    policy: BlockingPolicy = BlockingPolicy.PARALLEL
    max_queued: int = Field(default=1, ge=0, le=100)


#: The longest `misfire.grace_s`: a slot older than that is missed (the grace is subtracted from
#: the tick's instant, which must stay one).
MAX_GRACE_S = 30 * 86_400


class Misfire(Frozen):
    """Missed-slot policy; slots older than `grace_s` at tick time count as missed."""

    policy: MisfirePolicy = MisfirePolicy.FIRE_ONCE
    grace_s: int = Field(default=300, ge=0, le=MAX_GRACE_S)
    max_catch_up: int = Field(default=3, ge=1, le=500)
    # What resuming a paused task does with the slots missed while paused: `apply` the
    # policy above to them, or `skip` them silently (the task starts again from now).
    on_resume: Literal["apply", "skip"] = "apply"


class Retry(Frozen):
    """Attempts per shard and the delay before the next one."""

    max_attempts: int = Field(default=3, ge=1, le=100)
    backoff_s: int = Field(default=30, ge=0, le=43_200)


#: How long a task's finished records are kept when its file says nothing (`retention.days`).
DEFAULT_RETENTION_DAYS = 30
MAX_RETENTION_DAYS = 3650
#: Effect keys are kept at least this long, whatever the task's retention: a duplicate delivery
#: of a shard message may re-apply an effect for as long as the message can come back. The
#: shard queue keeps a message 4 days (template.yaml, ShardQueue's MessageRetentionPeriod) and
#: its DLQ 14 more (ShardDLQ's), from which an operator may redrive it.
EFFECT_RETENTION_FLOOR_DAYS = 18


class Retention(Frozen):
    """How long the records of a task's finished instances are kept before DynamoDB's TTL
    deletes them: the instance, its shard records and alerts, `days` after the end; its effect
    keys at least EFFECT_RETENTION_FLOOR_DAYS."""

    days: int = Field(default=DEFAULT_RETENTION_DAYS, ge=1, le=MAX_RETENTION_DAYS)
