"""`iotsched local up` runs its functions as Lambda does: concurrent deliveries are concurrent
invocations on separate processes, the sweeper can be delivered by hand on a manual clock, and
the banner names every process so that one can be killed on purpose."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from iotsched.core.timeutil import parse_iso
from tests.support import free_port, local_up_argv, local_up_env

pytestmark = [pytest.mark.slow, pytest.mark.moto]

ROOT = Path(__file__).resolve().parents[2]

#: How long a step may go without progress before the test gives up (not how long it takes).
STALL_S = 120


class LocalUp:
    """A `local up --manual-clock` process whose output is read as it comes."""

    def __init__(self, tmp_path: Path) -> None:
        self.aws_port, self.port = free_port(), free_port()
        self.env = local_up_env()
        self.client_env = {**self.env, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{self.aws_port}"}
        self.tmp_path = tmp_path
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self.proc = subprocess.Popen(
            local_up_argv(aws_port=self.aws_port, port=self.port, clock=("--manual-clock",)),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=self.env,
            cwd=ROOT,
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cond:
                self.lines.append(line)
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def wait_for_line(self, pattern: str) -> re.Match[str]:
        """The first output line matching `pattern`, waiting while the process lives."""
        deadline = time.monotonic() + STALL_S
        with self._cond:
            while True:
                for line in self.lines:
                    if found := re.search(pattern, line):
                        return found
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"no line matching {pattern!r} in:\n{''.join(self.lines)}")
                self._cond.wait(0.5)

    def banner(self) -> str:
        self.wait_for_line("Ctrl-C")
        with self._cond:
            return "".join(self.lines)

    def pids(self) -> dict[str, int]:
        """Process name -> pid, as the banner prints them."""
        return {
            name: int(pid) for name, pid in re.findall(r"process (\S+): pid (\d+)", self.banner())
        }

    def iotsched(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "iotsched.cli", *args],
            capture_output=True,
            text=True,
            env=self.client_env,
            cwd=ROOT,
            timeout=STALL_S,
            check=False,
        )

    def apply(self, text: str) -> None:
        tasks = self.tmp_path / "tasks.yaml"
        tasks.write_text(text)
        applied = self.iotsched("tasks", "apply", str(tasks))
        assert applied.returncode == 0, applied.stderr

    def status(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/_local/status", timeout=30) as r:
            data: dict[str, Any] = json.loads(r.read())
            return data

    def stop(self) -> str:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=STALL_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
        with self._cond:
            return "".join(self.lines)


@pytest.fixture(scope="module")
def local_up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalUp]:
    """One runtime for the module: each test applies tasks of its own ids."""
    runtime = LocalUp(tmp_path_factory.mktemp("local-up"))
    try:
        runtime.banner()
        yield runtime
    finally:
        out = runtime.stop()
        assert runtime.proc.returncode == 0, out
        assert "Traceback" not in out, out


def until(predicate: Callable[[], Any], what: str) -> Any:
    """Poll until `predicate` returns something truthy; a generous bound, not a guess."""
    deadline = time.monotonic() + STALL_S
    while time.monotonic() < deadline:
        if found := predicate():
            return found
        time.sleep(0.3)
    raise AssertionError(f"gave up waiting for {what}")


#: A CLI process that imports everything first, then waits for the start signal (a file), so
#: that the calls really arrive together rather than as fast as each interpreter starts.
TICK_AT_SIGNAL = """
import os, sys, time
from iotsched.cli.main import cli
go = sys.argv[1]
while not os.path.exists(go):
    time.sleep(0.01)
cli(sys.argv[2:])
"""


def test_six_concurrent_local_ticks_run_as_concurrent_invocations_and_claim_each_slot_once(
    local_up: LocalUp, tmp_path: Path
) -> None:
    tasks = [f"scan-{n}" for n in range(8)]
    local_up.apply(
        "tasks:\n"
        + "".join(
            f"  - id: {t}\n    handler: noop\n    trigger: {{rate: 1h}}\n    timeout_s: 5\n"
            for t in tasks
        )
    )
    listed = json.loads(local_up.iotsched("tasks", "list", "--json").stdout)
    (due,) = {t["next_fire"] for t in listed if t["id"] in tasks}  # the next whole hour
    go = tmp_path / "go"
    argv = ["local", "tick", "--at", due, "--port", str(local_up.port), "--json"]
    calls = [
        subprocess.Popen(
            [sys.executable, "-c", TICK_AT_SIGNAL, str(go), *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=local_up.client_env,
            cwd=ROOT,
        )
        for _ in range(6)  # the claim race at 20 and more: tests/contract/test_claim_concurrency.py
    ]
    time.sleep(0.5)  # (not a correctness wait: only lets the interpreters reach the signal)
    go.write_text("go")
    results = []
    for call in calls:
        out, err = call.communicate(timeout=STALL_S * 2)
        assert call.returncode == 0, err
        (result,) = json.loads(out)
        results.append(result)

    # every delivery ran as an invocation, on a tick process of its own while it ran
    invocations = [r["invocation"] for r in results]
    assert all(i["error"] is None for i in invocations)
    assert all(i["function"] == "TickFunction" for i in invocations)
    events = sorted(
        [(i["started"], 1) for i in invocations] + [(i["ended"], -1) for i in invocations]
    )
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    assert peak >= 2, invocations  # they overlapped: concurrent invocations
    assert len({(i["host"], i["pid"]) for i in invocations}) >= 2
    for one in invocations:  # and no process ran two at once
        for other in invocations:
            if one is not other and one["pid"] == other["pid"]:
                assert one["ended"] <= other["started"] or other["ended"] <= one["started"]

    # exactly one instance per slot: one claim won, every other delivery found it claimed
    claimed = [i for r in results for i in r["report"]["claimed"]]
    slot = parse_iso(due)
    assert sorted(claimed) == sorted(f"{t}@{slot:%Y-%m-%dT%H:%MZ}" for t in tasks)
    for task in tasks:
        seen = json.loads(local_up.iotsched("instances", task, "--json").stdout)
        assert [i["instance_id"] for i in seen] == [f"{task}@{slot:%Y-%m-%dT%H:%MZ}"]


def test_local_sweep_at_ends_an_instance_past_its_deadline_on_a_manual_clock(
    local_up: LocalUp,
) -> None:
    local_up.apply(
        # (at minute 7: the module's other ticks are at whole hours, and a tick of a minute
        # already ticked is a copy the bucket dispatchers absorb)
        "tasks:\n  - id: slow\n    handler: noop\n    trigger: {cron: '7 * * * *'}\n"
        "    timeout_s: 50\n    instance_timeout_s: 120\n    params: {seconds: 45}\n"
    )
    listed = json.loads(local_up.iotsched("tasks", "list", "--json").stdout)
    (task,) = [t for t in listed if t["id"] == "slow"]
    due = parse_iso(task["next_fire"])
    ticked = local_up.iotsched(
        "local", "tick", "--at", due.isoformat(), "--port", str(local_up.port)
    )
    assert ticked.returncode == 0, ticked.stderr
    instance_id = f"slow@{due:%Y-%m-%dT%H:%MZ}"

    # a sweep at the runtime's own now (the wall clock: before the deadline) ends nothing
    swept = local_up.iotsched("local", "sweep", "--port", str(local_up.port), "--json")
    assert swept.returncode == 0, swept.stderr
    assert instance_id not in json.loads(swept.stdout)["timed_out_instances"]

    # one as of three minutes after the slot (past its 120 s deadline) ends it timed_out
    after = (due + timedelta(minutes=3)).isoformat()
    swept = local_up.iotsched("local", "sweep", "--at", after, "--port", str(local_up.port))
    assert swept.returncode == 0, swept.stderr
    assert "timed out 1 instance(s)" in swept.stdout, swept.stdout

    def status() -> str:
        shown = json.loads(local_up.iotsched("instances", "slow", "--json").stdout)
        return str(shown[0]["status"])

    assert status() == "timed_out"
    bad = local_up.iotsched("local", "sweep", "--at", "yesterday", "--port", str(local_up.port))
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


def test_the_banner_names_every_process_and_a_killed_one_comes_back_as_a_new_environment(
    local_up: LocalUp,
) -> None:
    pids = local_up.pids()
    assert {"DispatcherFunction-1", "DispatcherFunction-2", "WorkerFunction-1"} <= set(pids)
    assert {"WorkerFunction-2", "SweeperFunction-1"} <= set(pids)
    # (and the environments the module's concurrent ticks started beside them)
    assert pids.items() <= {p["name"]: p["pid"] for p in local_up.status()["processes"]}.items()

    for name in ("WorkerFunction-1", "DispatcherFunction-1"):
        old = pids[name]
        os.kill(old, signal.SIGKILL)
        found = local_up.wait_for_line(
            rf"{name} \(pid {old}\) ended; a new environment started: pid (\d+)"
        )
        new = int(found.group(1))
        assert new != old

        def replaced(name: str = name, new: int = new) -> bool:
            (process,) = [p for p in local_up.status()["processes"] if p["name"] == name]
            return bool(process["pid"] == new and process["alive"])

        until(replaced, f"{name} running as pid {new}")

    # the replaced dispatcher still serves ticks
    ticked = local_up.iotsched(
        "local",
        "tick",
        "--at",
        datetime(2026, 1, 1).isoformat() + "Z",
        "--repeat",
        "2",
        "--port",
        str(local_up.port),
    )
    assert ticked.returncode == 0, ticked.stderr
