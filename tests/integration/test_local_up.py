"""`iotsched local up` as operators run it: a process, reached by endpoint, stopped by a signal."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import free_port, local_up_argv, local_up_env, wait_for_instances

pytestmark = [pytest.mark.slow, pytest.mark.moto]

ROOT = Path(__file__).resolve().parents[2]


def _iotsched(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "iotsched.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
        check=False,
    )


def test_local_up_serves_the_cli_and_stops_cleanly_on_sigint(tmp_path: Path) -> None:
    port, api_port = free_port(), free_port()
    env = local_up_env()
    proc = subprocess.Popen(
        local_up_argv(aws_port=port, port=api_port, clock=("--speed", "60")),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=ROOT,
    )
    try:
        assert proc.stdout is not None
        banner = ""
        deadline = time.monotonic() + 120
        while "Ctrl-C" not in banner and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            banner += line
        assert f"http://127.0.0.1:{port}" in banner, banner
        # another process reaches it by endpoint
        client_env = {**env, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}"}
        tasks = tmp_path / "tasks.yaml"
        tasks.write_text(
            "tasks:\n  - id: every-minute\n    handler: noop\n    trigger: {rate: 1m}\n    timeout_s: 5\n"
        )
        applied = _iotsched("tasks", "apply", str(tasks), "--json", env=client_env)
        assert applied.returncode == 0, applied.stderr
        assert json.loads(applied.stdout)["created"] == ["every-minute"]
        # at 60x a minute passes every second: instances appear and succeed
        wait_for_instances(
            f"http://127.0.0.1:{api_port}",
            "every-minute",
            lambda seen: any(i["status"] == "succeeded" for i in seen),
        )
        listed = _iotsched("instances", "every-minute", "--json", env=client_env)
        assert listed.returncode == 0, listed.stderr
        seen = json.loads(listed.stdout)
        assert any(i["status"] == "succeeded" for i in seen), seen
        shards = _iotsched("shards", seen[-1]["instance_id"], "--json", env=client_env)
        assert shards.returncode == 0, shards.stderr
        assert len(json.loads(shards.stdout)["shards"]) == 1
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            # The stop is bounded (each host gets iotsched.local.host.STOP_GRACE_S, replacements
            # being started one shared deadline); this only catches a stop that hangs.
            out, _ = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
            pytest.fail(f"local up did not stop within 120 s of the signal; it printed:\n{out}")
    assert proc.returncode == 0, out
    assert "stopped" in out
    assert "Traceback" not in out


def test_manual_clock_runtime_takes_ticks_from_the_cli_and_stops_cleanly_on_sigterm(
    tmp_path: Path,
) -> None:
    aws_port, control_port = free_port(), free_port()
    env = local_up_env()
    proc = subprocess.Popen(
        local_up_argv(aws_port=aws_port, port=control_port, clock=("--manual-clock",)),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=ROOT,
    )
    try:
        assert proc.stdout is not None
        banner = ""
        deadline = time.monotonic() + 120
        while "Ctrl-C" not in banner and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            banner += line
        assert "manual" in banner, banner
        client_env = {**env, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{aws_port}"}
        tasks = tmp_path / "tasks.yaml"
        tasks.write_text(
            "tasks:\n  - id: hourly\n    handler: noop\n    trigger: {rate: 1h}\n    timeout_s: 5\n"
        )
        assert _iotsched("tasks", "apply", str(tasks), env=client_env).returncode == 0
        # the apply used the wall clock: the next whole hour is due at the next hour's tick
        listed = json.loads(_iotsched("tasks", "list", "--json", env=client_env).stdout)
        due = listed[0]["next_fire"]
        ticked = _iotsched(
            "local",
            "tick",
            "--at",
            due,
            "--repeat",
            "3",
            "--port",
            str(control_port),
            "--json",
            env=client_env,
        )
        assert ticked.returncode == 0, ticked.stderr
        reports = [r["report"] for r in json.loads(ticked.stdout)]
        assert len(reports) == 3
        assert sum(len(r["claimed"]) for r in reports) == 1
        wait_for_instances(
            f"http://127.0.0.1:{control_port}",
            "hourly",
            lambda seen: bool(seen) and seen[0]["status"] == "succeeded",
        )
        seen = json.loads(_iotsched("instances", "hourly", "--json", env=client_env).stdout)
        assert [i["status"] for i in seen] == ["succeeded"]
        bad = _iotsched("local", "tick", "--at", "not-a-time", "--port", str(control_port), env=env)
        assert bad.returncode == 2
    finally:
        proc.send_signal(signal.SIGTERM)  # (SIGINT: the test above)
        out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    assert "stopped" in out
    assert "Traceback" not in out
    # and with no runtime listening, a clear one-line error
    gone = _iotsched("local", "tick", "--port", str(control_port), env=env)
    assert gone.returncode == 1
    assert "no local runtime" in gone.stderr
