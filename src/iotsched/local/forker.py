"""Function hosts forked from one warm interpreter (`spawn_host`), instead of an interpreter each.

A host process spends most of its start importing boto3, botocore, pydantic and Powertools:
about a CPU-second each, and the local runtime starts one per warm Lambda container (and again
for every one killed or timed out). One forker process per runtime process imports those
libraries once and forks each host from itself: the host is still a process of its own, with
its own pid (signals and SIGKILL reach it alone), environment, stdin, stdout and log, and it
imports the function's own code after the fork, under the function's environment, as a fresh
interpreter would. Only libraries are preloaded: nothing that reads the environment or opens a
connection at import.

The forker is single-threaded (a fork copies only the calling thread, so no lock is left held
in a child). The runtime asks it over a Unix socket, passing the host's three descriptors; the
forker answers with the pid and, when the host ends, its exit status. `ForkedHost` gives the
runtime the part of `subprocess.Popen` it uses. Where the forker cannot start or answer, the
host is spawned as an interpreter of its own (`subprocess.Popen`).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import io
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import IO, Any

#: Libraries every function host imports, loaded once in the forker.
PRELOAD = (
    "boto3",
    "botocore.session",
    "botocore.client",
    "pydantic",
    "aws_lambda_powertools",
    "aws_lambda_powertools.logging",
    "aws_lambda_powertools.metrics",
    "aws_lambda_powertools.utilities.batch",
    "click",
)
#: Set to 0 to spawn each host as an interpreter of its own.
ENV_SWITCH = "IOTSCHED_LOCAL_FORK"


class ForkedHost:
    """A host forked by the forker: what the runtime uses of `subprocess.Popen`."""

    def __init__(self, pid: int, stdin: IO[bytes], stdout: IO[bytes]) -> None:
        self.pid = pid
        self.stdin: IO[bytes] | None = stdin
        self.stdout: IO[bytes] | None = stdout
        self.returncode: int | None = None
        self._ended = threading.Event()

    def _end(self, status: int) -> None:
        self.returncode = status
        self._ended.set()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._ended.wait(timeout):
            raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        # Never once it ended: the forker has reaped it, and its pid may be another's now.
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


class _Forker:
    """The runtime side of the forker process."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "iotsched.local.forker", str(theirs.fileno())],
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
        )
        theirs.close()
        self._sock = ours
        self._lock = threading.Lock()  # one request at a time on the socket
        self._hosts: dict[int, ForkedHost] = {}
        self._ended: dict[int, int] = {}  # hosts that ended before their spawn returned
        self._pids: list[int] = []
        self._pid_ready = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True, name="forker")
        self._reader.start()

    def _read(self) -> None:
        buffer = b""
        while True:
            try:
                chunk = self._sock.recv(65536)
            except OSError:
                chunk = b""
            if not chunk:
                break
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                message = json.loads(line)
                with self._pid_ready:
                    if "pid" in message:
                        self._pids.append(message["pid"])
                        self._pid_ready.notify_all()
                    elif "ended" in message:
                        host = self._hosts.pop(message["ended"], None)
                        if host is not None:
                            host._end(message["status"])
                        else:
                            self._ended[message["ended"]] = message["status"]
        # The forker is gone: its hosts are orphans now, and their ends unknown to it.
        with self._pid_ready:
            for host in self._hosts.values():
                host._end(-1)
            self._hosts.clear()
            self._pid_ready.notify_all()

    @property
    def alive(self) -> bool:
        return self._proc.poll() is None and self._reader.is_alive()

    def spawn(self, argv: list[str], env: dict[str, str], log: IO[bytes]) -> ForkedHost:
        stdin_r, stdin_w = os.pipe()
        stdout_r, stdout_w = os.pipe()
        request = json.dumps({"argv": argv, "env": env}).encode() + b"\n"
        try:
            with self._lock:
                with self._pid_ready:
                    before = len(self._pids)
                socket.send_fds(self._sock, [request], [stdin_r, stdout_w, log.fileno()])
                deadline = time.monotonic() + 30
                with self._pid_ready:
                    while len(self._pids) == before:
                        if not self._reader.is_alive() or time.monotonic() > deadline:
                            raise OSError("the host forker did not answer")
                        self._pid_ready.wait(0.5)
                    pid = self._pids.pop()
                    host = ForkedHost(pid, os.fdopen(stdin_w, "wb"), os.fdopen(stdout_r, "rb"))
                    if pid in self._ended:
                        host._end(self._ended.pop(pid))
                    else:
                        self._hosts[pid] = host
        except BaseException:
            for fd in (stdin_w, stdout_r):
                with contextlib.suppress(OSError):
                    os.close(fd)
            raise
        finally:
            os.close(stdin_r)
            os.close(stdout_w)
        return host

    def stop(self) -> None:
        # A shutdown, not only a close: the reader thread's recv holds the socket open, and
        # the forker would hear its end only when this process exits.
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._sock.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(5)
        if self._proc.poll() is None:
            self._proc.kill()


_forker: _Forker | None = None
_forker_lock = threading.Lock()


def spawn_host(
    argv: list[str], env: dict[str, str], log: IO[bytes]
) -> ForkedHost | subprocess.Popen[bytes]:
    """A function host (`python -m iotsched.local.host` with `argv`), forked from the warm
    forker, or spawned as an interpreter of its own where the forker is off or failed."""
    global _forker
    if os.environ.get(ENV_SWITCH, "1") != "0":
        with _forker_lock:
            if _forker is None or not _forker.alive:
                with contextlib.suppress(OSError):
                    _forker = _Forker()
                    atexit.register(_forker.stop)
            forker = _forker
        if forker is not None:
            with contextlib.suppress(OSError):
                return forker.spawn(argv, env, log)
    command = [sys.executable, "-m", "iotsched.local.host", *argv]
    return subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, env=env
    )


# -- the forker process ----------------------------------------------------------------------


def _serve(sock: socket.socket) -> None:
    # A terminal's Ctrl-C reaches the whole process group: the runtime stops its hosts itself.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for name in PRELOAD:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    children: set[int] = set()
    sock.settimeout(0.2)
    buffer = b""
    while True:
        _reap(sock, children)
        try:
            data, fds, _flags, _addr = socket.recv_fds(sock, 1 << 20, 3)
        except TimeoutError:
            continue
        except OSError:
            data, fds = b"", []
        if not data:
            break  # the runtime closed its end: stop forking (hosts live on until stopped)
        buffer += data
        line, _, buffer = buffer.partition(b"\n")
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(sock, request, fds)  # never returns
        for fd in fds:
            os.close(fd)
        children.add(pid)
        sock.sendall(json.dumps({"pid": pid}).encode() + b"\n")
    # Report the ends of the hosts still running, while the runtime listens.
    deadline = time.monotonic() + 1
    while children and time.monotonic() < deadline:
        _reap(sock, children)
        time.sleep(0.05)


def _reap(sock: socket.socket, children: set[int]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            children.clear()
            return
        if pid == 0:
            return
        children.discard(pid)
        code = os.waitstatus_to_exitcode(status)
        with contextlib.suppress(OSError):
            sock.sendall(json.dumps({"ended": pid, "status": code}).encode() + b"\n")


def _child(sock: socket.socket, request: dict[str, Any], fds: list[int]) -> None:
    code = 1
    try:
        sock.close()
        stdin_fd, stdout_fd, log_fd = fds
        os.dup2(stdin_fd, 0)
        os.dup2(stdout_fd, 1)
        os.dup2(log_fd, 2)
        for fd in fds:
            os.close(fd)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2):
            signal.signal(sig, signal.SIG_DFL)
        os.environ.clear()
        os.environ.update(request["env"])
        # What a fresh interpreter takes from its environment at start: PYTHONPATH's entries
        # after the working directory (a project's own handler packages are found there).
        extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        sys.path[1:1] = [p for p in extra if p not in sys.path]
        importlib.invalidate_caches()
        # Unbuffered, as PYTHONUNBUFFERED makes a spawned host's: what it prints (its EMF
        # metrics, its logs) is in its log the moment it is printed.
        sys.stdin = os.fdopen(0, "r", closefd=False)
        sys.stdout = _unbuffered(1, "strict")
        sys.stderr = _unbuffered(2, "backslashreplace")
        sys.argv = ["iotsched.local.host", *request["argv"]]
        from iotsched.local.host import main

        try:
            main(request["argv"])
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _unbuffered(fd: int, errors: str) -> io.TextIOWrapper:
    raw = os.fdopen(fd, "wb", buffering=0, closefd=False)
    return io.TextIOWrapper(raw, encoding="utf-8", errors=errors, write_through=True)


if __name__ == "__main__":
    _serve(socket.socket(fileno=int(sys.argv[1])))
