"""What the use-cases are given: `Wiring`, the bag of every port an entry point built, and
`Tuning`, the scheduler's knobs.

`iotsched.bootstrap` builds one `Wiring` per process; a use-case declares the subset it reads
(`port_sets`, or a Protocol of its own module) and `Wiring` satisfies each structurally.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from iotsched.context import Handler, ResourceCache
from iotsched.ports.blocking import BlockingStore
from iotsched.ports.clock import Clock
from iotsched.ports.devices import DeviceDirectory
from iotsched.ports.instances import InstanceStore
from iotsched.ports.logs import AttemptLogStore
from iotsched.ports.messaging import (
    AlertLog,
    AlertSink,
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
from iotsched.services.end_tally import EndTally


class Cancellable(Protocol):
    """A scheduled call that may still be called off (`threading.Timer` is one)."""

    def cancel(self) -> None: ...


@dataclass(frozen=True)
class Tuning:
    """Scheduler knobs with stated defaults (not hidden rules: every one is a setting).

    Attributes:
        shard_lease_s: a shard attempt's lease. The worker renews it every third of it while
            the attempt lives (`iotsched.services.execution.renewal.LeaseRenewal`), whatever
            the shard's length; a dead worker's lease ends within this long, and the next sweep
            sends a fresh message that takes the shard over.
        lease_margin_s: how long past its `timeout_s` (since the attempt's start or its last
            heartbeat) an attempt's lease is still renewed: the time to record an interrupted
            attempt. A handler the timeout cannot interrupt (one not on the main thread) loses
            its lease then.
        dispatch_lease_s: how long a claiming dispatcher owns the sending of its shard messages
            before a duplicate delivery may resume it.
    """

    shard_lease_s: int = 20
    lease_margin_s: int = 30
    dispatch_lease_s: int = 60


@dataclass(frozen=True)
class Wiring:
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
    # How a shard attempt's lease renewals are scheduled: given an
    # `iotsched.services.execution.renewal.LeaseRenewal`, start renewing it until cancelled.
    # None: a daemon thread on the wall clock (`execution.schedules.thread_renewals`); the
    # in-memory build holds them for tests to step by hand (`execution.schedules.HeldRenewals`).
    renewals: Callable[[Any], Cancellable] | None = None
    # Where the whole log of an attempt goes when its record cannot hold it (the data
    # bucket); None: the record's tail alone is kept.
    attempt_logs: AttemptLogStore | None = None
    # Spans of a firing (docs/design.md, section 16); none by default.
    tracer: Tracer = field(default_factory=NoTracer)
    gauge: QueueGauge | None = None  # the queues' depths (the overview); None: not known
    # The instances this process ended, by status, for the functions' metrics.
    ends: EndTally = field(default_factory=EndTally)
    # What handlers get by `ctx.resource(factory)`: made once per container (this process),
    # or provided by the composition root (the IoT handlers' resources of its settings).
    resources: ResourceCache = field(default_factory=ResourceCache)
    # The wall clock where `clock` is not one (the local runtime's manual clock): change
    # records are stamped by it (`record_clock`). None: `clock` is the wall clock.
    wall_clock: Clock | None = None

    @property
    def record_clock(self) -> Clock:
        """The clock change records (audit, task versions) are stamped with: the wall clock,
        whatever clock moves the schedule (which moves instances, not the history)."""
        return self.wall_clock or self.clock
