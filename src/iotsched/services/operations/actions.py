"""Operator actions on an instance: cancel it, or run it again (whole, one shard, or its
failed shards).

Both go through the lifecycle (`LifecyclePorts`), so what follows an end (dependents, a queued
instance of a serial task) happens as after any other end; each writes one audit record.
"""

from __future__ import annotations

from datetime import timedelta

from iotsched.core.audit import Verb
from iotsched.core.instance_record import (
    InstanceRecord,
    InstanceStatus,
    TriggerKind,
)
from iotsched.core.shard_record import ShardStatus
from iotsched.services.notices.audit import (
    UNNAMED,
    audited,
)
from iotsched.services.port_sets import (
    LifecyclePorts,
)
from iotsched.services.scheduling.lifecycle import end_early, send_shards
from iotsched.services.scheduling.report import TickReport


class InstanceNotFoundError(LookupError):
    """No instance has that id."""


class InstanceConflictError(Exception):
    """The instance's state does not allow the action (e.g. cancel a finished instance)."""


def cancel_instance(
    instance_id: str,
    services: LifecyclePorts,
    *,
    reason: str = "cancelled by operator",
    actor: str = UNNAMED,
) -> InstanceRecord:
    """End an open instance as cancelled.

    Shards not yet started never run (workers find the instance final); running handlers see
    `ctx.cancelled()` turn true within a second and their shards end cancelled.

    Raises:
        InstanceNotFoundError: no such instance.
        InstanceConflictError: the instance had already ended.
    """
    instance = services.instances.get_instance(instance_id)
    if instance is None:
        raise InstanceNotFoundError(instance_id)
    if instance.status.final:  # refused before anything is written, record included
        raise InstanceConflictError(f"{instance_id} has already ended ({instance.status.value})")
    with audited(
        Verb.CANCEL,
        instance.task_id,
        services,
        actor=actor,
        tenant=instance.tenant,
        instance_ids=[instance_id],
        version=instance.task_version,
        note=reason,
    ) as change:
        change.diff = {"status": [instance.status.value, InstanceStatus.CANCELLED.value]}
        ended = _end_cancelled(instance, services, reason=reason)
    return ended


def _end_cancelled(
    instance: InstanceRecord, services: LifecyclePorts, *, reason: str
) -> InstanceRecord:
    ended = end_early(
        instance, services, status=InstanceStatus.CANCELLED, reason=reason, alert=False
    )
    if ended is None:
        current = services.instances.get_instance(instance.instance_id)
        status = current.status.value if current else "gone"
        raise InstanceConflictError(f"{instance.instance_id} has already ended ({status})")
    # read back for the caller: what the store holds now (its counts), not the copy
    return services.instances.get_instance(instance.instance_id) or ended


class NothingToRerunError(ValueError):
    """The rerun asked for selects no shard (e.g. --failed when none failed)."""


def rerun_instance(
    instance_id: str,
    services: LifecyclePorts,
    *,
    shard: int | None = None,
    failed_only: bool = False,
    actor: str = UNNAMED,
) -> InstanceRecord:
    """Run an ended instance again: all of it, one shard, or its failed shards.

    The new run (`<first run>~run<n>`, trigger kind `rerun`) reuses the stored plan, bounds,
    params and business date, never re-cut from today's devices. Earlier runs stay in the
    history untouched. A task with a reduce reduces again over the latest successful result
    of every shard across runs.

    Raises:
        InstanceNotFoundError: no such instance.
        InstanceConflictError: the latest run has not ended.
        NothingToRerunError: the selection is empty or the shard is outside the plan.
    """
    named = services.instances.get_instance(instance_id)
    if named is None:
        raise InstanceNotFoundError(instance_id)
    base_id = named.rerun_of or named.instance_id
    base = services.instances.get_instance(base_id)
    if base is None:
        raise InstanceNotFoundError(base_id)
    runs = [base]
    while (
        following := services.instances.get_instance(f"{base_id}~run{len(runs) + 1}")
    ) is not None:
        runs.append(following)
    latest_run = runs[-1]
    if not latest_run.status.final:
        raise InstanceConflictError(
            f"{latest_run.instance_id} is still {latest_run.status.value}; rerun once it ends"
        )
    count = base.plan.count
    if shard is not None:
        if not 0 <= shard < count:
            raise NothingToRerunError(f"shard {shard} is outside the plan (0..{count - 1})")
        only: list[int] | None = [shard]
    elif failed_only:
        succeeded: set[int] = set()
        for run in runs:
            succeeded |= {
                s.index
                for s in services.instances.list_shards(run.instance_id)
                if s.status is ShardStatus.SUCCEEDED and s.index < count
            }
        only = [i for i in range(count) if i not in succeeded]
        if not only:
            raise NothingToRerunError(f"{base_id}: no shard failed")
    else:
        only = None
    now = services.clock.now()
    number = len(runs) + 1
    rerun = base.model_copy(
        update={
            "instance_id": f"{base_id}~run{number}",
            "trigger_kind": TriggerKind.RERUN,
            "status": InstanceStatus.PLANNING,
            "reason": None,
            "remaining": len(only) if only is not None else count,
            "failed_shards": 0,
            "created_at": now,
            "finished_at": None,
            # A capped instance's deadline moved with its sends: its own timeout, from now.
            "deadline": now
            + (
                timedelta(seconds=base.instance_timeout_s)
                if base.instance_timeout_s is not None
                else base.deadline - base.created_at
            ),
            "waiting": None,
            "dispatch_lease_until": now + timedelta(seconds=services.tuning.dispatch_lease_s),
            "run": number,
            "rerun_of": base_id,
            "only": only,
            "sent": 0,  # the first run's send cursor counts its own messages
            "covers": [],
            "covers_count": 0,
        }
    )
    with audited(
        Verb.RERUN,
        base.task_id,
        services,
        actor=actor,
        tenant=base.tenant,
        instance_ids=[rerun.instance_id],
        version=base.task_version,
    ) as change:
        change.detail = f"run {number} of {base_id}" + (
            f", shards {only}" if only is not None else ""
        )
        if services.instances.claim_instance(rerun) is not None:
            raise InstanceConflictError(f"run {number} of {base_id} was started meanwhile")
        send_shards(rerun, services, TickReport(now=now))
    started = services.instances.get_instance(rerun.instance_id)
    assert started is not None
    return started
