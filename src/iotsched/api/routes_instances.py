"""Routes of instances and their shards (list, get, cancel, rerun), and of alerts."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler.openapi.params import Path, Query

from iotsched.api.models import (
    INSTANCE_ID_PATTERN,
    AttemptLogView,
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
    TenantFilter,
)
from iotsched.api.routing import Api, instance_model, responses
from iotsched.api.scope import require_instance, visible_instance, wanted
from iotsched.core.alert_message import Alert
from iotsched.core.instance_record import InstanceStatus
from iotsched.core.paging import filled_page
from iotsched.core.value_types import TASK_ID_PATTERN
from iotsched.services.definitions.history import listed_incarnation
from iotsched.services.operations.actions import (
    cancel_instance,
    rerun_instance,
)
from iotsched.services.operations.logs import read_log
from iotsched.services.operations.views import shard_views


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
        tenant: TenantFilter = None,
    ) -> list[InstanceView]:
        svc = services_factory()
        store = svc.instances
        caller = api.caller()
        incarnation = listed_incarnation(task_id, svc.tasks)
        if caller.operator and tenant is None:
            found = store.list_instances(
                task_id=task_id, status=status, limit=limit, before=before, incarnation=incarnation
            )
        else:
            found = filled_page(
                lambda cursor, n: store.list_instances(
                    task_id=task_id, status=status, limit=n, before=cursor, incarnation=incarnation
                ),
                lambda i: wanted(caller, i.tenant, tenant),
                lambda i: i.instance_id,
                limit,
                start=before,
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
        return instance_model(visible_instance(api.caller(), inst, instance_id))

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
        inst = visible_instance(api.caller(), svc.instances.get_instance(instance_id), instance_id)
        views = shard_views(inst, svc.instances.list_shards(instance_id), svc.clock.now())
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
        "GET",
        "/instances/<instance_id>/shards/<shard>/logs",
        operation_id="getShardLogs",
        tags=["instances"],
        summary="What one attempt of a shard logged: the whole log, or the record's tail",
        description="The lines of the shard's latest attempt (or `attempt`), oldest first: "
        "the whole log from the data bucket when the record's tail lacks some, else the tail. "
        "A shard that has not started answers with no attempt and no lines; an unknown shard "
        "or attempt is a 404.",
        responses=responses(400, 404),
    )
    def get_shard_logs(
        instance_id: InstanceId,
        shard: Annotated[int, Path(ge=0, description="The shard's index.")],
        attempt: Annotated[
            int | None, Query(ge=1, description="The attempt (default: the latest).")
        ] = None,
    ) -> AttemptLogView:
        svc = services_factory()
        visible_instance(api.caller(), svc.instances.get_instance(instance_id), instance_id)
        return AttemptLogView.model_validate(read_log(instance_id, shard, attempt, svc).view())

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
        svc = services_factory()
        require_instance(api.caller(), svc, instance_id)
        return instance_model(
            cancel_instance(instance_id, svc, reason=request.reason, actor=api.actor())
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
        svc = services_factory()
        require_instance(api.caller(), svc, instance_id)
        started = rerun_instance(
            instance_id,
            svc,
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
        tenant: TenantFilter = None,
    ) -> list[Alert]:
        log = services_factory().alert_log
        caller = api.caller()
        if caller.operator and tenant is None:
            return log.recent(limit=limit)
        # The log has no cursor: a scoped caller's alerts are among the newest MAX_ALERTS.
        kept = [a for a in log.recent(limit=MAX_ALERTS) if wanted(caller, a.tenant, tenant)]
        return kept[:limit]
