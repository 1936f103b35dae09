"""`Client`: the management API's verbs, as the CLI names them, with typed results.

Lists come as iterators that fetch page after page as they are consumed (`tasks`, `instances`,
`shards`); every other verb is one request. Which requests are retried: `transport`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import date, datetime
from typing import Any
from urllib.parse import urlsplit

from iotsched.api.audit_views import (
    AuditItem,
    RollbackResult,
    VersionItem,
)
from iotsched.api.identity import LOCAL_TENANTS_HEADER
from iotsched.api.models import (
    AppliedTasks,
    AttemptLogView,
    BackfillResult,
    InstanceView,
    RunResult,
    ShardPage,
    ShardView,
    TaskChange,
    TaskDeleted,
    TaskDetail,
    TaskView,
    TenantItem,
)
from iotsched.api.overview_views import OverviewView
from iotsched.client.transport import RetryPolicy, Signer, SigV4Signer, Transport, path_of
from iotsched.core.alert_message import Alert
from iotsched.core.calendars import Calendar
from iotsched.core.instance_record import InstanceStatus
from iotsched.core.task_definition import (
    Priority,
    TaskDefinition,
)
from iotsched.core.task_file import TaskFile

#: The API's largest pages (`iotsched.api.params`): tasks, instances, shards.
MAX_TASK_PAGE = 100
MAX_INSTANCE_PAGE = 500
MAX_SHARD_PAGE = 1000
#: Where `iotsched local up` serves the API (its `--port`, default 8000, under `/api`).
LOCAL_URL = "http://127.0.0.1:8000/api"


def _body(**fields: Any) -> dict[str, Any]:
    """A request body of the fields given (None: left out, the API's default)."""
    return {k: v for k, v in fields.items() if v is not None}


def _region_of(url: str) -> str | None:
    """The region in an API Gateway host (`<id>.execute-api.<region>.amazonaws.com`)."""
    labels = (urlsplit(url).hostname or "").split(".")
    if len(labels) >= 4 and labels[1] == "execute-api":
        return labels[2]
    return None


class Client:
    """The management API of one iotsched deployment.

    `Client.local()` for the local runtime, `Client.aws(url)` or `Client.from_stack()` for a
    deployed stack (SigV4-signed with your AWS credentials), or `Client(url, signer=...)`.
    """

    def __init__(
        self,
        base_url: str,
        *,
        signer: Signer | None = None,
        headers: Mapping[str, str] | None = None,
        retry: RetryPolicy | None = None,
        timeout_s: float = 35.0,
        transport: Transport | None = None,
    ) -> None:
        self.transport = transport or Transport(
            base_url, signer=signer, headers=headers, retry=retry, timeout_s=timeout_s
        )

    @classmethod
    def local(
        cls,
        url: str = LOCAL_URL,
        *,
        tenants: list[str] | None = None,
        retry: RetryPolicy | None = None,
    ) -> Client:
        """The local runtime's API (plain HTTP, as the operator; `tenants`: as a caller holding
        only those, through the local port's tenants header)."""
        headers = {LOCAL_TENANTS_HEADER: " ".join(tenants)} if tenants is not None else None
        return cls(url, headers=headers, retry=retry)

    @classmethod
    def aws(
        cls,
        url: str,
        *,
        session: Any = None,
        region: str | None = None,
        retry: RetryPolicy | None = None,
    ) -> Client:
        """A deployed API (the stack's `ManagementApiUrl`), every request signed with SigV4
        with the credentials of `session` (a boto3 session; default: a new one, which reads
        the usual chain: environment, profile, role)."""
        if session is None:
            import boto3

            session = boto3.session.Session()
        credentials = session.get_credentials()
        if credentials is None:
            raise ValueError("no AWS credentials found to sign the API's requests with")
        found = region or _region_of(url) or session.region_name
        if not found:
            raise ValueError(f"no region for {url}: pass region=")
        return cls(url, signer=SigV4Signer(credentials, found), retry=retry)

    @classmethod
    def from_stack(
        cls,
        stack: str = "iotsched",
        *,
        session: Any = None,
        region: str | None = None,
        retry: RetryPolicy | None = None,
    ) -> Client:
        """A deployed stack's API, its URL read from the stack's `ManagementApiUrl` output."""
        import boto3

        session = session or boto3.session.Session(region_name=region)
        described = session.client("cloudformation").describe_stacks(StackName=stack)
        outputs = {o["OutputKey"]: o["OutputValue"] for o in described["Stacks"][0]["Outputs"]}
        if "ManagementApiUrl" not in outputs:
            raise ValueError(f"stack {stack!r} has no output ManagementApiUrl")
        return cls.aws(outputs["ManagementApiUrl"], session=session, region=region, retry=retry)

    def _get(self, *path: str | int, **query: Any) -> Any:
        return self.transport.request("GET", path_of(*path), query=query, idempotent=True)

    def _post(self, *path: str | int, body: Any = None, idempotent: bool, **query: Any) -> Any:
        return self.transport.request(
            "POST", path_of(*path), query=query, body=body, idempotent=idempotent
        )

    # -- tasks ------------------------------------------------------------------------------

    def tasks(
        self,
        *,
        tenant: str | None = None,
        after: str | None = None,
        page_size: int = MAX_TASK_PAGE,
    ) -> Iterator[TaskView]:
        """Every task (whose id sorts after `after`; of `tenant`, `-` for those without one), in
        id order, fetched `page_size` at a time as the iterator is consumed (`iotsched tasks
        list`)."""
        while True:
            page = [
                TaskView.model_validate(v)
                for v in self._get("tasks", after=after, limit=page_size, tenant=tenant)
            ]
            yield from page
            if len(page) < page_size:
                return
            after = page[-1].id

    def task(self, task_id: str) -> TaskDetail:
        """One task with its definition (`iotsched tasks show`)."""
        return TaskDetail.model_validate(self._get("tasks", task_id))

    def apply(
        self, task_file: Mapping[str, Any] | TaskFile, *, dry_run: bool = False
    ) -> AppliedTasks:
        """Apply a task file, as parsed from YAML (or a `TaskFile`): every task in it, or none
        (`iotsched tasks apply`). Retried safely: applying the same file again changes nothing."""
        answer = self._post("tasks", body=task_file, idempotent=True, dry_run=dry_run or None)
        return AppliedTasks.model_validate(answer)

    def put_task(self, definition: Mapping[str, Any] | TaskDefinition) -> TaskChange:
        """Create or update one task from its task-file entry."""
        task_id = definition.id if isinstance(definition, TaskDefinition) else str(definition["id"])
        answer = self.transport.request(
            "PUT", path_of("tasks", task_id), body=definition, idempotent=True
        )
        return TaskChange.model_validate(answer)

    def pause(self, task_id: str, *, note: str | None = None) -> TaskView:
        """Pause a task (`iotsched tasks pause`), with an optional note saying why."""
        answer = self._post("tasks", task_id, "pause", body=_body(note=note), idempotent=True)
        return TaskView.model_validate(answer)

    def resume(self, task_id: str) -> TaskView:
        """Resume a task (`iotsched tasks resume`)."""
        return TaskView.model_validate(self._post("tasks", task_id, "resume", idempotent=True))

    def delete(self, task_id: str, *, force: bool = False) -> TaskDeleted:
        """Delete a task (`iotsched tasks delete`); `force` cancels its open instances first.
        A retry after a lost answer finds the task gone: `NotFoundError`."""
        answer = self.transport.request(
            "DELETE", path_of("tasks", task_id), query={"force": force or None}, idempotent=True
        )
        return TaskDeleted.model_validate(answer)

    def history(self, task_id: str) -> list[VersionItem]:
        """A task's versions, oldest first (`iotsched tasks history`)."""
        return [VersionItem.model_validate(v) for v in self._get("tasks", task_id, "versions")]

    def rollback(self, task_id: str, *, to: int) -> RollbackResult:
        """Make version `to`'s definition the current one (`iotsched tasks rollback`)."""
        answer = self._post("tasks", task_id, "rollback", body={"to": to}, idempotent=True)
        return RollbackResult.model_validate(answer)

    # -- runs -------------------------------------------------------------------------------

    def run(
        self,
        task_id: str,
        *,
        business_date: date | None = None,
        params: Mapping[str, Any] | None = None,
        request_id: str | None = None,
        priority: Priority | str | None = None,
    ) -> RunResult:
        """Run a task now (`iotsched run`). Give `request_id` to make it safe to retry (the
        same id always returns the same instance); without one a lost answer is not retried
        (a retry in a later minute would start a second instance)."""
        body = _body(
            business_date=business_date, params=params, request_id=request_id, priority=priority
        )
        answer = self._post("tasks", task_id, "runs", body=body, idempotent=request_id is not None)
        return RunResult.model_validate(answer)

    def submit(
        self,
        task_id: str,
        *,
        at: datetime | None = None,
        delay: str | None = None,
        business_date: date | None = None,
        params: Mapping[str, Any] | None = None,
        request_id: str | None = None,
        priority: Priority | str | None = None,
    ) -> InstanceView:
        """A one-time instance fired `at` an instant or after `delay` (`30m`, `2h`, `1d`)
        (`iotsched submit`). Safe to retry only with a `request_id`."""
        body = _body(
            at=at,
            delay=delay,
            business_date=business_date,
            params=params,
            request_id=request_id,
            priority=priority,
        )
        answer = self._post(
            "tasks", task_id, "submissions", body=body, idempotent=request_id is not None
        )
        return InstanceView.model_validate(answer)

    def backfill(
        self,
        task_id: str,
        *,
        start: date,
        end: date,
        dry_run: bool = False,
        priority: Priority | str | None = None,
    ) -> BackfillResult:
        """One instance per slot whose business date lies in [start, end] (`iotsched
        backfill`; one request claims at most 100 slots). Retried safely: a slot claimed
        already comes back `exists`."""
        body = _body(**{"from": start, "to": end}, dry_run=dry_run or None, priority=priority)
        answer = self._post("tasks", task_id, "backfills", body=body, idempotent=True)
        return BackfillResult.model_validate(answer)

    def rerun(
        self, instance_id: str, *, shard: int | None = None, failed_only: bool = False
    ) -> InstanceView:
        """Run an ended instance again: all of it, one `shard`, or its failed shards
        (`iotsched rerun`). Never retried: each rerun is a new run."""
        body = _body(shard=shard, failed_only=failed_only or None)
        answer = self._post("instances", instance_id, "rerun", body=body, idempotent=False)
        return InstanceView.model_validate(answer)

    def cancel(self, instance_id: str, *, reason: str | None = None) -> InstanceView:
        """Cancel an open instance (`iotsched cancel`). A retry after a lost answer finds it
        ended: `ConflictError`."""
        answer = self._post(
            "instances", instance_id, "cancel", body=_body(reason=reason), idempotent=True
        )
        return InstanceView.model_validate(answer)

    # -- what ran ---------------------------------------------------------------------------

    def instances(
        self,
        task_id: str | None = None,
        *,
        status: InstanceStatus | str | None = None,
        tenant: str | None = None,
        before: str | None = None,
        page_size: int = 50,
    ) -> Iterator[InstanceView]:
        """Instances, newest slot first, of one task and/or in one status and/or of `tenant`
        (`-`: those without one; listed after instance `before`), fetched `page_size` at a time as the iterator is consumed
        (`iotsched instances`)."""
        wanted = status.value if isinstance(status, InstanceStatus) else status
        while True:
            answer = self._get(
                "instances",
                task_id=task_id,
                status=wanted,
                tenant=tenant,
                limit=page_size,
                before=before,
            )
            page = [InstanceView.model_validate(v) for v in answer]
            yield from page
            if len(page) < page_size:
                return
            before = page[-1].instance_id

    def instance(self, instance_id: str) -> InstanceView:
        """One instance."""
        return InstanceView.model_validate(self._get("instances", instance_id))

    def shard_page(
        self, instance_id: str, *, start: int = 0, limit: int = MAX_SHARD_PAGE
    ) -> ShardPage:
        """One page of an instance's shards, with the instance and the shard count."""
        answer = self._get("instances", instance_id, "shards", start=start, limit=limit)
        return ShardPage.model_validate(answer)

    def shards(
        self, instance_id: str, *, start: int = 0, page_size: int = MAX_SHARD_PAGE
    ) -> Iterator[ShardView]:
        """Every shard of an instance from index `start` on (`iotsched shards`), page after
        page as the iterator is consumed."""
        following: int | None = start
        while following is not None:
            page = self.shard_page(instance_id, start=following, limit=page_size)
            yield from page.shards
            following = page.next_start

    def logs(self, instance_id: str, shard: int, *, attempt: int | None = None) -> AttemptLogView:
        """What one attempt of a shard logged (default: its latest) (`iotsched logs --shard`)."""
        answer = self._get("instances", instance_id, "shards", shard, "logs", attempt=attempt)
        return AttemptLogView.model_validate(answer)

    def alerts(self, *, limit: int = 20, tenant: str | None = None) -> list[Alert]:
        """Recent alerts, newest first, of `tenant` if given (`-`: those without one;
        `iotsched alerts`)."""
        return [Alert.model_validate(a) for a in self._get("alerts", limit=limit, tenant=tenant)]

    def audit(
        self,
        *,
        task: str | None = None,
        since: date | datetime | str | None = None,
        until: date | datetime | str | None = None,
        limit: int = 200,
    ) -> list[AuditItem]:
        """Who changed what, oldest first, in [since, until) (default: the last day), of one
        task (or `calendar:<name>`) or of all (`iotsched audit`)."""

        def text(value: date | datetime | str | None) -> str | None:
            return value.isoformat() if isinstance(value, date | datetime) else value

        answer = self._get("audit", task=task, since=text(since), until=text(until), limit=limit)
        return [AuditItem.model_validate(r) for r in answer]

    def overview(self, *, hours: int = 24, tenant: str | None = None) -> OverviewView:
        """The console's overview figures over the last `hours` (`iotsched overview`)."""
        return OverviewView.model_validate(self._get("overview", hours=hours, tenant=tenant))

    def tenants(self) -> list[TenantItem]:
        """The tenants the caller holds, with their quotas and tasks (`iotsched tenants`)."""
        return [TenantItem.model_validate(t) for t in self._get("tenants")]

    def calendars(self) -> list[Calendar]:
        """The named calendars (`iotsched calendars`)."""
        return [Calendar.model_validate(c) for c in self._get("calendars")]
