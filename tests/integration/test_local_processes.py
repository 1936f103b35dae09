"""`iotsched local up`'s processes: a stop asked for while it starts is heard, and a runtime
killed outright (SIGKILL: nothing of it runs to clean up) takes its function processes with it,
so a new runtime on the same ports serves its own work alone.

The processes are read from /proc: each test knows the runtime's whole tree by pid, and ends
what is left of it by those pids only.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

from iotsched.local.supervisor import wait_until
from tests.support import free_port, local_up_argv, local_up_env

pytestmark = [
    pytest.mark.slow,
    pytest.mark.moto,
    pytest.mark.timeout(300),
    pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes in /proc"),
]

ROOT = Path(__file__).resolve().parents[2]
TASKS = """\
tasks:
  - id: job
    handler: noop
    trigger: {rate: 1h}
    blocking: {policy: parallel}
    timeout_s: 5
"""
#: A function whose module takes minutes to import: a start that waits for its environment.
SLOW_IMPORT = """\
import pathlib
import time

pathlib.Path(__file__).with_name("importing").touch()
time.sleep(600)


def lambda_handler(event, context):
    return {"batchItemFailures": []}
"""


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of `pid`, None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None
    return fields[0], int(fields[1])


def _running(pid: int) -> bool:
    """True while `pid` runs (a zombie has ended: only its exit status is left)."""
    stat = _stat(pid)
    return stat is not None and stat[0] not in ("Z", "X")


def _descendants(root: int) -> set[int]:
    """Every process under `root` now, children of children included."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := _stat(int(entry.name))) is not None:
            parents[int(entry.name)] = stat[1]
    found: set[int] = set()
    frontier = {root}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _end(pids: set[int]) -> None:
    """SIGKILL whichever of `pids` still run (what a failed test left behind)."""
    for pid in pids:
        if _running(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _start(argv: list[str], log: IO[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        argv, stdout=log, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT
    )


def _wait_for_banner(proc: subprocess.Popen[str], log: IO[str]) -> str:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        log.seek(0)
        if "Ctrl-C" in (text := log.read()):
            return text
        time.sleep(0.2)
    log.seek(0)
    pytest.fail(f"local up did not come up:\n{log.read()}")


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "iotsched.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
        check=False,
    )


@pytest.fixture
def left_behind() -> Iterator[set[int]]:
    """Pids a test saw; whatever of them still runs at the end is killed."""
    pids: set[int] = set()
    yield pids
    _end(pids)


def test_local_up_on_a_busy_port_says_so_before_it_starts_anything() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = int(taken.getsockname()[1])
        started = time.monotonic()
        done = subprocess.run(
            local_up_argv(aws_port=free_port(), port=busy, clock=("--manual-clock",)),
            capture_output=True,
            text=True,
            env=local_up_env(),
            cwd=ROOT,
            timeout=120,
            check=False,
        )
        took = time.monotonic() - started
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"--port {busy}: port {busy} on 127.0.0.1 is in use" in done.stderr
    assert done.stdout == ""  # nothing was started, so nothing is stopped
    assert took < 15  # an interpreter's start and the CLI's imports, no runtime's


def test_local_up_hears_sigterm_while_it_starts(tmp_path: Path, left_behind: set[int]) -> None:
    # The template's functions as they are, but the dead-letter function's module sleeps at
    # import: its environment never reports in, and the start waits for it.
    slow = tmp_path / "slow"
    slow.mkdir()
    (slow / "app.py").write_text(SLOW_IMPORT)
    text = (ROOT / "template.yaml").read_text()
    text = text.replace("CodeUri: functions/dlq/", f"CodeUri: {slow}/")
    text = text.replace("CodeUri: functions/", f"CodeUri: {ROOT}/functions/")
    template = tmp_path / "template.yaml"
    template.write_text(text)
    argv = local_up_argv(aws_port=free_port(), port=free_port(), clock=("--manual-clock",))
    log = (tmp_path / "local-up.log").open("w+")
    proc = _start([*argv, "--template", str(template)], log, local_up_env())
    try:
        assert wait_until(lambda: (slow / "importing").exists() or proc.poll() is not None, 120)
        assert proc.poll() is None, "local up ended before its start was under way"
        left_behind |= _descendants(proc.pid)
        proc.send_signal(signal.SIGTERM)
        asked = time.monotonic()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            left_behind |= _descendants(proc.pid)
            pytest.fail("local up did not stop within 30 s of SIGTERM while it was starting")
        stopped_in = time.monotonic() - asked
        left_behind |= _descendants(proc.pid)
        assert wait_until(lambda: not any(_running(p) for p in left_behind), 20), sorted(
            p for p in left_behind if _running(p)
        )
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.seek(0)
        output = log.read()
    assert proc.returncode == 0, output
    assert "stopped" in output, output
    assert "Traceback" not in output, output
    assert stopped_in < 30


def test_a_killed_local_up_takes_its_processes_with_it_and_its_successor_runs_everything(
    tmp_path: Path, left_behind: set[int]
) -> None:
    aws_port, port = free_port(), free_port()
    argv = local_up_argv(aws_port=aws_port, port=port, clock=("--manual-clock",))
    env = local_up_env()
    first_log = (tmp_path / "first.log").open("w+")
    first = _start(argv, first_log, env)
    try:
        _wait_for_banner(first, first_log)
        tree = _descendants(first.pid)
        left_behind |= tree
        assert len(tree) >= 10, tree  # the forker and a process per warm environment
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
        ended = wait_until(lambda: not any(_running(p) for p in tree), 20)
        still = sorted(p for p in tree if _running(p))
        assert ended, f"processes of the killed runtime still run: {still}"
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()

    # A new runtime on the same ports: its queues, its table, and nobody else's pollers.
    second_log = (tmp_path / "second.log").open("w+")
    second = _start(argv, second_log, env)
    client_env = {**env, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{aws_port}"}
    try:
        _wait_for_banner(second, second_log)
        left_behind |= _descendants(second.pid)
        tasks = tmp_path / "tasks.yaml"
        tasks.write_text(TASKS)
        applied = _cli(client_env, "tasks", "apply", str(tasks))
        assert applied.returncode == 0, applied.stderr
        for n in range(3):
            ran = _cli(client_env, "run", "job", "--request-id", f"run-{n}")
            assert ran.returncode == 0, ran.stderr

        def statuses() -> list[str]:
            listed = _cli(client_env, "instances", "job", "--json")
            assert listed.returncode == 0, listed.stderr
            return sorted(i["status"] for i in json.loads(listed.stdout))

        wait_until(lambda: statuses() == ["succeeded"] * 3, 90, poll=2)
        assert statuses() == ["succeeded"] * 3
    finally:
        left_behind |= _descendants(second.pid)
        second.send_signal(signal.SIGINT)
        try:
            second.wait(timeout=60)
        except subprocess.TimeoutExpired:
            second.kill()
            second.wait()
        second_log.seek(0)
        output = second_log.read()
    assert second.returncode == 0, output
    assert "Traceback" not in output, output
