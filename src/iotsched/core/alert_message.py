"""The alert the scheduler publishes on SNS and records (`Alert`), and the message attributes
subscribers filter on (`ALERT_ATTRIBUTES`); docs/alert.schema.json is its schema."""

from __future__ import annotations

from datetime import date, datetime
from typing import Any

from pydantic import ConfigDict, Field
from pydantic.json_schema import SkipJsonSchema

from iotsched.core.value_types import Frozen

#: Slots a `catch_up_dropped` alert lists (its reason counts them all).
MAX_ALERT_SLOTS = 100

#: The SNS message attributes of every alert (String), for subscription filter policies; named
#: with the JSON schema (docs/alert.schema.json) and docs/task-files.md, "Alert subscribers".
ALERT_ATTRIBUTES = {
    "type": "the alert's `type`: instance_failed, instance_timed_out, instance_aborted, "
    "instance_plan_too_large, shard_dead_lettered, queue_overflow, catch_up_dropped, "
    "task_dispatch_failed, malformed_dead_letter, failure_threshold, recovered, missed_run, "
    "quota_exceeded",
    "severity": "the task's `alerts.severity`: low, medium, high (the default), critical",
    "tenant": "the task's `tenant`, `-` when it has none",
    "task": "the task id (`task_id`)",
    "silenced": "`yes` for an alert held by a silence of its task and published when the "
    "silence ended, else `no`",
}

#: Instances a `failure_threshold` alert lists (`count` counts them all).
MAX_ALERT_INSTANCES = 20


class Alert(Frozen):
    """A JSON alert for the Alert Microservice; `attributes()` are the SNS filter attributes."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-sns-message-attributes": {
                name: {"DataType": "String", "description": text}
                for name, text in ALERT_ATTRIBUTES.items()
            },
            "x-sns-filter-policy-example": {
                "severity": ["critical", "high"],
                "tenant": ["acme"],
            },
        }
    )

    type: str
    severity: str
    task_id: str
    tenant: str | None
    instance_id: str
    business_date: date | None = None
    status: str
    reason: str | None = None
    failed_shards: list[dict[str, Any]] = Field(default_factory=list)  # the first few at most
    slots: list[dict[str, str]] = Field(
        default_factory=list,
        max_length=MAX_ALERT_SLOTS,
        description="`catch_up_dropped`: the dropped slots, oldest first, each "
        "`{slot, business_date}` (the first 100; `reason` counts them all).",
    )
    alert_id: str
    raised_at: datetime | None = None  # set when the alert is recorded (and deduplicated)
    # The task's retention: the record of the alert expires that long after it was raised.
    # Not part of the alert subscribers receive.
    retention_days: SkipJsonSchema[int | None] = Field(default=None, exclude=True)
    schema_version: int = 1
    # A bounded summary: `failed_shards` lists at most the first few; these count them all and
    # say how to list the rest.
    failed_shard_count: int | None = Field(
        default=None, description="Every failed shard of the instance, listed or not."
    )
    more_failed_shards: str | None = Field(
        default=None,
        description="How to list the failed shards `failed_shards` leaves out (CLI and API); "
        "null when it lists them all.",
    )

    # The alert policy's fields (`alerts:` on the task).
    count: int | None = Field(
        default=None, description="`failure_threshold`: the failures counted in its window."
    )
    window_start: datetime | None = Field(
        default=None,
        description="`failure_threshold`: the start of the window it counts; "
        "`quota_exceeded`: of the window its one alert stands for.",
    )
    window_s: int | None = Field(
        default=None,
        description="`failure_threshold`, `quota_exceeded`: the window's length in seconds.",
    )
    instances: list[str] = Field(
        default_factory=list,
        max_length=MAX_ALERT_INSTANCES,
        description="`failure_threshold`: the instances counted (the first 20).",
    )
    recovered_from: str | None = Field(
        default=None,
        description="`recovered`: the first failed instance of the failures it ends.",
    )
    fire_at: datetime | None = Field(
        default=None, description="`missed_run`: the fire time that passed with no instance."
    )
    silenced_until: datetime | None = Field(
        default=None,
        description="Set when a silence of the task held the alert: when the silence ended "
        "(the alert is published then).",
    )
    quota: str | None = Field(
        default=None,
        description="`quota_exceeded`: the tenant's quota its work met "
        "(`max_concurrent_shards`, `max_instances_per_minute`); `tenant` names the tenant, "
        "`instance_id` the work that "
        "waits, `window_start` the window of the one alert it raises.",
    )
    limit: int | None = Field(default=None, description="`quota_exceeded`: the quota's value.")

    def attributes(self) -> dict[str, str]:
        """Message attributes for SNS subscription filter policies."""
        return {
            "type": self.type,
            "severity": self.severity,
            "tenant": self.tenant or "-",
            "task": self.task_id,
            "silenced": "yes" if self.silenced_until is not None else "no",
        }
