"""Function hosts forked from the warm forker (`iotsched.local.forker`) behave as spawned ones:
their own pid, environment, sys.path (PYTHONPATH), stdin and stdout; output in their log as it
is printed; an exit status the runtime reads; SIGKILL a real death."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from iotsched.local.forker import ForkedHost, spawn_host

HANDLER = """
import os, sys
import shared_helper


def handler(event, context):
    print("printed " + event["say"])  # the host sends print() to its log
    return {
        "pid": os.getpid(),
        "flavour": os.environ.get("FLAVOUR"),
        "helper": shared_helper.NAME,
    }
"""


@pytest.mark.timeout(60)
def test_a_forked_host_runs_in_its_own_process_environment_and_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("IOTSCHED_LOCAL_FORK", raising=False)
    code = tmp_path / "code"
    code.mkdir()
    (code / "app.py").write_text(HANDLER)
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "shared_helper.py").write_text('NAME = "from PYTHONPATH"\n')
    env = {**os.environ, "FLAVOUR": "lime", "PYTHONPATH": str(extra)}
    argv = ["--name", "H", "--code-dir", str(code), "--handler", "app.handler", "--timeout", "5"]
    with (tmp_path / "host.log").open("wb") as log:
        host = spawn_host(argv, env, log)
        assert isinstance(host, ForkedHost)
        assert host.stdin is not None and host.stdout is not None
        assert json.loads(host.stdout.readline()) == {"state": "ready"}
        host.stdin.write(b'{"id": 1, "event": {"say": "hello"}}\n')
        host.stdin.flush()
        answer = json.loads(host.stdout.readline())
        assert answer["id"] == 1
        assert answer["result"] == {
            "pid": host.pid,
            "flavour": "lime",
            "helper": "from PYTHONPATH",
        }
        assert host.pid != os.getpid() and "FLAVOUR" not in os.environ
        assert "printed hello" in (tmp_path / "host.log").read_text()  # before the host ends
        assert host.poll() is None
        host.kill()
        assert host.wait(10) == -signal.SIGKILL
        host.send_signal(signal.SIGTERM)  # after its end: never sent (its pid may be reused)


@pytest.mark.timeout(60)
def test_with_the_forker_off_a_host_is_an_interpreter_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IOTSCHED_LOCAL_FORK", "0")
    code = tmp_path / "code"
    code.mkdir()
    (code / "app.py").write_text("def handler(event, context):\n    return 1\n")
    argv = ["--name", "H", "--code-dir", str(code), "--handler", "app.handler", "--timeout", "5"]
    with (tmp_path / "host.log").open("wb") as log:
        host = spawn_host(argv, dict(os.environ), log)
        assert not isinstance(host, ForkedHost)
        assert host.stdout is not None and host.stdin is not None
        assert json.loads(host.stdout.readline()) == {"state": "ready"}
        host.stdin.close()  # an invoke-mode host ends when its stdin closes
        deadline = time.monotonic() + 10
        while host.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert host.poll() == 0
