"""The local runtime's execution environments: one host process per warm Lambda container.

`FunctionProcess` runs one function's handler in a child process (`iotsched.local.host`), as an
invoke-mode host or as the poller of an SQS event source; `FunctionPool` scales the
environments of an invoke-mode function as Lambda does.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import IO, Any

from iotsched.local.forker import ForkedHost, spawn_host
from iotsched.local.host import STOP_GRACE_S
from iotsched.local.template import Function


class RuntimeError_(Exception):
    """The local runtime could not start or lost a function host."""


class InvocationError(RuntimeError_):
    """An invocation failed, timed out or lost its process; `invocation` says where and when."""

    def __init__(self, message: str, invocation: Invocation) -> None:
        super().__init__(message)
        self.invocation = invocation


@dataclass
class FunctionProcess:
    """One function host process (a warm Lambda container) and what it reports."""

    name: str
    fn: Function
    env: dict[str, str]
    log: IO[bytes]
    queue_url: str | None = None
    batch_size: int = 10
    announce: Callable[[str], None] | None = None  # told when a process replaces a dead one
    #: Told of each batch a poller ended (its idle line), or lost (`{"died": [message ids]}`).
    on_batch: Callable[[dict[str, Any]], None] | None = None
    paused: bool = False  # an SQS poller whose event source is disabled
    #: The runtime's stop: a start under way stops waiting for the process when it is set.
    stopping: threading.Event | None = None
    generation: int = 0
    proc: subprocess.Popen[bytes] | ForkedHost | None = None
    state: str = "starting"
    busy_since: float | None = None
    messages: list[str] = field(default_factory=list)
    batches: int = 0
    _responses: dict[int, dict[str, Any]] = field(default_factory=dict)
    _cond: threading.Condition = field(default_factory=threading.Condition)
    _ids: itertools.count[int] = field(default_factory=itertools.count)
    _invoke_lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        """Spawn the process and wait until its handler module is imported."""
        previous = self.proc.pid if self.proc is not None else None
        self.generation += 1
        env = {**self.env, "AWS_LAMBDA_LOG_STREAM_NAME": f"{self.name}#{self.generation}"}
        cmd = [
            sys.executable,
            "-m",
            "iotsched.local.host",
            "--name",
            self.name,
            "--code-dir",
            str(self.fn.code_dir),
            "--handler",
            self.fn.handler,
            "--timeout",
            str(self.fn.timeout_s),
        ]
        with self._cond:  # `set_paused` sees either the old process or this one starting
            started_paused = self.paused
            if self.queue_url:
                cmd += ["--queue-url", self.queue_url, "--batch-size", str(self.batch_size)]
                if started_paused:
                    cmd.append("--paused")
            self.state = "starting"
            self.busy_since = None
            self.proc = spawn_host(cmd[3:], env, self.log)
        threading.Thread(target=self._read, args=(self.proc,), daemon=True).start()
        deadline = time.monotonic() + 60
        with self._cond:
            while self.state == "starting":
                if self.stopping is not None and self.stopping.is_set():
                    raise RuntimeError_(f"{self.name}: the runtime stopped while it started")
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError_(f"{self.name} did not start; see {self.log.name}")
                self._cond.wait(0.1)
            if self.queue_url and self.paused != started_paused:
                # The switch moved while the process started: it can take a signal now.
                self._signal_switch()
        if previous is not None and self.announce is not None:
            self.announce(
                f"{self.name} (pid {previous}) ended; a new environment started: pid "
                f"{self.proc.pid}, log stream {self.name}#{self.generation}"
            )

    def set_paused(self, paused: bool) -> None:
        """Disable (True) or enable (False) a poller's event source, now or as it starts.

        A process still starting has no handler for the switch's signals yet (their default
        action would kill it): `start` passes the switch to it once it has reported in.
        """
        with self._cond:
            self.paused = paused
            if self.state != "starting" and self.alive:
                self._signal_switch()

    def _signal_switch(self) -> None:
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGUSR1 if self.paused else signal.SIGUSR2)

    @property
    def pid(self) -> int | None:
        """The current process's id (None before the first start)."""
        return self.proc.pid if self.proc is not None else None

    def _read(self, proc: subprocess.Popen[bytes] | ForkedHost) -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            try:
                line = json.loads(raw)
            except ValueError:
                continue
            with self._cond:
                if proc is not self.proc:
                    return
                if "id" in line:
                    self._responses[line["id"]] = line
                elif line.get("state") == "busy":
                    self.state, self.busy_since = "busy", time.monotonic()
                    self.messages = list(line.get("messages", []))
                elif line.get("state") in ("idle", "ready", "stopped", "paused"):
                    if line["state"] == "idle":
                        self.batches += 1
                        if self.on_batch is not None:
                            self.on_batch(line)
                    self.state, self.busy_since, self.messages = line["state"], None, []
                self._cond.notify_all()
        with self._cond:
            if proc is self.proc:
                if self.state == "busy" and self.messages and self.on_batch is not None:
                    self.on_batch({"died": list(self.messages)})
                # A host that said it stopped was asked to (SIGTERM, or a terminal's Ctrl-C
                # reaching the whole process group): not a death to replace.
                self.state = "stopped" if self.state == "stopped" else "dead"
                self._cond.notify_all()

    @property
    def alive(self) -> bool:
        """True while the process runs."""
        return self.proc is not None and self.proc.poll() is None

    @property
    def died(self) -> bool:
        """True if the process ended without having been asked to stop (a death to replace)."""
        return self.proc is not None and not self.alive and self.state != "stopped"

    def invoke(self, event: Mapping[str, Any]) -> Any:
        """Synchronous invocation (invoke mode), bounded by the function timeout."""
        with self._invoke_lock:
            assert self.proc is not None and self.proc.stdin is not None
            request_id = next(self._ids)
            self.proc.stdin.write((json.dumps({"id": request_id, "event": event}) + "\n").encode())
            self.proc.stdin.flush()
            deadline = time.monotonic() + self.fn.timeout_s
            with self._cond:
                while request_id not in self._responses:
                    if time.monotonic() > deadline or not self.alive:
                        break
                    self._cond.wait(0.1)
                response = self._responses.pop(request_id, None)
            if response is None:
                died = not self.alive
                self.kill()  # function timeout: Lambda kills the sandbox
                self.start()  # the next invocation gets a new execution environment
                if died:
                    raise RuntimeError_(f"{self.name} died during the invocation")
                raise RuntimeError_(f"{self.name} timed out after {self.fn.timeout_s}s")
            if "error" in response:
                raise RuntimeError_(f"{self.name} failed: {response['error']}")
            return response.get("result")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Send `sig` (default SIGKILL: a real death, nothing cleaned up)."""
        if self.proc is not None and self.alive:
            self.proc.send_signal(sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(10)

    def stop(self) -> None:
        """Ask the host to finish its batch and exit; kill it if it does not within
        `STOP_GRACE_S`: the emulator stops right after, so a longer batch could not write its
        results anyway."""
        if self.proc is None or not self.alive:
            return
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(min(self.fn.timeout_s + 5, STOP_GRACE_S))
        except subprocess.TimeoutExpired:
            self.kill()


@dataclass(frozen=True)
class Invocation:
    """One invocation of an invoke-mode function: which process ran it, and when (epoch s)."""

    function: str
    host: str
    pid: int
    started: float
    ended: float
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {
            "function": self.function,
            "host": self.host,
            "pid": self.pid,
            "started": self.started,
            "ended": self.ended,
            "error": self.error,
        }


class FunctionPool:
    """The execution environments of one invoke-mode function, scaled as Lambda scales them.

    Each environment is a host process that runs one invocation at a time. A delivery takes an
    idle environment; when every one is busy it gets a new one (a cold start), up to `limit`
    concurrent environments, beyond which it waits for one to free (Lambda throttles; the
    schedule's retry delivers it later). Environments stay warm once started. One that died
    (killed, or timed out) is started again before it serves another delivery: a new
    environment under the same name.
    """

    def __init__(
        self,
        fn: Function,
        env: dict[str, str],
        log: Callable[[str], IO[bytes]],
        *,
        warm: int,
        limit: int,
        announce: Callable[[str], None] | None = None,
        stopping: threading.Event | None = None,
    ) -> None:
        self.fn = fn
        self.limit = max(1, limit, warm)
        self._env = env
        self._log = log
        self._announce = announce
        self._stopping = stopping
        self._cond = threading.Condition()
        self._busy: set[int] = set()
        self.hosts: list[FunctionProcess] = []
        for _ in range(max(1, warm)):
            self.hosts.append(self._new())

    def _new(self) -> FunctionProcess:
        name = f"{self.fn.logical_id}-{len(self.hosts) + 1}"
        return FunctionProcess(
            name=name,
            fn=self.fn,
            env=self._env,
            log=self._log(name),
            announce=self._announce,
            stopping=self._stopping,
        )

    def invoke(self, event: Mapping[str, Any]) -> tuple[Any, Invocation]:
        """Run one invocation on an environment of its own; returns (result, invocation).

        Raises InvocationError when the function failed, timed out or its process died.
        """
        host = self._acquire()
        pid = host.proc.pid if host.proc is not None else 0
        started = time.time()
        try:
            result = host.invoke(event)
        except RuntimeError_ as exc:
            invocation = Invocation(
                self.fn.logical_id, host.name, pid, started, time.time(), str(exc)
            )
            raise InvocationError(str(exc), invocation) from exc
        finally:
            self._release(host)
        return result, Invocation(self.fn.logical_id, host.name, pid, started, time.time())

    def _acquire(self) -> FunctionProcess:
        with self._cond:
            while True:
                host = next((h for h in self.hosts if id(h) not in self._busy), None)
                if host is None and len(self.hosts) < self.limit:
                    host = self._new()
                    self.hosts.append(host)
                if host is not None:
                    self._busy.add(id(host))
                    break
                self._cond.wait()
        if not host.alive:
            try:
                host.start()  # a cold start: a new environment, or one that died replaced
            except RuntimeError_:
                self._release(host)
                raise
        return host

    def _release(self, host: FunctionProcess) -> None:
        with self._cond:
            self._busy.discard(id(host))
            self._cond.notify()

    def take_dead(self) -> list[FunctionProcess]:
        """The idle environments whose process died, now reserved for the caller to start
        again and give back with `give_back`."""
        with self._cond:
            dead = [h for h in self.hosts if id(h) not in self._busy and h.died]
            self._busy.update(id(h) for h in dead)
        return dead

    def give_back(self, host: FunctionProcess) -> None:
        """Return an environment `take_dead` reserved."""
        self._release(host)
