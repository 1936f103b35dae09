"""The function host's command line: the flags the local runtime spawns it with."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from iotsched.local.host import host


def _host(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "iotsched.local.host", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_help_names_every_flag_the_runtime_passes() -> None:
    shown = _host("--help")
    assert shown.returncode == 0, shown.stderr
    for flag in (
        "--name",
        "--code-dir",
        "--handler",
        "--timeout",
        "--queue-url",
        "--batch-size",
        "--paused",
    ):
        assert flag in shown.stdout


def test_a_bad_flag_is_a_usage_error() -> None:
    refused = _host("--name", "f", "--code-dir", "/nowhere", "--timeout", "3", "--bogus")
    assert refused.returncode == 2
    assert "No such option" in refused.stderr and "--bogus" in refused.stderr
    assert "Traceback" not in refused.stderr
    missing = _host("--name", "f", "--code-dir", "/nowhere")
    assert missing.returncode == 2
    assert "Missing option '--timeout'" in missing.stderr


def test_the_runtime_s_command_lines_parse_to_their_values() -> None:
    # As `FunctionProcess.start` builds them: an invoke host, and a paused queue poller.
    invoke = host.make_context(
        "host",
        ["--name", "Dispatcher-1", "--code-dir", "/code", "--handler", "app.h", "--timeout", "30"],
    )
    assert invoke.params == {
        "name": "Dispatcher-1",
        "code_dir": Path("/code"),
        "handler": "app.h",
        "timeout": 30,
        "queue_url": None,
        "batch_size": 10,
        "paused": False,
    }
    poller = host.make_context(
        "host",
        [
            "--name",
            "Worker-2",
            "--code-dir",
            "/code",
            "--handler",
            "app.lambda_handler",
            "--timeout",
            "300",
            "--queue-url",
            "http://localhost:5000/123456789012/shards",
            "--batch-size",
            "1",
            "--paused",
        ],
    )
    assert poller.params["queue_url"] == "http://localhost:5000/123456789012/shards"
    assert (poller.params["batch_size"], poller.params["paused"]) == (1, True)
