"""Build the instance a firing claims, its shard plan computed now and stored with it.

No write: `lifecycle` claims what this builds. A `groups` plan reads the Device Management
System here, at fire time.

`instance_for` takes `BuildPorts`: the clock, the tuning and the device directory.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from iotsched.core.decisions import (
    Firing,
    business_date_for,
    data_interval_for,
    data_interval_for_date,
    decide_follow_ups,
)
from iotsched.core.group_windows import WINDOW_KEY, GroupFacts, plan_group_windows
from iotsched.core.instance_record import (
    MAX_LISTED_COVERS,
    InstanceRecord,
    InstanceStatus,
    instance_id_for,
)
from iotsched.core.sharding import (
    PlanningError,
    PlanTooLargeError,
    ShardPlan,
    check_plan_fits,
    plan_shards,
)
from iotsched.core.task_definition import TaskDefinition
from iotsched.core.task_policies import BlockingPolicy
from iotsched.core.task_record import TaskRecord
from iotsched.core.task_sharding import GroupsSharding
from iotsched.ports.devices import (
    DeviceDirectory,
    DirectoryError,
)
from iotsched.services.fleet.rollout import (
    least_rollout_minutes,
    start_weight,
)
from iotsched.services.notices.alerts import PLAN_TOO_LARGE
from iotsched.services.port_sets import BuildPorts


def groups_for(
    definition: TaskDefinition, directory: DeviceDirectory | None
) -> list[dict[str, Any]] | None:
    """For `sharding: groups`, the groups' bounds as the Device Management System lists them
    now (the sharding's tenant, else the task's, else every tenant's); None for other shardings.
    Under a window per device group each bounds also hold the group's window
    (`core.group_windows`).

    Raises:
        PlanningError: no directory is configured, or it could not answer, or a group's window
            could not be resolved.
    """
    sharding = definition.sharding
    if not isinstance(sharding, GroupsSharding):
        if definition.window is not None and definition.window.per_group:
            # Refused at apply; a definition stored otherwise must not run without its windows.
            raise PlanningError("window.group_attribute needs sharding: groups")
        return None
    if directory is None:
        raise PlanningError(
            "sharding 'groups' needs a device directory (IOTSCHED_DEVICE_TABLE or IOTSCHED_DMS_URL)"
        )
    try:
        groups = directory.groups(sharding.tenant or definition.tenant)
    except DirectoryError as exc:
        raise PlanningError(f"the device directory did not answer: {exc}") from exc
    window = definition.window
    if window is None or not window.per_group:
        return [g.bounds() for g in groups]
    # Each shard's window is fixed now, with its bounds: a start never reads the directory.
    facts = [GroupFacts(f"{g.tenant}/{g.group}", g.timezone, g.attributes) for g in groups]
    resolved = plan_group_windows(window, facts)
    return [{**g.bounds(), WINDOW_KEY: w} for g, w in zip(groups, resolved, strict=True)]


def build_instance(
    task: TaskRecord,
    firing: Firing,
    *,
    claimed_at: datetime,
    dispatch_lease_s: int,
    directory: DeviceDirectory | None = None,
) -> InstanceRecord:
    """The instance a firing claims, with its shard plan computed now and stored with it.

    A `groups` plan reads the groups from `directory` here, at fire time, and stores their
    bounds (tenant, group, id range) with the instance: reruns reuse them as they were.
    """
    definition = task.definition
    status = firing.status
    reason = firing.reason
    try:
        plan = plan_shards(definition.sharding, groups_for(definition, directory))
        check_plan_fits(plan)
    except PlanTooLargeError as exc:
        # Refused at claim, once per firing, with its own alert: an instance item over 400 KB
        # would fail the claim itself (and, batched, the claims it shares a transaction with).
        plan = ShardPlan(strategy=definition.sharding.strategy, count=1)
        status, reason = InstanceStatus.FAILED, f"{PLAN_TOO_LARGE}: {exc}"
    except PlanningError as exc:
        plan = ShardPlan(strategy=definition.sharding.strategy, count=1)
        status, reason = InstanceStatus.FAILED, f"planning_failed: {exc}"
    open_ = status in (InstanceStatus.PLANNING, InstanceStatus.SCHEDULED)
    zone = definition.timezone
    if firing.business_date is not None:
        business_date = firing.business_date
        start, end = data_interval_for_date(business_date, zone)
    else:
        business_date = business_date_for(definition.business_date, firing.slot, zone)
        start, end = data_interval_for(definition.business_date, firing.slot, zone)
    suffix = f"~{firing.suffix}" if firing.suffix else ""
    instance = InstanceRecord(
        instance_id=instance_id_for(definition.id, firing.slot, task.incarnation) + suffix,
        task_id=definition.id,
        tenant=definition.tenant,
        slot=firing.slot,
        trigger_kind=firing.kind,
        covers=firing.covers[:MAX_LISTED_COVERS],
        covers_count=len(firing.covers),
        business_date=business_date,
        data_interval_start=start,
        data_interval_end=end,
        status=status,
        reason=reason,
        plan=plan,
        remaining=plan.count if open_ else 0,
        task_version=task.version,
        handler=definition.handler,
        params={**definition.params, **(firing.params or {})},
        timeout_s=definition.timeout_s,
        max_attempts=definition.retry.max_attempts,
        backoff_s=definition.retry.backoff_s,
        severity=definition.alerts.severity,
        retention_days=definition.retention.days,
        rollout=definition.rollout,
        abort=definition.abort,
        window=definition.window,
        shard_spread_s=definition.shard_spread_s,
        pause_on_failure=definition.pause_on_failure,
        alert_policy=definition.alerts if definition.alerts.has_policy else None,
        priority=firing.priority or definition.priority,
        tenant_cap=task.quotas.max_concurrent_shards if task.quotas else None,
        tenant_rate=task.quotas.max_instances_per_minute if task.quotas else None,
        instance_timeout_s=(
            definition.instance_timeout_s
            if task.quotas and task.quotas.max_concurrent_shards
            else None
        ),
        exclusive=definition.blocking.policy is not BlockingPolicy.PARALLEL,
        reduce=definition.reduce,
        created_at=claimed_at,
        finished_at=None if open_ else claimed_at,
        deadline=(firing.fire_at or claimed_at)
        + timedelta(seconds=definition.instance_timeout_s)
        + _rollout_time(definition, plan),
        dispatch_lease_until=(
            claimed_at + timedelta(seconds=dispatch_lease_s)
            if status is InstanceStatus.PLANNING
            else None
        ),
        fire_at=firing.fire_at,
    )
    if open_:
        return instance
    # Final as claimed (skipped, failed to plan): the claim records its follow-ups. It never
    # held the task, so it owes no release.
    owed = decide_follow_ups(
        instance, alert=status is InstanceStatus.FAILED, holds=False, ending=status
    )
    return instance.model_copy(update={"owed": owed})


def _rollout_time(definition: TaskDefinition, plan: ShardPlan) -> timedelta:
    """How much longer than its `instance_timeout_s` an instance under a rollout may run: the
    least time its rate lets every shard start, so that a slow rollout is not timed out for
    being as slow as it was asked to be."""
    rollout = definition.rollout
    if rollout is None:
        return timedelta(0)
    weights = [start_weight(rollout, plan.bounds(i)) for i in range(plan.count)]
    return timedelta(minutes=least_rollout_minutes(rollout, weights))


def instance_for(task: TaskRecord, firing: Firing, services: BuildPorts) -> InstanceRecord:
    """`build_instance` at the services' clock, with their dispatch lease and directory."""
    return build_instance(
        task,
        firing,
        claimed_at=services.clock.now(),
        dispatch_lease_s=services.tuning.dispatch_lease_s,
        directory=services.directory,
    )
