"""A task's alert settings (`alerts:`): severity and routing attributes, a failure threshold,
silences and a recovery notice. Which window a failure counts in and whether a silence holds an
alert is `iotsched.core.alertpolicy`'s."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from iotsched.core.value_types import Aware, Cron, Duration, Frozen, Zone


class Threshold(Frozen):
    """Alert on failures only once `count` of them ended in one window of `window_s` seconds
    (windows aligned on the epoch): one `failure_threshold` alert per window reached."""

    count: int = Field(ge=1, le=1000)
    window_s: int = Field(ge=60, le=86_400, multiple_of=60)  # whole minutes, as slots


class Silence(Frozen):
    """A period when the task's alerts are held: recorded, then published when it ends.

    Either recurring (`cron` + `duration`, in `timezone`, as a maintenance window) or one
    period (`start` to `end`)."""

    cron: Cron | None = None
    duration: Duration | None = None
    timezone: Zone = "UTC"
    start: Aware | None = None
    end: Aware | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> Silence:
        recurring = self.cron is not None or self.duration is not None
        period = self.start is not None or self.end is not None
        if recurring == period:
            raise ValueError("a silence is either `cron` with `duration`, or `start` with `end`")
        if recurring and (self.cron is None or self.duration is None):
            raise ValueError("a recurring silence needs both `cron` and `duration`")
        if period and (self.start is None or self.end is None or self.end <= self.start):
            raise ValueError("a silence period needs `start` before `end`")
        return self


class Alerts(Frozen):
    """Severity and routing attributes copied onto every SNS alert of the task, and its alert
    policy: a failure `threshold`, `silence` periods, and a `recovery` notice."""

    severity: Literal["low", "medium", "high", "critical"] = "high"
    route: str | None = None
    threshold: Threshold | None = None
    silence: list[Silence] = Field(default_factory=list, max_length=20)
    recovery: bool = False  # a `recovered` alert on the first success after a failure alert

    @property
    def has_policy(self) -> bool:
        """True when the task's alerts go through a policy (it costs the others nothing)."""
        return self.threshold is not None or bool(self.silence) or self.recovery
