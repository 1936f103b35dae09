"""The composition root: the one place that chooses adapters.

Lambda handlers, the CLI, the local runtime and the tests all build their ports here, by
capability: `build_stores` (the table's stores and the clock), `build_alerts` (the alert log
and topic), `shard_queue` and `queue_gauge` (the shard queues), `build_devices` (the Device
Management System); `build` composes them all into the `Wiring` the functions and the runtime
use. A caller that needs the stores alone (the CLI's definitions verbs) builds no queue, topic
or device client.

Each builder imports the adapter modules it uses when it runs (SQS, SNS, the HTTP Device
Management System client, the fault injector, the in-memory fakes); this module's own imports
are those of the stores. tests/unit/test_cold_imports.py checks that a function's import stays
without the fakes; tests/integration/test_cli_imports.py that a definitions verb stays without
the messaging and device adapters.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast

from iotsched.adapters.aws import AwsClients
from iotsched.adapters.dynamodb import DynamoDBStore
from iotsched.clock import SystemClock
from iotsched.context import ResourceCache
from iotsched.core.buckets import DEFAULT_BUCKETS
from iotsched.core.task_definition import Priority
from iotsched.ports.blocking import BlockingStore
from iotsched.ports.clock import Clock
from iotsched.ports.devices import DeviceDirectory
from iotsched.ports.instances import InstanceStore
from iotsched.ports.logs import AttemptLogStore
from iotsched.ports.messaging import (
    DispatchQueue,
    Faults,
    NoFaults,
    QueueGauge,
    ShardQueue,
)
from iotsched.ports.tasks import TaskStore
from iotsched.ports.tracing import (
    NoTracer,
    Tracer,
)
from iotsched.registry import HandlerRegistry, handlers_of
from iotsched.services.wiring import Tuning, Wiring
from iotsched.settings import Settings, SettingsError, TableSettings

if TYPE_CHECKING:
    from iotsched.adapters.alerting import DedupAlertSink

T = TypeVar("T")


@dataclass(frozen=True)
class Stores:
    """The scheduler's table, as its three stores, and the clock: all that reading and editing
    task definitions, their versions and the audit log takes, and reading instances and their
    shards (`TaskPorts`, `ResumePorts`, `InstancePorts`)."""

    tasks: TaskStore
    instances: InstanceStore
    blocking: BlockingStore
    clock: Clock

    @property
    def record_clock(self) -> Clock:
        """The clock change records are stamped with: `clock` (the CLI's is the wall clock)."""
        return self.clock


def build_stores(
    table: TableSettings, *, clients: AwsClients | None = None, clock: Clock | None = None
) -> Stores:
    """The stores on the table `table` names (one DynamoDB client, nothing else)."""
    clients = clients or AwsClients(region=table.region, endpoint_url=table.endpoint_url)
    store = DynamoDBStore(clients.dynamodb(), table.table, buckets=table.index_buckets)
    return Stores(tasks=store, instances=store, blocking=store, clock=clock or SystemClock())


def build(
    settings: Settings,
    *,
    clock: Clock | None = None,
    handlers: Mapping[str, Callable[..., Any]] | None = None,
    clients: AwsClients | None = None,
    resources: ResourceCache | None = None,
    wall_clock: Clock | None = None,
) -> Wiring:
    """Wiring on AWS (or on the endpoint the settings name: moto, LocalStack).

    `handlers`: exactly these (plain `(ctx)` functions, decorated ones, or a registry), in
    place of every installed one; `resources`: what handlers' `ctx.resource` gets, in place
    of the IoT handlers' resources of `settings` (made on first use); `wall_clock`: the
    clock change records are stamped with, where `clock` is not the wall clock."""
    clients = clients or AwsClients(region=settings.region, endpoint_url=settings.endpoint_url)
    clock = clock or SystemClock()
    tracer = tracer_for(settings, clock)
    stores = build_stores(settings.table_settings, clients=clients, clock=clock)
    alerts = build_alerts(settings, clients, clock)
    return Wiring(
        tasks=stores.tasks,
        instances=stores.instances,
        blocking=stores.blocking,
        queue=shard_queue(settings, clients, tracer=tracer),
        alerts=alerts,
        alert_log=alerts,
        clock=clock,
        handlers=handlers_of(handlers) if handlers is not None else HandlerRegistry(),
        resources=resources or settings_resources(settings, clients),
        wall_clock=wall_clock,
        tuning=Tuning(
            shard_lease_s=settings.shard_lease_s,
            lease_margin_s=settings.lease_margin_s,
            dispatch_lease_s=settings.dispatch_lease_s,
        ),
        directory=build_devices(settings, clients),
        faults=fault_injector(settings),
        attempt_logs=attempt_logs(settings, clients),
        tracer=tracer,
        gauge=queue_gauge(settings, clients),
    )


def build_alerts(settings: Settings, clients: AwsClients, clock: Clock) -> DedupAlertSink:
    """Alerts recorded in the table's alert log, then published to the alert topic (SNS)."""
    from iotsched.adapters.alerting import DedupAlertSink
    from iotsched.adapters.dynamodb.alerts import DynamoDBAlertLog
    from iotsched.adapters.sns import SNSAlertSink

    log = DynamoDBAlertLog(
        clients.dynamodb(), settings.table, buckets=settings.index_buckets, clock=clock
    )
    return DedupAlertSink(log, SNSAlertSink(clients.sns(), settings.alert_topic_arn), clock)


def build_devices(settings: Settings, clients: AwsClients) -> DeviceDirectory | None:
    """The Device Management System the settings name (over HTTP, or the devices table), or
    none."""
    from iotsched.tasklib.resources import device_directory

    return device_directory(settings, clients)


def attempt_logs(settings: Settings, clients: AwsClients) -> AttemptLogStore | None:
    """Where whole attempt logs go: the data bucket (S3), or none without one."""
    if not settings.data_bucket:
        return None
    from iotsched.adapters.attempt_logs import S3AttemptLogs

    return S3AttemptLogs(clients.s3_logs, settings.data_bucket)


def queue_gauge(settings: Settings, clients: AwsClients) -> QueueGauge:
    """The depths of the shard queues (high, normal, low: those the settings name) and of
    their dead-letter queue (if named)."""
    from iotsched.adapters.sqs import SQSQueueGauge

    named = {
        "high": settings.shard_queue_high_url,
        "normal": settings.shard_queue_url,
        "low": settings.shard_queue_low_url,
        "dead_letter": settings.shard_dlq_url,
    }
    return SQSQueueGauge(clients.sqs(), {k: url for k, url in named.items() if url})


def shard_queue(
    settings: Settings, clients: AwsClients, *, tracer: Tracer | None = None
) -> ShardQueue:
    """The shard queue: one per priority where the settings name the high or low queue
    (each message to its priority's), else the one queue every priority shares; messages
    take `tracer`'s carrier."""
    from iotsched.adapters.sqs import PriorityShardQueue, SQSShardQueue

    normal = SQSShardQueue(clients.sqs(), settings.shard_queue_url, tracer=tracer)
    if not settings.shard_queue_high_url and not settings.shard_queue_low_url:
        return normal
    queues = {Priority.NORMAL: normal}
    if settings.shard_queue_high_url:
        queues[Priority.HIGH] = SQSShardQueue(
            clients.sqs(), settings.shard_queue_high_url, tracer=tracer
        )
    if settings.shard_queue_low_url:
        queues[Priority.LOW] = SQSShardQueue(
            clients.sqs(), settings.shard_queue_low_url, tracer=tracer
        )
    return PriorityShardQueue(queues)


def receiving_from(services: Wiring, source: str | None) -> Wiring:
    """`services` whose visibility changes go to the shard queue `source` (an event source
    ARN) names: a receipt handle is valid only on the queue that delivered it."""
    from iotsched.adapters.sqs import PriorityShardQueue

    if source and isinstance(services.queue, PriorityShardQueue):
        return dataclasses.replace(services, queue=services.queue.receiving_from(source))
    return services


def dispatch_queue(
    settings: Settings, clients: AwsClients | None = None, *, tracer: Tracer | None = None
) -> DispatchQueue:
    """The fanned-out tick's queue (IOTSCHED_DISPATCH_QUEUE_URL); its messages take
    `tracer`'s carrier.

    Raises:
        SettingsError: the setting is missing.
    """
    if not settings.dispatch_queue_url:
        raise SettingsError("missing environment: IOTSCHED_DISPATCH_QUEUE_URL")
    from iotsched.adapters.sqs import SQSDispatchQueue

    clients = clients or AwsClients(region=settings.region, endpoint_url=settings.endpoint_url)
    return SQSDispatchQueue(clients.sqs(), settings.dispatch_queue_url, tracer=tracer)


def tracer_for(settings: Settings, clock: Clock) -> Tracer:
    """Where spans go (IOTSCHED_TRACING): X-Ray through Powertools Tracer, the local tracer
    (this process's spans appended to a file of its own under IOTSCHED_TRACE_DIR), or none."""
    if settings.tracing == "xray":
        from aws_lambda_powertools import Tracer as PowertoolsTracer  # traced functions only

        from iotsched.adapters.xray import XRayTracer

        tracer = PowertoolsTracer()
        # Outside Lambda (or with POWERTOOLS_TRACE_DISABLED) Powertools traces nothing: no spans.
        return NoTracer() if tracer.disabled else XRayTracer(tracer)
    if settings.tracing == "local" and settings.trace_dir:
        import os
        from pathlib import Path

        from iotsched.adapters.spans import LocalTracer, SpanStore  # the local runtime only

        path = Path(settings.trace_dir) / f"{os.getpid()}.jsonl"
        return LocalTracer(SpanStore(path), clock)
    return NoTracer()


def fault_injector(settings: Settings) -> Faults:
    """The chaos runs' injected deaths (IOTSCHED_FAULT_KILL_AFTER_CLAIM > 0), else none."""
    if settings.fault_kill_after_claim > 0:
        from iotsched.adapters.faults import ProcessKillFaults  # chaos runs only

        return ProcessKillFaults(settings.fault_kill_after_claim)
    return NoFaults()


class _Provided(ResourceCache):
    """A cache where some factories are made by others: the composition root's, lazily."""

    def __init__(self, makers: Mapping[Callable[[], Any], Callable[[], Any]]) -> None:
        super().__init__()
        self._makers = dict(makers)

    def get(self, factory: Callable[[], T]) -> T:
        return cast("T", super().get(self._makers.get(factory, factory)))


def settings_resources(settings: Settings, clients: AwsClients) -> ResourceCache:
    """Handlers' resources, the IoT handlers' made from `settings` on their first use (a
    function that runs none never builds their clients)."""
    from iotsched.tasklib.resources import iot_resources, task_resources

    return _Provided({iot_resources: lambda: task_resources(settings, clients)})


def build_memory(
    *,
    clock: Clock | None = None,
    handlers: Mapping[str, Callable[..., Any]] | None = None,
    tuning: Tuning | None = None,
    directory: DeviceDirectory | None = None,
    buckets: int = DEFAULT_BUCKETS,
    tracer: Tracer | None = None,
    resources: ResourceCache | None = None,
) -> Wiring:
    """Wiring on the in-memory fakes (unit tests); `directory` for `groups` plans (and the
    IoT handlers' device directory); `tracer` (e.g. a `LocalTracer`) to record spans;
    `handlers` and `resources` as `build`'s."""
    from iotsched.adapters.attempt_logs import MemoryAttemptLogs
    from iotsched.adapters.memory.queues import (  # the fakes: never on a Lambda's path
        MemoryAlertSink,
        MemoryQueueGauge,
        MemoryShardQueue,
    )
    from iotsched.adapters.memory.store import MemoryStore
    from iotsched.services.execution.schedules import (
        HeldRenewals,  # lease renewals on the test's clock
    )
    from iotsched.tasklib.resources import TaskResources, iot_resources

    clock = clock or SystemClock()
    store = MemoryStore(buckets=buckets)
    alerts = MemoryAlertSink(clock)
    return Wiring(
        tasks=store,
        instances=store,
        blocking=store,
        queue=MemoryShardQueue(clock, tracer=tracer),
        alerts=alerts,
        alert_log=alerts,
        clock=clock,
        handlers=handlers_of(handlers) if handlers is not None else HandlerRegistry(),
        resources=resources or ResourceCache({iot_resources: TaskResources(directory=directory)}),
        tuning=tuning or Tuning(),
        directory=directory,
        renewals=HeldRenewals(),
        attempt_logs=MemoryAttemptLogs(),
        tracer=tracer or NoTracer(),
        gauge=MemoryQueueGauge(),
    )
