"""The local runtime's supervisor: its function processes up and down, kept alive.

`Supervisor` creates one host process per warm Lambda environment of the deployment (the
invoke-mode pools of the scheduled functions, the pollers of each SQS event source), starts
them side by side, enforces the function timeout on the pollers, replaces processes that died
as Lambda replaces a lost environment, and stops them all. It counts the kills, timeouts and
respawns it saw.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from iotsched.local.logs import RunLogs
from iotsched.local.processes import FunctionPool, FunctionProcess, RuntimeError_
from iotsched.local.provision import Deployment
from iotsched.local.template import (
    DISPATCH_QUEUE,
    LANE_QUEUES,
    SHARD_QUEUE,
    TICK_EVENT,
    Function,
)


def wait_until(predicate: Callable[[], bool], timeout: float, poll: float = 0.2) -> bool:
    """Poll `predicate` until true or `timeout` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(poll)
    return predicate()


class Supervisor:
    """The function processes of one deployment.

    Args:
        logs: where each process writes its log.
        stopping: set when the runtime stops; no process is started or replaced after it.
        workers: pollers of the (normal priority) shard queue's event source.
        lane_workers: pollers of each of the high and low priority shard queues' sources.
        dispatchers: bucket dispatcher pollers, and the tick function's warm environments.
        max_concurrency: the most environments an invoke-mode function scales to.
        on_event: told when a process replaces a dead one.
    """

    def __init__(
        self,
        logs: RunLogs,
        stopping: threading.Event,
        *,
        workers: int,
        lane_workers: int,
        dispatchers: int,
        max_concurrency: int,
        on_event: Callable[[str], None] | None = None,
    ) -> None:
        self._logs = logs
        self._stop = stopping
        self.worker_count = workers
        self.lane_worker_count = lane_workers
        self.dispatcher_count = dispatchers
        self.max_concurrency = max_concurrency
        self.on_event = on_event
        self.kills = 0
        self.timeouts = 0
        self.respawns = 0
        self.scheduled: dict[str, FunctionPool] = {}  # schedule event -> environments
        self.pollers: dict[str, list[FunctionProcess]] = {}  # function -> SQS pollers
        self.workers: list[FunctionProcess] = []  # the pollers of the shard queue
        self.lane_workers: list[FunctionProcess] = []  # those of the high and low queues
        self._thread: threading.Thread | None = None
        self._starters: list[threading.Thread] = []  # replacements of dead processes

    # -- up and down --------------------------------------------------------------------------

    def add_functions(
        self,
        deployment: Deployment,
        env_of: Callable[[Function], dict[str, str]],
        on_dispatch_batch: Callable[[dict[str, Any]], None],
    ) -> None:
        """Create the processes of every function of `deployment` (started by `start`);
        `on_dispatch_batch` hears of each batch a bucket dispatcher ends or loses."""
        shard_queue_arn = deployment.physical(SHARD_QUEUE, "Arn")
        lane_arns = {deployment.physical(q, "Arn") for q in LANE_QUEUES if q in deployment.queues}
        dispatch_queue_arn = (
            deployment.physical(DISPATCH_QUEUE, "Arn")
            if DISPATCH_QUEUE in deployment.queues
            else None
        )
        for fn in deployment.functions.values():
            env = env_of(fn)
            if fn.schedules:
                pool = FunctionPool(
                    fn,
                    env,
                    self._logs.open,
                    warm=self.dispatcher_count if TICK_EVENT in fn.schedules else 1,
                    limit=self.max_concurrency,
                    announce=self.on_event,
                    stopping=self._stop,
                )
                for event_name in fn.schedules:
                    self.scheduled[event_name] = pool
            for source in fn.sqs_sources:
                shard_worker = source["queue"] == shard_queue_arn
                lane_worker = source["queue"] in lane_arns
                bucket_dispatcher = source["queue"] == dispatch_queue_arn
                pollers = self.pollers.setdefault(fn.logical_id, [])
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
                            log=self._logs.open(name),
                            queue_url=deployment.queue_url(str(source["queue"])),
                            batch_size=int(source["batch_size"]),
                            announce=self.on_event,
                            on_batch=on_dispatch_batch if bucket_dispatcher else None,
                            stopping=self._stop,
                        )
                    )
                if shard_worker:
                    self.workers = pollers[first:]
                if lane_worker:
                    self.lane_workers += pollers[first:]
        if TICK_EVENT not in self.scheduled:
            raise RuntimeError_(f"the template has no Schedule event named {TICK_EVENT!r}")

    def start(self) -> None:
        """Start every process side by side (a Lambda cold start each)."""

        def start(process: FunctionProcess) -> None:
            try:
                process.start()
            except RuntimeError_:
                if not self._stop.is_set():  # (a start the stop cut short is no failure)
                    raise

        starters = [
            threading.Thread(target=start, args=(p,), daemon=True) for p in self.all_processes()
        ]
        self._starters += starters  # a stop while they run waits for them as for replacements
        for t in starters:
            t.start()
        for t in starters:
            t.join()

    def watch(self) -> None:
        """Enforce timeouts and replace dead processes from now until `stopping` is set."""
        self._thread = threading.Thread(target=self._supervise, name="supervisor", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Once `stopping` is set: end the supervision, wait for the replacements under way,
        let pollers finish their batch and stop every process."""
        if self._thread is not None:
            self._thread.join(5)
        # Replacements being started get one shared deadline, not one each: a start that is
        # still under way is stopped with the rest (its process is among them once spawned).
        deadline = time.monotonic() + 10
        for thread in self._starters:
            thread.join(max(0.0, deadline - time.monotonic()))
        stopped: set[int] = set()
        for _ in range(3):  # again for an environment a late delivery or start spawned
            processes = [p for p in self.all_processes() if id(p) not in stopped and p.alive]
            if not processes:
                break
            stoppers = [threading.Thread(target=p.stop) for p in processes]
            for t in stoppers:
                t.start()
            for t in stoppers:
                t.join()
            stopped.update(id(p) for p in processes)

    # -- what the runtime shows and does ------------------------------------------------------

    def all_processes(self) -> list[FunctionProcess]:
        pools = {id(pool): pool for pool in self.scheduled.values()}
        hosts = [h for pool in pools.values() for h in list(pool.hosts)]
        pollers = [p for group in self.pollers.values() for p in group]
        return [*hosts, *pollers]

    def describe(self) -> list[dict[str, Any]]:
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
            for p in self.all_processes()
        ]

    def pollers_of(self, queue_url: str) -> list[FunctionProcess]:
        return [p for group in self.pollers.values() for p in group if p.queue_url == queue_url]

    @contextlib.contextmanager
    def workers_paused(self, timeout: float = 120) -> Iterator[None]:
        """Every shard queue's event sources disabled while the block runs: batches in hand
        finish first, then nothing is received (the messages wait in the queue)."""
        workers = [*self.workers, *self.lane_workers]
        for worker in workers:
            worker.set_paused(True)
        try:
            if not wait_until(
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
        """SIGKILL shard worker `index` (a real process death); it is replaced."""
        worker = self.workers[index]
        worker.kill()
        self.kills += 1
        return worker

    # -- the supervision thread ---------------------------------------------------------------

    def _restart_dead_environments(self) -> None:
        """Start again the idle dispatcher/sweeper environments whose process died, as Lambda
        replaces a lost execution environment (a delivery would start it anyway)."""
        pools = {id(pool): pool for pool in self.scheduled.values()}
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
            for worker in [p for group in self.pollers.values() for p in group]:
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
                    if not worker.died or id(worker) in starting or self._stop.is_set():
                        continue
                    starting.add(id(worker))
                thread = threading.Thread(target=replace, args=(worker,), daemon=True)
                thread.start()
                self._starters = [t for t in self._starters if t.is_alive()] + [thread]
