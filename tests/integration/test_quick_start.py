"""The README's quick start, run as written: its `<!-- quick-start -->` block, line by line,
through the installed `iotsched` in subprocesses, with an empty HOME and no AWS variable but
the endpoint the block exports.

Each line is one of: activating the venv (its bin goes first on PATH), `iotsched local up`
(started like a second terminal, until its banner), `export NAME=VALUE`, a `cat > FILE <<'EOF'`
heredoc, or an `iotsched` command (must exit 0). Any other line fails the test, so the block
cannot grow a step this test skips. The only liberty taken: the emulator and control ports are
free ones instead of 5000 and 8000 (other runs share the machine).
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import free_port

pytestmark = [pytest.mark.slow, pytest.mark.moto]

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
BIN = Path(sys.executable).parent


def quick_start() -> list[str]:
    block = re.search(r"<!-- quick-start -->\s*```sh\n(.*?)```", README.read_text(), re.S)
    assert block, "the README lost its quick-start block"
    return block.group(1).splitlines()


def test_the_readme_quick_start_runs_as_written(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    work = tmp_path / "work"  # where the block's files go; `local up` runs in the repository
    work.mkdir()
    aws_port, control_port = free_port(), free_port()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8", "COLUMNS": "200"}
    lines = iter(quick_start())
    runtime: subprocess.Popen[str] | None = None
    banner = ""
    outputs: dict[str, str] = {}
    try:
        for line in lines:
            words = shlex.split(line, comments=True)
            if not words:
                continue
            if words[:2] == [".", ".venv/bin/activate"]:
                assert (ROOT / ".venv" / "bin" / "activate").is_file()
                env["PATH"] = f"{BIN}{os.pathsep}{env['PATH']}"
            elif words[:3] == ["iotsched", "local", "up"]:
                argv = [*words, "--aws-port", str(aws_port), "--port", str(control_port)]
                runtime = subprocess.Popen(
                    argv,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    env=env,
                    cwd=ROOT,
                )
                assert runtime.stdout is not None
                deadline = time.monotonic() + 180
                while "Ctrl-C" not in banner and time.monotonic() < deadline:
                    read = runtime.stdout.readline()
                    if not read:
                        break
                    banner += read
                assert "Ctrl-C" in banner, banner
            elif words[0] == "export":
                name, _, value = words[1].partition("=")
                value = value.replace("127.0.0.1:5000", f"127.0.0.1:{aws_port}")
                if name == "AWS_ENDPOINT_URL":
                    assert f"export AWS_ENDPOINT_URL={value}" in banner, banner
                env[name] = value
            elif words[:2] == ["cat", ">"] and words[3:] == ["<<EOF"]:
                body = []
                for text in lines:
                    if text == "EOF":
                        break
                    body.append(text)
                (work / words[2]).write_text("\n".join(body) + "\n")
            elif words[0] == "iotsched":
                result = subprocess.run(
                    words, capture_output=True, text=True, env=env, cwd=work, timeout=120
                )
                assert result.returncode == 0, (line, result.stdout, result.stderr)
                outputs[" ".join(words[1:])] = result.stdout
            else:
                pytest.fail(f"the quick start has a line this test cannot run: {line!r}")
        assert runtime is not None, "the quick start starts no local runtime"
        assert set(outputs) >= {"tasks apply tasks.yaml", "tasks list", "instances"}
        assert "created: device-scan" in outputs["tasks apply tasks.yaml"]
        assert "device-scan" in outputs["tasks list"]
        # what the last line promises: instances within seconds (polled, bounded generously)
        listed = outputs["instances"]
        deadline = time.monotonic() + 120
        while "succeeded" not in listed and time.monotonic() < deadline:
            time.sleep(1)
            listed = subprocess.run(
                ["iotsched", "instances"], capture_output=True, text=True, env=env, timeout=120
            ).stdout
        assert "device-scan@" in listed and "succeeded" in listed, listed
    finally:
        rest = ""
        if runtime is not None:
            runtime.send_signal(signal.SIGINT)
            try:
                rest, _ = runtime.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                runtime.kill()
                raise
    assert runtime.returncode == 0, banner + rest  # Ctrl-C stops it cleanly
    assert "Traceback" not in banner + rest
