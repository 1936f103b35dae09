"""LocalRuntime: the emulator + the template's resources + tick emulator + function hosts (`processes`)."""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any

from iotsched.adapters.aws import AwsClients
from iotsched.adapters.spans import SpanRecord, read_spans
from iotsched.adversary.middleware import Adversary
from iotsched.adversary.schedule import AdversaryConfig
from iotsched.core.buckets import DEFAULT_BUCKETS
from iotsched.core.timeutil import floor_minute
from iotsched.local.emulator import EmulatorServer
from iotsched.local.processes import (
    FunctionPool,
    FunctionProcess,
    Invocation,
    InvocationError,
    RuntimeError_,
)
from iotsched.local.provision import Deployment, provision
from iotsched.local.template import Template
from iotsched.settings import Settings

#: The runtime's public names; the function hosts' errors are raised through it.
__all__ = [
    "InvocationError",
    "LocalRuntime",
    "RuntimeError_",
    "TickResult",
    "scheduled_event",
]

TICK_EVENT = "Tick"  # the tick's rule in template.yaml
SWEEP_EVENT = "Sweep"  # the sweeper's rule
SHARD_QUEUE = "ShardQueue"
#: The shard queues of high and low priority work (normal work is SHARD_QUEUE's).
LANE_QUEUES = ("ShardHighQueue", "ShardLowQueue")
DISPATCH_QUEUE = "DispatchQueue"  # the fanned-out tick's messages, one per bucket
#: The report keys a tick's bucket dispatches add up (lists are joined, counts summed).
_TICK_LISTS = ("claimed", "resumed", "skipped", "queued", "covered", "failed", "failed_tasks")
_TICK_COUNTS = ("due_tasks", "duplicate_claims", "messages_sent", "send_requests")

DUMMY_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
}


@dataclass
class TickResult:
    """One delivered tick, what the dispatcher reported, and the invocation that ran it."""

    at: datetime
    report: dict[str, Any]
    invocation: Invocation | None = None


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
            to, as an account's concurrency limit caps Lambda (10 on a new account).
        manual_clock: no tick emulation; call `tick()` to deliver ticks.
        parameter_overrides: template parameters (e.g. shorter timeouts for demos and tests).
        env_overrides: extra environment for every function.
        start_at: the emulated clock's start (default: now).
        traces: every function records its spans with the local tracer, each process in a
            file of its own under `log_dir/spans` (`spans()` reads them all); without it no
            function traces (docs/design.md, section 16).
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
        self.speed = speed
        self.worker_count = workers
        self.lane_worker_count = max(1, lane_workers)
        self.dispatcher_count = max(1, dispatchers)
        self.max_concurrency = max(1, max_concurrency)
        self.on_event = on_event
        self.manual_clock = manual_clock
        self.env_overrides = dict(env_overrides or {})
        self.stack = stack
        self.start_at = start_at or datetime.now(UTC)
        self.log_dir = log_dir or Path(tempfile.mkdtemp(prefix="iotsched-local-"))
        self.on_tick = on_tick
        self.adversary_config = adversary  # the adversarial DynamoDB before moto, if set
        self.traces = traces
        self.ticks: list[TickResult] = []
        self.kills = 0
        self.timeouts = 0
        self.respawns = 0
        #: The newest invocations of the invoke-mode functions (dispatcher, sweeper).
        self.invocations: deque[Invocation] = deque(maxlen=10_000)
        self._server: EmulatorServer | None = None
        self._deployment: Deployment | None = None
        self._scheduled: dict[str, FunctionPool] = {}  # schedule event -> environments
        self._pollers: dict[str, list[FunctionProcess]] = {}  # function -> SQS pollers
        self._workers: list[FunctionProcess] = []  # the pollers of the shard queue
        self._lane_workers: list[FunctionProcess] = []  # those of the high and low queues
        # The dispatch queue's messages as their bucket dispatches settled: message id ->
        # ("done", its report) | ("failed", why); a message waiting behind its bucket's lease
        # is not settled yet.
        self._dispatched: dict[str, tuple[str, Any]] = {}
        self._dispatched_cond = threading.Condition()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._starters: list[threading.Thread] = []  # replacements of dead pollers
        self._t0 = time.monotonic()
        self._logs: list[IO[bytes]] = []
        self.endpoint_url = ""

    # -- lifecycle --------------------------------------------------------------------------

    def __enter__(self) -> LocalRuntime:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def adversary(self) -> Adversary | None:
        """The emulator's adversarial DynamoDB (its fault counts), when it runs with one."""
        return self._server.adversary if self._server is not None else None

    def start(self) -> None:
        """Start the emulator, provision the template, spawn the functions, start the clock."""
        self._server = EmulatorServer(self.aws_port, adversary=self.adversary_config)
        self._server.reset()
        self.endpoint_url = self._server.url
        for key, value in DUMMY_CREDENTIALS.items():
            os.environ.setdefault(key, value)
        clients = AwsClients(region="us-east-1", endpoint_url=self.endpoint_url)
        self._deployment = provision(self.template, clients, stack=self.stack)
        base_env = {
            **os.environ,
            **DUMMY_CREDENTIALS,
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "PYTHONUNBUFFERED": "1",
            # The bucket dispatcher's answer carries its reports, which `tick` gathers.
            "IOTSCHED_BATCH_REPORTS": "1",
        }
        shard_queue_arn = self._deployment.physical(SHARD_QUEUE, "Arn")
        lane_arns = {
            self._deployment.physical(q, "Arn") for q in LANE_QUEUES if q in self._deployment.queues
        }
        dispatch_queue_arn = (
            self._deployment.physical(DISPATCH_QUEUE, "Arn")
            if DISPATCH_QUEUE in self._deployment.queues
            else None
        )
        # The template's `xray` tracing is Lambda's: here the local tracer, or none.
        tracing = (
            {"IOTSCHED_TRACING": "local", "IOTSCHED_TRACE_DIR": str(self.span_dir)}
            if self.traces
            else {"IOTSCHED_TRACING": "off"}
        )
        for fn in self._deployment.functions.values():
            env = {**base_env, **fn.environment, **tracing, **self.env_overrides}
            if fn.schedules:
                pool = FunctionPool(
                    fn,
                    env,
                    self._log,
                    warm=self.dispatcher_count if TICK_EVENT in fn.schedules else 1,
                    limit=self.max_concurrency,
                    announce=self.on_event,
                )
                for event_name in fn.schedules:
                    self._scheduled[event_name] = pool
            for source in fn.sqs_sources:
                shard_worker = source["queue"] == shard_queue_arn
                lane_worker = source["queue"] in lane_arns
                bucket_dispatcher = source["queue"] == dispatch_queue_arn
                pollers = self._pollers.setdefault(fn.logical_id, [])
                first = len(pollers)
                count = (
                    self.worker_count
                    if shard_worker
                    else self.lane_worker_count
                    if lane_worker
                    else self.dispatcher_count
                    if bucket_dispatcher
                    else 1
                )
                for _ in range(count):
                    name = f"{fn.logical_id}-{len(pollers) + 1}"
                    pollers.append(
                        FunctionProcess(
                            name=name,
                            fn=fn,
                            env=env,
                            log=self._log(name),
                            queue_url=self._deployment.queue_url(str(source["queue"])),
                            batch_size=int(source["batch_size"]),
                            announce=self.on_event,
                            on_batch=self._dispatch_settled if bucket_dispatcher else None,
                        )
                    )
                if shard_worker:
                    self._workers = pollers[first:]
                if lane_worker:
                    self._lane_workers += pollers[first:]
        if TICK_EVENT not in self._scheduled:
            raise RuntimeError_(f"the template has no Schedule event named {TICK_EVENT!r}")
        starters = [threading.Thread(target=p.start) for p in self._processes()]
        for t in starters:
            t.start()
        for t in starters:
            t.join()
        self._t0 = time.monotonic()
        self._spawn(self._supervise, "supervisor")
        if not self.manual_clock:
            self._spawn(self._tick_loop, "tick")

    @property
    def span_dir(self) -> Path:
        """Where the functions' processes append their spans (with `traces`)."""
        return self.log_dir / "spans"

    def spans(self) -> list[SpanRecord]:
        """Every span the functions' processes recorded so far (with `traces`), in the order
        of their files and lines: group them by `trace_id`."""
        return read_spans(self.span_dir)

    def _log(self, name: str) -> IO[bytes]:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        handle = (self.log_dir / f"{name}.log").open("ab")
        self._logs.append(handle)
        return handle

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def stop(self) -> None:
        """Stop the clock, let workers finish their batch, stop the emulator."""
        self._stop.set()
        for thread in self._threads:
            thread.join(5)
        # Replacements being started get one shared deadline, not one each: a start that is
        # still under way is stopped with the rest (its process is among them once spawned).
        deadline = time.monotonic() + 10
        for thread in self._starters:
            thread.join(max(0.0, deadline - time.monotonic()))
        stopped: set[int] = set()
        for _ in range(3):  # again for an environment a late delivery or start spawned
            processes = [p for p in self._processes() if id(p) not in stopped and p.alive]
            if not processes:
                break
            stoppers = [threading.Thread(target=p.stop) for p in processes]
            for t in stoppers:
                t.start()
            for t in stoppers:
                t.join()
            stopped.update(id(p) for p in processes)
        if self._server is not None:
            self._server.stop()
            self._server = None
        for handle in self._logs:
            handle.close()

    # -- what tests, the CLI and the demo use -----------------------------------------------

    @property
    def deployment(self) -> Deployment:
        """Physical names of the provisioned resources."""
        if self._deployment is None:
            raise RuntimeError_("the runtime is not started")
        return self._deployment

    def settings(self) -> Settings:
        """Settings that reach this deployment (for the CLI, tests and the demo)."""
        env = self._scheduled[TICK_EVENT].fn.environment
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
    def workers(self) -> list[FunctionProcess]:
        """The shard worker processes of the (normal priority) shard queue."""
        return list(self._workers)

    @property
    def lane_workers(self) -> list[FunctionProcess]:
        """The shard worker processes of the high and low priority queues."""
        return list(self._lane_workers)

    def now(self) -> datetime:
        """The emulated clock."""
        elapsed = (time.monotonic() - self._t0) * self.speed
        return self.start_at + timedelta(seconds=elapsed)

    def tick(self, at: datetime, *, repeat: int = 1) -> list[TickResult]:
        """Deliver the tick rule's Scheduled Event for `at`, `repeat` times, and wait for the
        bucket dispatches of the messages each delivery sent.

        Repeated deliveries run concurrently, each on a tick process of its own (as duplicate
        EventBridge deliveries reach separate Lambda execution environments), and so do
        deliveries made by concurrent calls; their messages are taken by the bucket
        dispatcher's processes, as the dispatch queue's event source. Each result's report is
        its messages' bucket reports added up (`buckets_dispatched`, `buckets_absorbed` say
        how each message went; `outcomes`, each message's bucket, verdict and figures).
        Raises InvocationError if a bucket dispatch failed or its process died (the message
        comes back later, as on AWS).
        """
        results = self.deliver(TICK_EVENT, at, repeat=repeat)
        failures: list[str] = []
        for result in results:
            result.report, failed = self._gather(result.report)
            failures += failed
        if failures:
            assert results[0].invocation is not None
            raise InvocationError(f"bucket dispatch failed: {failures[0]}", results[0].invocation)
        self.ticks.extend(results)
        if self.on_tick:
            for result in results:
                self.on_tick(result)
        return results

    def _dispatch_settled(self, line: dict[str, Any]) -> None:
        """A bucket dispatcher's batch ended (or its process died): settle its messages."""
        with self._dispatched_cond:
            for message_id in line.get("died", []):
                self._dispatched[message_id] = ("failed", "the bucket dispatcher's process died")
            result = line.get("result") or {}
            reports = result.get("reports") or {}
            failed = set(line.get("failed_ids", []))
            for message_id in line.get("messages", []):
                report = reports.get(message_id)
                if message_id not in failed:
                    self._dispatched[message_id] = ("done", report)
                elif report is None or report.get("verdict") != "wait":
                    self._dispatched[message_id] = ("failed", "the bucket dispatch raised")
            self._dispatched_cond.notify_all()

    def _gather(self, fan_out: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
        """Wait until every message of a tick's fan-out settled; (its bucket reports added
        up, the failures). Bounded by three dispatcher timeouts: a message waits at most for
        one overrunning dispatch ahead of it."""
        ids = [str(m) for m in fan_out.get("messages", [])]
        timeout = 3 * max((p.fn.timeout_s for p in self.dispatchers), default=60) + 30
        deadline = time.monotonic() + timeout
        with self._dispatched_cond:
            while not all(m in self._dispatched for m in ids):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._dispatched_cond.wait(min(left, 0.5))
            settled = {m: self._dispatched.pop(m) for m in ids if m in self._dispatched}
        merged: dict[str, Any] = {
            "now": fan_out.get("now"),
            "buckets": fan_out.get("buckets"),
            **{key: [] for key in _TICK_LISTS},
            **dict.fromkeys(_TICK_COUNTS, 0),
            "buckets_dispatched": 0,
            "buckets_absorbed": 0,
            "outcomes": [],
        }
        failures = [f"{m}: {why}" for m, (state, why) in settled.items() if state == "failed"]
        failures += [f"{m}: not dispatched within {timeout}s" for m in ids if m not in settled]
        for state, bucket in settled.values():
            if state != "done" or not bucket:
                continue
            report = bucket.get("report")
            merged["outcomes"].append(_outcome(bucket))
            if report is None:
                merged["buckets_absorbed"] += 1
                continue
            merged["buckets_dispatched"] += 1
            for key in _TICK_LISTS:
                merged[key] += report.get(key, [])
            for key in _TICK_COUNTS:
                merged[key] += report.get(key, 0)
        return merged, failures

    def _pollers_of(self, queue_id: str) -> list[FunctionProcess]:
        url = self.deployment.queue_url(self.deployment.physical(queue_id, "Arn"))
        return [p for group in self._pollers.values() for p in group if p.queue_url == url]

    @property
    def dispatchers(self) -> list[FunctionProcess]:
        """The bucket dispatcher processes (the dispatch queue's pollers)."""
        return self._pollers_of(DISPATCH_QUEUE)

    def sweep(self, at: datetime | None = None, *, replay: bool = False) -> dict[str, Any]:
        """Deliver the sweep rule's event once; returns the sweeper's report.

        The sweeper sweeps at its own clock's now (as on AWS); with `replay` it sweeps at `at`
        (the event's `detail.now`), which a manual clock needs to end what is past a deadline
        on the replayed timeline.
        """
        detail = {"now": (at or self.now()).isoformat()} if replay else None
        (result,) = self.deliver(SWEEP_EVENT, at or self.now(), detail=detail)
        return result.report

    def deliver(
        self,
        event_name: str,
        at: datetime,
        *,
        repeat: int = 1,
        detail: Mapping[str, Any] | None = None,
    ) -> list[TickResult]:
        """Deliver schedule `event_name`'s Scheduled Event for `at`, `repeat` times at once.

        Each delivery is an invocation of its own (see `FunctionPool`); every invocation is
        recorded in `invocations`. Raises the first failed invocation's error once all ended.
        """
        pool = self._scheduled.get(event_name)
        if pool is None:
            raise RuntimeError_(f"no function has a Schedule event named {event_name!r}")
        event = scheduled_event(at, rule=f"{self.stack}-{pool.fn.logical_id}-{event_name}")
        if detail:
            event["detail"] = dict(detail)

        def one() -> TickResult:
            try:
                report, invocation = pool.invoke(event)
            except InvocationError as exc:
                self.invocations.append(exc.invocation)
                raise
            self.invocations.append(invocation)
            return TickResult(at=at, report=report or {}, invocation=invocation)

        if repeat == 1:
            return [one()]
        with ThreadPoolExecutor(max_workers=repeat) as threads:
            futures = [threads.submit(one) for _ in range(repeat)]
            wait(futures)
        return [future.result() for future in futures]

    def processes(self) -> list[dict[str, Any]]:
        """Every function process now: name, function, pid, alive, state, generation."""
        return [
            {
                "name": p.name,
                "function": p.fn.logical_id,
                "pid": p.pid,
                "alive": p.alive,
                "state": p.state,
                "generation": p.generation,
            }
            for p in self._processes()
        ]

    def _processes(self) -> list[FunctionProcess]:
        pools = {id(pool): pool for pool in self._scheduled.values()}
        hosts = [h for pool in pools.values() for h in list(pool.hosts)]
        pollers = [p for group in self._pollers.values() for p in group]
        return [*hosts, *pollers]

    @contextlib.contextmanager
    def workers_paused(self, timeout: float = 120) -> Iterator[None]:
        """Disable the shard queue's event source while the block runs, as an operator disables
        an event source mapping: batches in hand finish first, then nothing is received (the
        messages wait in the queue). Lets a test hold work back without guessing durations.
        Every shard queue's event sources are disabled (each priority's)."""
        workers = [*self._workers, *self._lane_workers]
        for worker in workers:
            worker.set_paused(True)
        try:
            if not self.wait_for(
                lambda: all(w.state in ("paused", "dead") or not w.alive for w in workers),
                timeout,
                0.05,
            ):
                raise RuntimeError_("the workers did not pause")
            yield
        finally:
            for worker in workers:
                worker.set_paused(False)

    def kill_worker(self, index: int) -> FunctionProcess:
        """SIGKILL worker `index` (a real process death); the supervisor starts a new one."""
        worker = self._workers[index]
        worker.kill()
        self.kills += 1
        return worker

    def wait_for(self, predicate: Callable[[], bool], timeout: float, poll: float = 0.2) -> bool:
        """Poll `predicate` until true or `timeout` seconds pass."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return True
            time.sleep(poll)
        return predicate()

    # -- threads ----------------------------------------------------------------------------

    def _tick_loop(self) -> None:
        """Every emulated minute, deliver every rate(1 minute) schedule (tick and sweep)."""
        next_minute = floor_minute(self.now()) + timedelta(minutes=1)
        while not self._stop.is_set():
            now = self.now()
            if now >= next_minute:
                # Each rule delivers on its own: a slow invocation delays no other delivery
                # (the next minute's tick runs beside it, on another environment).
                for event_name in self._scheduled:
                    threading.Thread(
                        target=self._deliver_quietly,
                        args=(event_name, next_minute),
                        name=f"{event_name}@{next_minute:%H:%M}",
                        daemon=True,
                    ).start()
                next_minute += timedelta(minutes=1)
                continue
            wait = (next_minute - now).total_seconds() / self.speed
            self._stop.wait(min(max(wait, 0.01), 0.5))

    def _deliver_quietly(self, event_name: str, at: datetime) -> None:
        if self._stop.is_set():
            return
        try:
            if event_name == TICK_EVENT:
                self.tick(at)
            else:
                self.deliver(event_name, at)
        except RuntimeError_:
            pass  # the invocation is recorded with its error
        except Exception:
            # A delivery the stop overtook finds its process's pipes closed: nothing to report.
            if not self._stop.is_set():
                raise

    def _restart_dead_environments(self) -> None:
        """Start again the idle dispatcher/sweeper environments whose process died, as Lambda
        replaces a lost execution environment (a delivery would start it anyway)."""
        pools = {id(pool): pool for pool in self._scheduled.values()}
        for pool in pools.values():
            for host in pool.take_dead():

                def restart(host: FunctionProcess = host, pool: FunctionPool = pool) -> None:
                    try:
                        if self._stop.is_set():
                            return
                        with contextlib.suppress(RuntimeError_):
                            host.start()
                    finally:
                        pool.give_back(host)

                thread = threading.Thread(target=restart, daemon=True)
                thread.start()
                self._starters = [t for t in self._starters if t.is_alive()] + [thread]

    def _supervise(self) -> None:
        """Enforce the function timeout on the pollers and replace the ones that died.

        Replacements start concurrently, each on a thread of its own, as Lambda provisions new
        execution environments side by side: a worker that died while another was starting
        does not wait for that start (a host takes a second or more to import its handler), so
        the event source's concurrency comes back at the pace it does on AWS.
        """
        starting: set[int] = set()
        lock = threading.Lock()

        def replace(worker: FunctionProcess) -> None:
            try:
                if self._stop.is_set():
                    return
                worker.start()
                with lock:
                    self.respawns += 1
            except RuntimeError_:
                pass  # still dead: the next round tries again
            finally:
                with lock:
                    starting.discard(id(worker))

        while not self._stop.wait(0.1):
            self._restart_dead_environments()
            for worker in [p for group in self._pollers.values() for p in group]:
                if self._stop.is_set():
                    return
                since = worker.busy_since
                if (
                    since is not None
                    and worker.alive  # (one that died meanwhile is a death, not a timeout)
                    and time.monotonic() - since > worker.fn.timeout_s
                ):
                    # Lambda's function timeout: the sandbox dies mid-batch.
                    worker.kill()
                    self.timeouts += 1
                with lock:
                    if worker.alive or id(worker) in starting or self._stop.is_set():
                        continue
                    starting.add(id(worker))
                thread = threading.Thread(target=replace, args=(worker,), daemon=True)
                thread.start()
                self._starters = [t for t in self._starters if t.is_alive()] + [thread]


def _outcome(bucket: Mapping[str, Any]) -> dict[str, Any]:
    """One bucket message's outcome in brief: which bucket and minute, its verdict, and the
    due tasks it read (0: none due any more, or never), claimed and found claimed already."""
    report = bucket.get("report") or {}
    return {
        "minute": bucket.get("minute"),
        "bucket": bucket.get("bucket"),
        "verdict": bucket.get("verdict"),
        "due_tasks": int(report.get("due_tasks", 0)),
        "claimed": len(report.get("claimed", [])),
        "duplicate_claims": int(report.get("duplicate_claims", 0)),
    }


def scheduled_event(at: datetime, *, rule: str) -> dict[str, Any]:
    """The EventBridge Scheduled Event a rate(1 minute) rule delivers."""
    return {
        "version": "0",
        "id": f"local-{at.timestamp():.0f}",
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": "123456789012",
        "time": at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": "us-east-1",
        "resources": [f"arn:aws:events:us-east-1:123456789012:rule/{rule}"],
        "detail": {},
    }
