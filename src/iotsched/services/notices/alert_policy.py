"""Alert policies (`alerts:` on a task): a failure threshold, silences, a recovery notice, and
the sweeper's missed-run alert.

An instance's `alert` follow-up comes here: with no policy it publishes the instance's alert
and reads or writes nothing more; a threshold counts the failure in its window and alerts once
when the count reaches it; a silence records the alert to publish at its end; recovery marks
the task failing when it alerts, and raises `recovered` once on its next success. Every
decision is taken on an instant a retry computes again (the instance's end, a missed fire
time), never on the retry's own clock, so a retried step raises the same alert id with the
same content and the alert log keeps one.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Protocol, runtime_checkable

from iotsched.core.alert_message import (
    MAX_ALERT_INSTANCES,
    Alert,
)
from iotsched.core.alertpolicy import (
    COUNTED_TYPES,
    missed_after,
    silenced_until,
    window_start,
)
from iotsched.core.instance_record import (
    InstanceRecord,
    InstanceStatus,
    instance_id_for,
    series_of,
)
from iotsched.core.task_alerts import Alerts
from iotsched.core.task_record import TaskRecord
from iotsched.core.timeutil import iso, slot_text
from iotsched.ports.instances import InstanceStore
from iotsched.ports.messaging import AlertSink
from iotsched.ports.tasks import TaskStore
from iotsched.services.notices.alerts import instance_alert


@runtime_checkable
class AlertPorts(Protocol):
    """The alert sink, the alert policy's state (on the task store), the instances' shards."""

    @property
    def alerts(self) -> AlertSink: ...

    @property
    def tasks(self) -> TaskStore: ...

    @property
    def instances(self) -> InstanceStore: ...


def publish_under(policy: Alerts | None, alert: Alert, at: datetime, sink: AlertSink) -> None:
    """Publish `alert`, held by the task's silence that holds `at` (its end is recorded on it).

    `at` is the instant the alert is about; a task without silences reads nothing more."""
    until = silenced_until(policy, at) if policy is not None and policy.silence else None
    sink.publish(alert if until is None else alert.model_copy(update={"silenced_until": until}))


def publish_instance_alert(instance: InstanceRecord, services: AlertPorts) -> None:
    """The alert step of an ended instance, under its task's alert policy (see the module)."""
    policy = instance.alert_policy
    at = instance.finished_at or instance.created_at
    if instance.status is InstanceStatus.SUCCEEDED:
        if policy is not None and policy.recovery:
            _recover(instance, policy, at, services)
        return
    alert = instance_alert(instance, services.instances.list_shards(instance.instance_id))
    if policy is None:
        services.alerts.publish(alert)
        return
    if policy.threshold is not None and alert.type in COUNTED_TYPES:
        reached = _threshold_alert(instance, policy, at, services)
        if reached is None:
            return  # counted, below the threshold (or past it: the window alerted once)
        alert = reached
    if policy.recovery and alert.type in COUNTED_TYPES | {"failure_threshold"}:
        services.tasks.mark_failing(
            series_of(instance), instance.instance_id, at=at, expires_at=_state_expiry(instance, at)
        )
    publish_under(policy, alert, at, services.alerts)


def _threshold_alert(
    instance: InstanceRecord, policy: Alerts, at: datetime, services: AlertPorts
) -> Alert | None:
    threshold = policy.threshold
    assert threshold is not None
    start = window_start(threshold, at)
    count = services.tasks.count_failure(
        series_of(instance),  # a task created again counts its own failures
        start,
        instance.instance_id,
        threshold=threshold.count,
        # kept until the window is long over (a late follow-up still finds its count)
        expires_at=start + timedelta(seconds=threshold.window_s, days=instance.retention_days),
    )
    if not count.counted or count.count < threshold.count:
        return None
    return Alert(
        type="failure_threshold",
        severity=instance.severity,
        retention_days=instance.retention_days,
        task_id=instance.task_id,
        tenant=instance.tenant,
        instance_id=instance.instance_id,
        status="failing",
        reason=f"{count.count} failed instances in the {threshold.window_s} s window from "
        f"{iso(start)} (threshold {threshold.count}); later failures of the window are not "
        "alerted",
        count=count.count,
        window_start=start,
        window_s=threshold.window_s,
        instances=count.instances[:MAX_ALERT_INSTANCES],
        alert_id=f"{series_of(instance)}#failure_threshold#{slot_text(start)}",
    )


def _state_expiry(instance: InstanceRecord, at: datetime) -> datetime:
    """How long a task's failing (or recovered) state is kept after its last write: as long as
    the instance records it names, so a task that stops failing, stops running or is switched
    off leaves nothing behind for good."""
    return at + timedelta(days=instance.retention_days)


def _recover(instance: InstanceRecord, policy: Alerts, at: datetime, services: AlertPorts) -> None:
    since = services.tasks.clear_failing(
        series_of(instance), by=instance.instance_id, at=at, expires_at=_state_expiry(instance, at)
    )
    if since is None:
        return  # not failing, or another success noticed it first
    alert = Alert(
        type="recovered",
        severity=instance.severity,
        retention_days=instance.retention_days,
        task_id=instance.task_id,
        tenant=instance.tenant,
        instance_id=instance.instance_id,
        business_date=instance.business_date,
        status=instance.status.value,
        reason=f"succeeded after failures since {since}",
        recovered_from=since,
        alert_id=f"{since}#recovered",
    )
    publish_under(policy, alert, at, services.alerts)


def missed_run_alert(task: TaskRecord) -> Alert:
    """The alert for a task whose fire time `next_fire` passed with no dispatcher advancing it:
    one id per task and fire time (the slot's), however many sweeps see it."""
    assert task.next_fire is not None
    definition = task.definition
    return Alert(
        type="missed_run",
        severity=definition.alerts.severity,
        retention_days=definition.retention.days,
        task_id=definition.id,
        tenant=definition.tenant,
        instance_id=instance_id_for(definition.id, task.next_fire, task.incarnation),
        status="missed",
        reason=f"no instance fired for {slot_text(task.next_fire)} within "
        f"{int(missed_after(definition.misfire.grace_s).total_seconds())} s: is the "
        "dispatcher running?",
        fire_at=task.next_fire,
        alert_id=f"{instance_id_for(definition.id, task.next_fire, task.incarnation)}#missed_run",
    )


def overdue(task: TaskRecord, now: datetime) -> bool:
    """True when the task's fire time is further behind `now` than its grace (and the floor)."""
    fire = task.next_fire
    return fire is not None and now - fire > missed_after(task.definition.misfire.grace_s)


def alert_missed_run(task: TaskRecord, sink: AlertSink) -> str:
    """Raise `missed_run` for an overdue task (silences hold it as any of its alerts)."""
    alert = missed_run_alert(task)
    assert alert.fire_at is not None
    publish_under(
        task.definition.alerts,
        alert,
        alert.fire_at + missed_after(task.definition.misfire.grace_s),
        sink,
    )
    return alert.alert_id
