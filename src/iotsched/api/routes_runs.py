"""Routes that start instances by hand: run now, submit for later, backfill past dates."""

from __future__ import annotations

from datetime import timedelta
from typing import cast

from iotsched.api.errors import (
    ApiInputError,
)
from iotsched.api.models import (
    BackfillRequest,
    BackfillResult,
    BackfillSlot,
    InstanceView,
    Problem,
    RunOutcome,
    RunRequest,
    RunResult,
    SubmitRequest,
)
from iotsched.api.params import (
    MAX_BACKFILL_CLAIMS,
    MAX_LISTED_SLOTS,
    MAX_SUBMIT_AHEAD,
    BackfillBody,
    RunBody,
    SubmitBody,
    TaskId,
)
from iotsched.api.routing import Api, instance_model, responses
from iotsched.api.scope import require_task
from iotsched.core.timeutil import iso
from iotsched.core.triggers import TriggerError, parse_rate
from iotsched.services.operations.on_demand import (
    backfill_slots,
    plan_backfill,
    run_now,
    submit,
)
from iotsched.services.scheduling.report import TickReport


def _outcome(report: TickReport) -> RunOutcome:
    """What one claim came to (as `iotsched backfill` reports each slot)."""
    if report.claimed:
        return "claimed"
    if report.queued:
        return "queued"
    if report.skipped:
        return "skipped"
    if report.failed:
        return "failed"
    return "exists"


def register(api: Api) -> None:
    """Add these routes to `api`."""
    route = api.route
    services_factory = api.services
    strict_body = api.strict_body

    @route(
        "POST",
        "/tasks/<task_id>/runs",
        operation_id="runTask",
        tags=["runs"],
        summary="Run a task now (trigger kind manual), through its blocking policy",
        description="Without a request id the run takes the current minute's slot, so it never "
        "doubles a scheduled firing of that minute (`exists`); with one it is its own "
        "instance, and the same request id always returns the same instance.",
        responses=responses(400, 404, 415),
    )
    def run(
        task_id: TaskId,
        request: RunBody = None,
    ) -> RunResult:
        request = strict_body(RunRequest, optional=True) or RunRequest()
        svc = services_factory()
        require_task(api.caller(), svc, task_id)
        instance, report = run_now(
            task_id,
            svc,
            business_date=request.business_date,
            params=request.params,
            request_id=request.request_id,
            priority=request.priority,
            actor=api.actor(),
        )
        return RunResult(outcome=_outcome(report), instance=instance_model(instance))

    @route(
        "POST",
        "/tasks/<task_id>/submissions",
        operation_id="submitRun",
        tags=["runs"],
        summary="Submit a one-time instance that the tick fires when due (status scheduled, "
        "trigger kind submitted)",
        description="Give `at` (an instant, at most 366 days ahead) or `delay` (`30m`, `2h`, "
        "`1d`).",
        responses=responses(400, 404, 415),
    )
    def submit_run(
        task_id: TaskId,
        request: SubmitBody,
    ) -> InstanceView:
        request = strict_body(SubmitRequest) or request
        svc = services_factory()
        require_task(api.caller(), svc, task_id)
        now = svc.clock.now()
        if request.delay is not None:
            try:
                delay = parse_rate(request.delay)
            except (TriggerError, OverflowError) as exc:
                raise ApiInputError(
                    str(exc), [Problem(field="body.delay", message=str(exc))]
                ) from None
            field = "body.delay"
            at = now + min(delay, MAX_SUBMIT_AHEAD + timedelta(days=1))
        else:
            assert request.at is not None
            field, at = "body.at", request.at
        if at > now + MAX_SUBMIT_AHEAD:
            message = "a submission is due at most 366 days ahead"
            raise ApiInputError(message, [Problem(field=field, message=message)])
        instance = submit(
            task_id,
            svc,
            at=at,
            business_date=request.business_date,
            params=request.params,
            request_id=request.request_id,
            priority=request.priority,
            actor=api.actor(),
        )
        return instance_model(instance)

    @route(
        "POST",
        "/tasks/<task_id>/backfills",
        operation_id="backfillTask",
        tags=["runs"],
        summary="Claim one instance per slot whose business date lies in [from, to] "
        "(trigger kind backfill)",
        description="Every slot whose business date (per the task's `business_date` rule) "
        "lies in the range, both ends included, is claimed oldest first through the task's "
        "blocking policy; a slot that already has an instance is not doubled (`exists`). "
        "`dry_run` lists each slot with its business date and data interval, the shard count "
        f"and the estimated requests. One request claims at most "
        f"{MAX_BACKFILL_CLAIMS} slots (split longer ranges; the CLI paces with "
        "--max-concurrent).",
        responses=responses(400, 404, 415),
    )
    def backfill(
        task_id: TaskId,
        request: BackfillBody,
    ) -> BackfillResult:
        request = strict_body(BackfillRequest) or request
        svc = services_factory()
        require_task(api.caller(), svc, task_id)
        plan = plan_backfill(task_id, svc, start=request.start, end=request.end)
        if not request.dry_run and len(plan.slots) > MAX_BACKFILL_CLAIMS:
            message = (
                f"the range holds {len(plan.slots)} slots; one request claims at most "
                f"{MAX_BACKFILL_CLAIMS}: split the range"
            )
            raise ApiInputError(message, [Problem(field="body.to", message=message)])
        results: dict[str, RunOutcome] = {}
        if not request.dry_run:
            for instance_id, what in backfill_slots(
                plan, svc, priority=request.priority, actor=api.actor()
            ):
                results[instance_id] = cast("RunOutcome", what)
        return BackfillResult(
            task_id=task_id,
            dry_run=request.dry_run,
            slot_count=len(plan.slots),
            slots=[
                BackfillSlot(
                    slot=iso(d.slot),
                    business_date=d.business_date.isoformat(),
                    data_interval_start=iso(d.data_interval_start),
                    data_interval_end=iso(d.data_interval_end),
                )
                for d in plan.slots[:MAX_LISTED_SLOTS]
            ],
            shards_per_instance=plan.shards_per_instance,
            estimated_requests=plan.estimated_requests,
            results=results,
        )
