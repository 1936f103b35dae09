"""Routes of instances and their shards (list, get, cancel, rerun), and of alerts."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler.openapi.params import Query

from iotsched.api.models import (
    INSTANCE_ID_PATTERN,
    CancelRequest,
    InstanceView,
    RerunRequest,
    ShardPage,
)
from iotsched.api.params import (
    MAX_ALERTS,
    MAX_LIST_LIMIT,
    MAX_SHARD_PAGE,
    CancelBody,
    InstanceId,
    RerunBody,
)
from iotsched.api.routing import Api, instance_model, responses
from iotsched.core.model import TASK_ID_PATTERN
from iotsched.core.records import Alert, InstanceStatus
from iotsched.services.admin import (
    InstanceNotFoundError,
    cancel_instance,
    rerun_instance,
)
from iotsched.services.queries import shard_views


def register(api: Api) -> None:
    """Add these routes to `api`."""
    route = api.route
    services_factory = api.services
    strict_body = api.strict_body

    @route(
        "GET",
        "/instances",
        operation_id="listInstances",
        tags=["instances"],
        summary="Instances, newest slot first, of one task and/or in one status, a page at a time",
        responses=responses(400),
    )
    def list_instances(
        task_id: Annotated[str | None, Query(pattern=TASK_ID_PATTERN)] = None,
        status: Annotated[InstanceStatus | None, Query()] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_LIST_LIMIT)] = 50,
        before: Annotated[
            str | None,
            Query(
                pattern=INSTANCE_ID_PATTERN,
                description="The last instance id of the previous page: the next page "
                "starts after it.",
            ),
        ] = None,
    ) -> list[InstanceView]:
        found = services_factory().instances.list_instances(
            task_id=task_id, status=status, limit=limit, before=before
        )
        return [instance_model(i) for i in found]

    @route(
        "GET",
        "/instances/<instance_id>",
        operation_id="getInstance",
        tags=["instances"],
        summary="One instance",
        responses=responses(400, 404),
    )
    def get_instance(instance_id: InstanceId) -> InstanceView:
        inst = services_factory().instances.get_instance(instance_id)
        if inst is None:
            raise InstanceNotFoundError(instance_id)
        return instance_model(inst)

    @route(
        "GET",
        "/instances/<instance_id>/shards",
        operation_id="listShards",
        tags=["instances"],
        summary="An instance's shards: bounds, status, attempts (worker, times, outcome), keys",
        responses=responses(400, 404),
    )
    def list_shards(
        instance_id: InstanceId,
        start: Annotated[int, Query(ge=0, description="First shard index of the page.")] = 0,
        limit: Annotated[int, Query(ge=1, le=MAX_SHARD_PAGE)] = MAX_SHARD_PAGE,
    ) -> ShardPage:
        svc = services_factory()
        inst = svc.instances.get_instance(instance_id)
        if inst is None:
            raise InstanceNotFoundError(instance_id)
        views = shard_views(inst, svc.instances.list_shards(instance_id))
        page = views[start : start + limit]
        following = start + len(page)
        return ShardPage.model_validate(
            {
                "instance": instance_model(inst),
                "total": len(views),
                "start": start,
                "next_start": following if following < len(views) else None,
                "shards": page,
            }
        )

    @route(
        "POST",
        "/instances/<instance_id>/cancel",
        operation_id="cancelInstance",
        tags=["instances"],
        summary="Cancel an open instance",
        description="Shards not started never run; running handlers see `ctx.cancelled()`. "
        "Cancelling an instance that has ended is a 409.",
        responses=responses(400, 404, 409, 415),
    )
    def cancel(instance_id: InstanceId, request: CancelBody = None) -> InstanceView:
        request = strict_body(CancelRequest, optional=True) or CancelRequest()
        return instance_model(
            cancel_instance(
                instance_id, services_factory(), reason=request.reason, actor=api.actor()
            )
        )

    @route(
        "POST",
        "/instances/<instance_id>/rerun",
        operation_id="rerunInstance",
        tags=["instances"],
        summary="Run an ended instance again: all of it, one shard, or its failed shards",
        description="The new run (`<first run>~run<n>`, trigger kind `rerun`) reuses the stored "
        "plan, bounds, params and business date; earlier runs stay in the history. A rerun "
        "while the latest run is still open is a 409.",
        responses=responses(400, 404, 409, 415),
    )
    def rerun(instance_id: InstanceId, request: RerunBody = None) -> InstanceView:
        request = strict_body(RerunRequest, optional=True) or RerunRequest()
        started = rerun_instance(
            instance_id,
            services_factory(),
            shard=request.shard,
            failed_only=request.failed_only,
            actor=api.actor(),
        )
        return instance_model(started)

    @route(
        "GET",
        "/alerts",
        operation_id="listAlerts",
        tags=["alerts"],
        summary="Recent alerts, newest first (published to the alert topic, or recorded and still pending publication)",
        description="Each alert is the JSON the alert topic carried (docs/alert.schema.json), "
        "with the instant it was raised.",
        responses=responses(400),
    )
    def list_alerts(
        limit: Annotated[int, Query(ge=1, le=MAX_ALERTS)] = 20,
    ) -> list[Alert]:
        return services_factory().alert_log.recent(limit=limit)
