"""Use-cases: plain functions over the ports, shared by the Lambdas, the CLI and the runtime."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from iotsched.context import Handler
from iotsched.ports import (
    AlertLog,
    AlertSink,
    BlockingStore,
    Clock,
    DeviceDirectory,
    Faults,
    InstanceStore,
    NoFaults,
    ShardQueue,
    TaskStore,
)


@dataclass(frozen=True)
class Tuning:
    """Scheduler knobs with stated defaults (not hidden rules: every one is a setting).

    Attributes:
        lease_margin_s: added to a task's `timeout_s` to form a shard lease.
        dispatch_lease_s: how long a claiming dispatcher owns the sending of its shard messages
            before a duplicate delivery may resume it.
    """

    lease_margin_s: int = 30
    dispatch_lease_s: int = 60


@dataclass(frozen=True)
class Services:
    """Everything a use-case may touch, built once by `iotsched.bootstrap`."""

    tasks: TaskStore
    instances: InstanceStore
    blocking: BlockingStore
    queue: ShardQueue
    alerts: AlertSink
    alert_log: AlertLog
    clock: Clock
    handlers: Mapping[str, Handler]
    tuning: Tuning = Tuning()
    faults: Faults = field(default_factory=NoFaults)
    directory: DeviceDirectory | None = None  # the Device Management System (`groups` plans)
