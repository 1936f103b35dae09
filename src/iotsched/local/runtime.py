"""LocalRuntime: the emulated deployment, composed of the emulator, the template's resources,
the function processes (`Supervisor`) and the clock that delivers the schedule rules
(`DeliveryDriver`).

It starts and stops them in order and is the one object the CLI, the demo, the tests and the
benchmarks hold: its methods are the runtime's public surface.
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections import deque
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from iotsched.adapters.aws import AwsClients
from iotsched.adapters.spans import SpanRecord
from iotsched.adversary.middleware import Adversary
from iotsched.adversary.schedule import AdversaryConfig
from iotsched.core.buckets import DEFAULT_BUCKETS
from iotsched.local.bucket_reports import BucketReports
from iotsched.local.delivery import (
    DeliveryDriver,
    TickResult,
    scheduled_event,
)
from iotsched.local.emulator import EmulatorServer
from iotsched.local.logs import RunLogs
from iotsched.local.processes import (
    FunctionProcess,
    Invocation,
    InvocationError,
    RuntimeError_,
)
from iotsched.local.provision import Deployment, provision
from iotsched.local.supervisor import Supervisor, wait_until
from iotsched.local.template import DISPATCH_QUEUE, TICK_EVENT, Function, Template
from iotsched.settings import Settings

#: The runtime's public names; the function hosts' errors are raised through it.
__all__ = [
    "InvocationError",
    "LocalRuntime",
    "RuntimeError_",
    "TickResult",
    "scheduled_event",
]

DUMMY_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
}


class LocalRuntime:
    """The emulated deployment. Use as a context manager or call start()/stop().

    Args:
        template_path: the SAM template (the single description of the resources).
        aws_port: the moto server port on 127.0.0.1 (0: a free port).
        speed: clock speed for the tick emulator (60: a minute per second).
        workers: worker processes of the (normal priority) shard queue's event source (like
            Lambda concurrency); the dead-letter queue's has one.
        lane_workers: worker processes of each of the high and low priority shard queues'
            event sources (their MaximumConcurrency, scaled down).
        dispatchers: dispatcher processes started warm. Deliveries that arrive together (a
            duplicated tick, concurrent `local tick` calls, a tick beside a sweep) run as
            concurrent invocations: one that finds every dispatcher busy starts a new one.
        max_concurrency: the most environments (processes) an invoke-mode function scales
            to, as an account's concurrency limit caps Lambda.
        manual_clock: no tick emulation; call `tick()` to deliver ticks.
        parameter_overrides: template parameters (e.g. shorter timeouts for demos and tests).
        env_overrides: extra environment for every function.
        start_at: the emulated clock's start (default: now).
        adversary: put the adversarial DynamoDB with this configuration before moto.
        traces: every function records its spans with the local tracer, each process in a
            file of its own under `log_dir/spans` (`spans()` reads them all); without it no
            function traces.
    """

    def __init__(
        self,
        template_path: Path,
        *,
        aws_port: int = 0,
        speed: float = 1.0,
        workers: int = 2,
        lane_workers: int = 1,
        dispatchers: int = 2,
        manual_clock: bool = False,
        parameter_overrides: Mapping[str, str] | None = None,
        env_overrides: Mapping[str, str] | None = None,
        start_at: datetime | None = None,
        stack: str = "iotsched",
        log_dir: Path | None = None,
        on_tick: Callable[[TickResult], None] | None = None,
        max_concurrency: int = 10,
        on_event: Callable[[str], None] | None = None,
        adversary: AdversaryConfig | None = None,
        traces: bool = False,
    ) -> None:
        self.template = Template.read(template_path, parameter_overrides)
        self.aws_port = aws_port
        self.manual_clock = manual_clock
        self.env_overrides = dict(env_overrides or {})
        self.stack = stack
        self.log_dir = log_dir or Path(tempfile.mkdtemp(prefix="iotsched-local-"))
        self.adversary_config = adversary
        self.traces = traces
        self.endpoint_url = ""
        self._stop = threading.Event()
        self._logs = RunLogs(self.log_dir)
        self._bucket_reports = BucketReports()
        self._server: EmulatorServer | None = None
        self._deployment: Deployment | None = None
        self.supervisor = Supervisor(
            self._logs,
            self._stop,
            workers=workers,
            lane_workers=max(1, lane_workers),
            dispatchers=max(1, dispatchers),
            max_concurrency=max(1, max_concurrency),
            on_event=on_event,
        )
        self.driver = DeliveryDriver(
            self.supervisor.scheduled,
            lambda: self.dispatchers,
            self._bucket_reports,
            self._stop,
            stack=stack,
            speed=speed,
            start_at=start_at or datetime.now(UTC),
            on_tick=on_tick,
        )

    # -- lifecycle --------------------------------------------------------------------------

    def __enter__(self) -> LocalRuntime:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Start the emulator, provision the template, spawn the functions, start the clock.

        A start that fails or is interrupted (a signal's KeyboardInterrupt) stops what it
        started before it raises. A port another program holds is a `PortInUseError` before
        anything starts.
        """
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> None:
        self._server = EmulatorServer(self.aws_port, adversary=self.adversary_config)
        self._server.reset()
        self.endpoint_url = self._server.url
        for key, value in DUMMY_CREDENTIALS.items():
            os.environ.setdefault(key, value)
        clients = AwsClients(region="us-east-1", endpoint_url=self.endpoint_url)
        self._deployment = provision(self.template, clients, stack=self.stack)
        self.supervisor.add_functions(
            self._deployment, self._environment, self._bucket_reports.settle
        )
        self.supervisor.start()
        self.supervisor.watch()
        self.driver.start(manual=self.manual_clock)  # the clock starts once every process is up

    def _environment(self, fn: Function) -> dict[str, str]:
        """The environment of `fn`'s processes: the template's, pointed at the emulator."""
        # The template's `xray` tracing is Lambda's: here the local tracer, or none.
        tracing = (
            {"IOTSCHED_TRACING": "local", "IOTSCHED_TRACE_DIR": str(self.span_dir)}
            if self.traces
            else {"IOTSCHED_TRACING": "off"}
        )
        return {
            **os.environ,
            **DUMMY_CREDENTIALS,
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "PYTHONUNBUFFERED": "1",
            # The bucket dispatcher's answer carries its reports, which `tick` gathers.
            "IOTSCHED_BATCH_REPORTS": "1",
            **fn.environment,
            **tracing,
            **self.env_overrides,
        }

    def stop(self) -> None:
        """Stop the clock, let workers finish their batch, stop the emulator."""
        self._stop.set()
        self.driver.join()
        self.supervisor.stop()
        if self._server is not None:
            self._server.stop()
            self._server = None
        self._logs.close()

    # -- what tests, the CLI and the demo use -----------------------------------------------

    @property
    def adversary(self) -> Adversary | None:
        """The emulator's adversarial DynamoDB (its fault counts), when it runs with one."""
        return self._server.adversary if self._server is not None else None

    @property
    def deployment(self) -> Deployment:
        """Physical names of the provisioned resources."""
        if self._deployment is None:
            raise RuntimeError_("the runtime is not started")
        return self._deployment

    def settings(self) -> Settings:
        """Settings that reach this deployment (for the CLI, tests and the demo)."""
        env = self.supervisor.scheduled[TICK_EVENT].fn.environment
        return Settings(
            table=env["IOTSCHED_TABLE"],
            shard_queue_url=env["IOTSCHED_SHARD_QUEUE_URL"],
            shard_queue_high_url=env.get("IOTSCHED_SHARD_QUEUE_HIGH_URL") or None,
            shard_queue_low_url=env.get("IOTSCHED_SHARD_QUEUE_LOW_URL") or None,
            alert_topic_arn=env["IOTSCHED_ALERT_TOPIC_ARN"],
            endpoint_url=self.endpoint_url,
            worker_id="local-cli",
            device_table=env.get("IOTSCHED_DEVICE_TABLE") or None,
            data_bucket=env.get("IOTSCHED_DATA_BUCKET") or None,
            reminder_topic_arn=env.get("IOTSCHED_REMINDER_TOPIC_ARN") or None,
            dms_url=env.get("IOTSCHED_DMS_URL") or None,
            # The functions' bucket count: what a client writes, the dispatchers must read.
            index_buckets=int(env.get("IOTSCHED_INDEX_BUCKETS") or DEFAULT_BUCKETS),
            # Only the API reads it (the overview's depths); the deployment names it.
            shard_dlq_url=self.deployment.queues.get("ShardDLQ"),
        )

    @property
    def span_dir(self) -> Path:
        """Where the functions' processes append their spans (with `traces`)."""
        return self._logs.span_dir

    def spans(self) -> list[SpanRecord]:
        """Every span the functions' processes recorded so far (with `traces`), in the order
        of their files and lines: group them by `trace_id`."""
        return self._logs.spans()

    # The clock and the deliveries (`DeliveryDriver`).

    @property
    def speed(self) -> float:
        return self.driver.speed

    @property
    def start_at(self) -> datetime:
        return self.driver.start_at

    @property
    def ticks(self) -> list[TickResult]:
        """Every tick delivered so far, with its gathered report."""
        return self.driver.ticks

    @property
    def invocations(self) -> deque[Invocation]:
        """The newest invocations of the invoke-mode functions (dispatcher, sweeper)."""
        return self.driver.invocations

    def now(self) -> datetime:
        """The emulated clock."""
        return self.driver.now()

    def tick(self, at: datetime, *, repeat: int = 1) -> list[TickResult]:
        """Deliver the tick rule's event for `at`, `repeat` times at once, and wait for its
        bucket dispatches (`DeliveryDriver.tick`)."""
        return self.driver.tick(at, repeat=repeat)

    def sweep(self, at: datetime | None = None, *, replay: bool = False) -> dict[str, Any]:
        """Deliver the sweep rule's event once; the sweeper's report (`DeliveryDriver.sweep`)."""
        return self.driver.sweep(at, replay=replay)

    def deliver(
        self,
        event_name: str,
        at: datetime,
        *,
        repeat: int = 1,
        detail: Mapping[str, Any] | None = None,
    ) -> list[TickResult]:
        """Deliver schedule `event_name`'s event for `at`, `repeat` times at once."""
        return self.driver.deliver(event_name, at, repeat=repeat, detail=detail)

    # The function processes (`Supervisor`).

    @property
    def workers(self) -> list[FunctionProcess]:
        """The shard worker processes of the (normal priority) shard queue."""
        return list(self.supervisor.workers)

    @property
    def lane_workers(self) -> list[FunctionProcess]:
        """The shard worker processes of the high and low priority queues."""
        return list(self.supervisor.lane_workers)

    @property
    def dispatchers(self) -> list[FunctionProcess]:
        """The bucket dispatcher processes (the dispatch queue's pollers)."""
        url = self.deployment.queue_url(self.deployment.physical(DISPATCH_QUEUE, "Arn"))
        return self.supervisor.pollers_of(url)

    @property
    def kills(self) -> int:
        """Workers killed by `kill_worker`."""
        return self.supervisor.kills

    @property
    def timeouts(self) -> int:
        """Pollers killed for overrunning their function timeout."""
        return self.supervisor.timeouts

    @property
    def respawns(self) -> int:
        """Dead pollers replaced."""
        return self.supervisor.respawns

    def processes(self) -> list[dict[str, Any]]:
        """Every function process now: name, function, pid, alive, state, generation."""
        return self.supervisor.describe()

    def workers_paused(self, timeout: float = 120) -> AbstractContextManager[None]:
        """Disable the shard queues' event sources while the block runs, as an operator
        disables an event source mapping: batches in hand finish first, then the messages wait
        in their queue. Lets a test hold work back without guessing durations."""
        return self.supervisor.workers_paused(timeout)

    def kill_worker(self, index: int) -> FunctionProcess:
        """SIGKILL worker `index` (a real process death); the supervisor starts a new one."""
        return self.supervisor.kill_worker(index)

    def wait_for(self, predicate: Callable[[], bool], timeout: float, poll: float = 0.2) -> bool:
        """Poll `predicate` until true or `timeout` seconds pass."""
        return wait_until(predicate, timeout, poll)
