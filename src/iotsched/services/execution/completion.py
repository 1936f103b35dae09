"""How an instance's shards end it: exactly one finalizer.

The last shard to finish (or be given up) brings the instance's remaining counter to zero;
every caller that sees zero tries the ending write, and only the one whose conditional write
moves the instance out of planning/running records its follow-ups and does them
(`iotsched.services.scheduling.lifecycle`, which the dispatch also calls):

    completion (finalize) ──► lifecycle (after_end, settle_followups) ──► send

The worker and the dead-letter handler import this module at their cold start, and most of
their calls end no instance, so the lifecycle (and the reduce's message builder) is imported
where an instance ends, not at the top. That import hides no cycle: the lifecycle never
imports this module (tests/unit/test_import_graph.py checks the graph with these imports in
it; tests/unit/test_cold_imports.py that a cold start leaves them out).

**Abort criteria.** An instance with `abort` is decided again after each completion that ends
shards (`after_shards_ended`), on the counts the completion read anyway: no read or write is
added for an instance without it. Its criteria met, it is aborted (`abort`, imported where
it aborts, as the lifecycle). The last shard's completion decides as well: an
instance whose criteria are met when its counter reaches zero ends `aborted`, not `failed`.

`finalize` takes `LifecyclePorts`: an end it writes goes on to the lifecycle's follow-ups.
"""

from __future__ import annotations

from datetime import timedelta

from iotsched.core.abort import decide_abort
from iotsched.core.decisions import decide_follow_ups, decide_instance_outcome
from iotsched.core.instance_record import (
    InstanceRecord,
    InstanceStatus,
)
from iotsched.ports.shards import CompletionResult
from iotsched.services.port_sets import LifecyclePorts


def after_shards_ended(
    instance_id: str,
    services: LifecyclePorts,
    *,
    instance: InstanceRecord | None,
    counts: CompletionResult | None = None,
) -> InstanceStatus | None:
    """What a completion that ended shards of `instance_id` leads to; returns the status if
    this call ended the instance.

    `instance` is the instance as the caller read it (None: not read), with `counts` the
    counter as the completion's own write returned it (None: `instance` was read after the
    write, and its counts are current). A drained counter finalizes; an open instance whose
    abort criteria its counts meet is aborted.
    """
    remaining = counts.remaining if counts is not None else None
    if instance is not None and counts is not None:
        instance = instance.model_copy(
            update={
                "remaining": counts.remaining,
                "failed_shards": counts.failed_shards,
                "unrun_shards": counts.unrun_shards,
            }
        )
    if instance is not None:
        remaining = instance.remaining
    if remaining == 0:
        return finalize(instance_id, services)
    if instance is None or instance.abort is None:
        return None
    figures = decide_abort(instance)
    if figures is None:
        return None
    from iotsched.services.execution.abort import abort_instance  # (cold start: see above)

    return InstanceStatus.ABORTED if abort_instance(instance, figures, services) else None


def finalize(instance_id: str, services: LifecyclePorts) -> InstanceStatus | None:
    """End the instance if its remaining counter is zero; returns the status if this call did.

    Only the caller whose conditional write moves the instance out of planning/running records
    the follow-ups, so a failed instance alerts once however many workers race here. A caller
    that finds the instance final with follow-ups still owed (its finalizer died) does them.
    Its span (`finalize`) says which status this call wrote, if any (`ended`).
    """
    with services.tracer.span("finalize", instance_id=instance_id) as span:
        status = _finalize(instance_id, services)
        span.annotate(ended=status.value if status is not None else "none")
    return status


def _finalize(instance_id: str, services: LifecyclePorts) -> InstanceStatus | None:
    instance = services.instances.get_instance(instance_id)
    if instance is None:
        return None
    services.tracer.annotate(task_id=instance.task_id)
    if instance.status.final:
        if instance.owed:
            from iotsched.services.scheduling.lifecycle import (
                settle_followups,  # (cold start: see above)
            )

            settle_followups(instance, services)
        return None
    if instance.remaining != 0:
        return None
    figures = decide_abort(instance)
    if figures is not None:
        from iotsched.services.execution.abort import abort_instance  # (cold start: see above)

        return InstanceStatus.ABORTED if abort_instance(instance, figures, services) else None
    if (
        instance.reduce is not None
        and instance.failed_shards == 0
        and instance.status is not InstanceStatus.REDUCING
    ):
        # Every shard succeeded: exactly one caller moves the instance to `reducing` and sends
        # the reduce message (a crash after the move is resumed by the sweeper).
        now = services.clock.now()
        if not services.instances.start_reduce(
            instance_id, now=now, until=now + timedelta(seconds=services.tuning.dispatch_lease_s)
        ):
            return None
        from iotsched.core.messages import reduce_message  # (cold start: see above)

        services.queue.send([reduce_message(instance)])
        return InstanceStatus.REDUCING
    status = decide_instance_outcome(instance.failed_shards)
    owed = decide_follow_ups(instance, alert=status is not InstanceStatus.SUCCEEDED, ending=status)
    finished_at = services.clock.now()
    if not services.instances.finalize_instance(
        instance_id, status=status, finished_at=finished_at, owed=owed
    ):
        return None
    ended = instance.model_copy(update={"status": status, "finished_at": finished_at, "owed": owed})
    from iotsched.services.scheduling.lifecycle import after_end  # (cold start: see above)

    after_end(ended, services)
    return status
