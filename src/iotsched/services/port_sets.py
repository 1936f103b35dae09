"""The port sets shared by several use-case modules: read-only Protocols over `Wiring`.

A use-case names the ports it uses, not the whole `Wiring` bag, so a reader (and a test) sees
what it touches; every member is a read-only property, so the frozen `Wiring` satisfies each
structurally. A set one module alone uses lives in that module. This module imports only the
ports, `Tuning` and `EndTally`, so a cold start that leaves the lifecycle out (the completion's)
can still name `LifecyclePorts`.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from iotsched.ports.blocking import BlockingStore
from iotsched.ports.clock import Clock
from iotsched.ports.devices import DeviceDirectory
from iotsched.ports.instances import InstanceStore
from iotsched.ports.messaging import (
    AlertSink,
    Faults,
    ShardQueue,
)
from iotsched.ports.tasks import TaskStore
from iotsched.ports.tracing import Tracer
from iotsched.services.end_tally import EndTally
from iotsched.services.wiring import Tuning


@runtime_checkable
class TaskPorts(Protocol):
    """The task store alone: reading and editing task records."""

    @property
    def tasks(self) -> TaskStore: ...


@runtime_checkable
class RecordClockPorts(Protocol):
    """The clock change records (audit, task versions) are stamped with: the wall clock."""

    @property
    def record_clock(self) -> Clock: ...


@runtime_checkable
class InstancePorts(Protocol):
    """The instance store alone: reading and writing instances and their shards."""

    @property
    def instances(self) -> InstanceStore: ...


@runtime_checkable
class ClockedInstancePorts(InstancePorts, Protocol):
    """The instance store and the clock: writes stamped with the time."""

    @property
    def clock(self) -> Clock: ...


@runtime_checkable
class BuildPorts(Protocol):
    """Building an instance: the time, the lease lengths and the device directory."""

    @property
    def clock(self) -> Clock: ...

    @property
    def tuning(self) -> Tuning: ...

    @property
    def directory(self) -> DeviceDirectory | None: ...


@runtime_checkable
class SendPorts(ClockedInstancePorts, Protocol):
    """Sending an instance's shard messages and marking it running."""

    @property
    def queue(self) -> ShardQueue: ...

    @property
    def tuning(self) -> Tuning: ...

    @property
    def faults(self) -> Faults: ...

    @property
    def tracer(self) -> Tracer: ...


@runtime_checkable
class LifecyclePorts(SendPorts, BuildPorts, TaskPorts, RecordClockPorts, Protocol):
    """Firing, sending and ending instances, and what follows an end (`scheduling.lifecycle`).

    Every port but the alert log, the handlers and the renewals' schedule. The lifecycle's
    verbs call one another (an end fires dependents, a fire may end at once), so a use case
    that may fire or end an instance takes all of these.
    """

    @property
    def blocking(self) -> BlockingStore: ...

    @property
    def alerts(self) -> AlertSink: ...

    @property
    def ends(self) -> EndTally: ...


@runtime_checkable
class QueuePorts(Protocol):
    """The shard queue and the clock: holding, giving back or resending a delivery's messages."""

    @property
    def queue(self) -> ShardQueue: ...

    @property
    def clock(self) -> Clock: ...
