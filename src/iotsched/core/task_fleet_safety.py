"""A task's fleet-safety policies: how fast its shards may start (`rollout:`), when failures stop
an instance (`abort:`), and the maintenance window its firings and shard starts wait for
(`window:`)."""

from __future__ import annotations

from datetime import timedelta
from typing import Literal

from pydantic import Field, model_validator

from iotsched.core import triggers
from iotsched.core.value_types import Cron, Duration, Frozen, Zone


class Ramp(Frozen):
    """An exponential rollout: the rate starts at `base` per minute and is multiplied by
    `factor` after every `every_succeeded` shards that succeeded, up to the rollout's maximum."""

    base: int = Field(ge=1, le=100_000)
    factor: float = Field(gt=1, le=10)
    every_succeeded: int = Field(ge=1, le=100_000)


class Rollout(Frozen):
    """How fast an instance's shards may start, counted across every worker and dispatcher.

    Exactly one of `max_shards_per_minute` and `max_devices_per_minute` (a shard counts its
    devices from its bounds) caps the rate; `ramp` starts lower and raises it as shards succeed.
    `scope: tenant` shares one budget between every instance of the task's tenant.
    """

    max_shards_per_minute: int | None = Field(default=None, ge=1, le=1_000_000)
    max_devices_per_minute: int | None = Field(default=None, ge=1, le=10_000_000)
    ramp: Ramp | None = None
    scope: Literal["instance", "tenant"] = "instance"

    @model_validator(mode="after")
    def _one_cap(self) -> Rollout:
        if (self.max_shards_per_minute is None) == (self.max_devices_per_minute is None):
            raise ValueError(
                "a rollout needs exactly one of max_shards_per_minute and max_devices_per_minute"
            )
        cap = self.max_shards_per_minute or self.max_devices_per_minute or 0
        if self.ramp is not None and self.ramp.base > cap:
            raise ValueError("a ramp's base must not exceed the rollout's maximum per minute")
        return self


class Abort(Frozen):
    """Stop an instance whose failed share of ended shards reaches `failure_percent` once at
    least `min_executed` shards ended: no further shard starts, the instance ends `aborted`;
    `action: pause` also pauses the task, with a note saying why."""

    failure_percent: float = Field(gt=0, le=100)
    min_executed: int = Field(default=1, ge=1, le=1_000_000)
    action: Literal["cancel", "pause"] = "cancel"


class Window(Frozen):
    """A recurring maintenance window: it opens at each instant of `cron` (in `timezone`) and
    stays open `duration` (`30m`, `2h`, `1d`). Firings and shard starts happen only while it is
    open; shards not started when it closes wait for the next opening (`defer`) or are cancelled
    (`cancel`, which ends the instance).

    `group_attribute` (groups sharding only) gives each shard its own window instead: that
    attribute of its device group (`{cron, duration[, timezone]}`), in the group's own timezone
    unless the attribute names one, fixed into the shard's bounds at the claim. Its `cron` and
    `duration` are then optional: the window of a group without the attribute (in that group's
    timezone); with neither, such a group fails the plan. It never moves firings."""

    cron: Cron | None = None
    duration: Duration | None = None
    timezone: Zone = "UTC"
    on_close: Literal["defer", "cancel"] = "defer"
    group_attribute: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.:-]{1,128}$")

    @model_validator(mode="after")
    def _shape(self) -> Window:
        if self.group_attribute is None:
            if self.cron is None or self.duration is None:
                raise ValueError("a window needs cron and duration (or group_attribute)")
            return self
        if (self.cron is None) != (self.duration is None):
            raise ValueError(
                "with group_attribute, cron and duration are the window of a group without the "
                "attribute: give both or neither"
            )
        if self.timezone != "UTC":
            raise ValueError(
                "with group_attribute, a window is in each group's own timezone (or the "
                "attribute's timezone): leave timezone out"
            )
        return self

    @property
    def per_group(self) -> bool:
        """True if each shard's window comes from its device group (`group_attribute`)."""
        return self.group_attribute is not None

    @property
    def schedule(self) -> str:
        """The cron of the window's openings (a per-group window without a default has none)."""
        if self.cron is None:
            raise ValueError("a per-group window without a default has no schedule of its own")
        return self.cron

    @property
    def length(self) -> timedelta:
        """How long the window stays open."""
        if self.duration is None:
            raise ValueError("a per-group window without a default has no duration of its own")
        return triggers.parse_rate(self.duration)
