"""Every command in README.md runs as written.

The README's fenced blocks follow one convention (its "Developing iotsched" section states it):

- ```` ```sh ````: run, line by line with `bash -e`, in order, as one terminal session (its
  exports and working directory carry over from block to block): every command exits 0.
- ```` ```sh background ````: a second terminal (a fresh shell in the clone), started and left
  running until its banner says it is up; stopped with Ctrl-C (SIGINT to its process group)
  at the end, where it must exit 0 without a traceback.
- ```` ```sh not-run:REASON ````: not run, for one of the reasons in `NOT_RUN`, and holding only
  the commands that reason names: nothing escapes this test silently.
- ```` ```LANG from-init:PATH ````: a file `iotsched init` writes (python, toml, yaml): the
  block's text must be in the file written at PATH.

A block of any other tag, or a shell block under another language name (bash, console, ...),
fails the test. The run happens in a scratch copy of the clone (its `template.yaml`, and a
`.venv` layered over this test's environment so that `pip install -e` installs nothing outside
the scratch directory), with an empty HOME and no AWS variable. The one liberty taken: the
local runtime's ports are free ones instead of 5000 and 8000 (other runs share the machine).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from iotsched.services.definitions.task_file import (
    TaskFileError,
    parse_task_file,
)
from tests.support import free_port

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def _make_target(words: list[str]) -> str | None:
    """The one target of `make [-C DIR] TARGET [VAR=VALUE ...]`, else None."""
    rest = words[3:] if words[1:2] == ["-C"] else words[1:]
    targets = [w for w in rest if "=" not in w and not w.startswith("-")]
    return targets[0] if len(targets) == 1 else None


#: `not-run` reasons: why the test does not run such a block, what covers it instead (paths that
#: must exist), and the only commands such a block may hold.
NOT_RUN: dict[str, tuple[str, tuple[str, ...], Callable[[list[str]], bool]]] = {
    "make": (
        "`make demo` is run (smaller) by tests/integration/test_demo.py; `make test` is CI itself",
        ("tests/integration/test_demo.py", ".ci/run"),
        lambda words: words in (["make", "demo"], ["make", "test"]),
    ),
    "aws": (
        "needs an AWS account; tests/infra checks the templates",
        ("tests/infra",),
        lambda words: (
            words[0] in ("sam", ".venv-tools/bin/sam", "aws")
            or (words[0] == "make" and _make_target(words) in ("tools", "build", "deploy"))
            or (words[0] == "cd" and len(words) == 2)
            or (words[0] == "iotsched" and "--stack" in words)
        ),
    ),
}
#: What the scratch clone does not link: its own environment, and what a run writes.
UNCOPIED = {
    ".git",
    ".aws-sam",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    "jobs",
    "test-artifacts",
}
SHELL_NAMES = {"bash", "shell", "console", "shell-session", "zsh", "terminal"}
FENCE = re.compile(r"( *)```([^`]*)")


@dataclass(frozen=True)
class Block:
    line: int
    lang: str
    tag: str
    text: str

    @property
    def where(self) -> str:
        return f"README.md:{self.line} (```{self.lang} {self.tag})".replace(" )", ")")


def blocks(markdown: str) -> list[Block]:
    """Every fenced block, in order, its text dedented to its fence's column."""
    lines = markdown.splitlines()
    found, index = [], 0
    while index < len(lines):
        opening = FENCE.fullmatch(lines[index])
        index += 1
        if opening is None:
            continue
        indent, info = opening.groups()
        lang, _, tag = info.strip().partition(" ")
        end = next((n for n in range(index, len(lines)) if lines[n].strip() == "```"), len(lines))
        body = "\n".join(line.removeprefix(indent) for line in lines[index:end])
        found.append(Block(index, lang, tag.strip(), body + "\n"))
        index = end + 1
    return found


def commands(text: str) -> Iterator[list[str]]:
    """The commands of a shell block: each line without its comment, split on `&&`."""
    for line in text.splitlines():
        words = shlex.split(line, comments=True)
        command: list[str] = []
        for word in [*words, "&&"]:
            if word == "&&":
                if command:
                    yield command
                command = []
            else:
                command.append(word)


def problems(markdown: str) -> list[str]:
    """Every block the convention does not allow, each named with why."""
    found = []
    for block in blocks(markdown):
        if not block.lang:
            found.append(f"{block.where}: give the block a language (text for a diagram)")
        elif block.lang in SHELL_NAMES:
            found.append(f"{block.where}: shell commands go in ```sh blocks, which the test runs")
        elif block.lang == "sh":
            if block.tag in ("", "background"):
                continue
            reason = block.tag.removeprefix("not-run:")
            if block.tag == reason or reason not in NOT_RUN:
                found.append(f"{block.where}: not a tag of the convention ({sorted(NOT_RUN)})")
                continue
            allowed = NOT_RUN[reason][2]
            found += [
                f"{block.where}: `{' '.join(words)}` is not a command `not-run:{reason}` covers"
                for words in commands(block.text)
                if not allowed(words)
            ]
        elif block.tag and not re.fullmatch(r"from-init:[\w./-]+", block.tag):
            found.append(f"{block.where}: not a tag of the convention (from-init:PATH)")
    return found


# -- the convention itself (quick) ----------------------------------------------------------------


def test_every_readme_block_is_run_or_not_run_for_a_named_reason() -> None:
    text = README.read_text(encoding="utf-8")
    assert problems(text) == []
    tags = {b.tag for b in blocks(text) if b.lang == "sh"}
    assert "" in tags and "background" in tags, "the README runs nothing on the local runtime"
    for reason, (_, covered_by, _) in NOT_RUN.items():
        for path in covered_by:
            assert (ROOT / path).exists(), f"not-run:{reason} names {path}, which is gone"


def test_the_convention_refuses_what_would_escape_it() -> None:
    sneaky = (
        "```bash\nrm -rf /\n```\n"
        "```sh skip\nfalse\n```\n"
        "```sh not-run:aws\nsam deploy --guided\ncurl http://example.invalid\n```\n"
        "```sh not-run:later\nfalse\n```\n"
        "```python maybe\nx = 1\n```\n"
        "- a list\n\n  ```sh not-run:make\n  make demo && make clean\n  ```\n"
        "```\niotsched run x\n```\n"
    )
    found = problems(sneaky)
    assert len(found) == 7, found
    assert "`curl http://example.invalid`" in found[2] and "`make clean`" in found[5]
    assert "give the block a language" in found[6]
    fine = (
        "```sh not-run:aws\ncd jobs && sam build && sam deploy --guided  # later\n```\n"
        "```sh not-run:aws\nmake -C jobs deploy ENV=prod\n```\n"
    )
    assert problems(fine) == []


def test_the_first_screen_has_the_two_commands_and_the_five_minute_path() -> None:
    first = "\n".join(README.read_text(encoding="utf-8").splitlines()[:60])
    for command in (
        "make demo",
        "make test",
        "iotsched init",
        "pip install -e",
        "iotsched local up",
        "iotsched tasks apply",
        "iotsched run",
        "iotsched instances",
        "deploy",
    ):
        assert command in first, command


def test_the_readme_task_files_are_valid_task_files() -> None:
    # the handler names are checked where the file is applied; here, every other field
    files = [b for b in blocks(README.read_text(encoding="utf-8")) if b.lang == "yaml"]
    assert files, "the README shows no task file"
    for block in files:
        data = yaml.safe_load(block.text)
        names = {t.get("handler") for t in data["tasks"]} | {t.get("reduce") for t in data["tasks"]}
        try:
            parse_task_file(data, handlers={n for n in names if n})
        except TaskFileError as exc:
            pytest.fail(f"{block.where}: {exc}")


# -- running it (real processes) ----------------------------------------------------------------


def scratch_clone(clone: Path) -> dict[str, str]:
    """A directory standing for the clone: links to this tree's files, and a `.venv` layered over this
    interpreter's environment (what this test runs on is importable; what is installed into
    it stays in the scratch directory). The environment a new shell starts with."""
    clone.mkdir()
    for entry in ROOT.iterdir():  # the template, the functions' code, ...: links to this tree
        if entry.name not in UNCOPIED and not entry.name.startswith(".venv"):
            (clone / entry.name).symlink_to(entry)
    venv = clone / ".venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    outer = sysconfig.get_paths()["purelib"]
    (Path(purelib) / "_outer_environment.pth").write_text(
        f"import site; site.addsitedir({outer!r})\n"
    )
    # the console scripts of the outer environment, run by the scratch interpreter
    outer_bin = Path(sys.executable).parent
    for script in outer_bin.iterdir():
        target = venv / "bin" / script.name
        if target.exists() or not script.is_file():
            continue
        try:
            head, _, rest = script.read_text(encoding="utf-8").partition("\n")
        except UnicodeDecodeError:
            continue  # a binary: not a Python script
        if head.startswith("#!") and "python" in head:
            target.write_text(f"#!{python}\n{rest}", encoding="utf-8")
            target.chmod(0o755)
    home = clone.parent / "home"
    home.mkdir()
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "COLUMNS": "200",
    }
    env.update({k: v for k, v in os.environ.items() if k.startswith("PIP_")})  # offline CI
    return env


class Session:
    """One terminal: each block runs in bash with the exports and directory the last one left."""

    def __init__(self, clone: Path, env: dict[str, str]) -> None:
        self.env = env
        self.state = clone.parent / "session.env"
        self.cwd = clone.parent / "session.cwd"
        self.state.write_text("")
        self.cwd.write_text(str(clone))

    def run(self, text: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        script = (
            f". {shlex.quote(str(self.state))}\n"
            f'cd "$(cat {shlex.quote(str(self.cwd))})"\n'
            "set -exo pipefail\n"
            f"{text}\n"
            "set +x\n"
            f"export -p > {shlex.quote(str(self.state))}\n"
            f"pwd > {shlex.quote(str(self.cwd))}\n"
        )
        return subprocess.run(
            ["bash", "-c", script],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=timeout,
            check=False,
        )


def started(text: str, clone: Path, env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    """A background block, in a fresh shell in the clone, read until its banner is out."""
    process = subprocess.Popen(
        ["bash", "-ec", text],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=clone,
        start_new_session=True,  # its own process group: Ctrl-C reaches it as in a terminal
    )
    assert process.stdout is not None
    banner = ""
    deadline = time.monotonic() + 180
    while "Ctrl-C" not in banner and time.monotonic() < deadline:
        read = process.stdout.readline()
        if not read:
            break
        banner += read
    assert "Ctrl-C" in banner, banner
    return process, banner


def stopped(process: subprocess.Popen[str]) -> str:
    os.killpg(process.pid, signal.SIGINT)
    try:
        rest, _ = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        raise
    return rest


def on_free_ports(text: str, aws_port: int, control_port: int) -> str:
    text = re.sub(
        r"\biotsched local up\b",
        f"iotsched local up --aws-port {aws_port} --port {control_port}",
        text,
    )
    return text.replace("127.0.0.1:5000", f"127.0.0.1:{aws_port}").replace(
        "127.0.0.1:8000", f"127.0.0.1:{control_port}"
    )


@pytest.mark.slow
@pytest.mark.moto
@pytest.mark.timeout(900)
def test_the_readme_runs_as_written(tmp_path: Path) -> None:
    text = README.read_text(encoding="utf-8")
    assert problems(text) == []
    clone = tmp_path / "clone"
    env = scratch_clone(clone)
    session = Session(clone, env)
    aws_port, control_port = free_port(), free_port()
    runtimes: list[subprocess.Popen[str]] = []
    banners = ""
    ran: list[str] = []
    try:
        for block in blocks(text):
            if block.lang == "sh" and block.tag == "background":
                process, banner = started(
                    on_free_ports(block.text, aws_port, control_port), clone, env
                )
                runtimes.append(process)
                banners += banner
            elif block.lang == "sh" and block.tag == "":
                command = on_free_ports(block.text, aws_port, control_port)
                for export in re.findall(r"^export AWS_ENDPOINT_URL=(\S+)", command, re.M):
                    assert f"export AWS_ENDPOINT_URL={export}" in banners, (block.where, banners)
                result = session.run(command)
                output = result.stdout + result.stderr
                assert result.returncode == 0, (block.where, output)
                assert "Traceback" not in output, (block.where, output)
                ran.append(block.text)
            elif block.tag.startswith("from-init:"):
                written = Path(session.cwd.read_text().strip()) / block.tag.split(":", 1)[1]
                assert written.is_file(), f"{block.where}: `iotsched init` wrote no {written}"
                assert block.text.strip() in written.read_text(encoding="utf-8"), (
                    f"{block.where}: not what `iotsched init` wrote",
                    written.read_text(encoding="utf-8"),
                )
        assert runtimes and ran, "the README runs nothing on the local runtime"
        # what the last command promises: the task's instance succeeds within seconds
        (task,) = set(re.findall(r"^iotsched run (\S+)", "\n".join(ran), re.M))
        deadline = time.monotonic() + 120
        instances: list[dict[str, object]] = []
        while time.monotonic() < deadline:
            listed = session.run(f"iotsched instances {shlex.quote(task)} --json")
            assert listed.returncode == 0, listed.stderr
            instances = json.loads(listed.stdout)
            if any(i["status"] == "succeeded" for i in instances):
                break
            time.sleep(1)
        assert [i["status"] for i in instances] == ["succeeded"], instances
        shards = session.run(
            f"iotsched shards {shlex.quote(str(instances[0]['instance_id']))} --json"
        )
        assert shards.returncode == 0, shards.stderr
        views = json.loads(shards.stdout)["shards"]
        assert {s["status"] for s in views} == {"succeeded"}, views
        assert all(s.get("result") is not None for s in views), views  # the handler's result
    finally:
        rests = [stopped(process) for process in runtimes]
    for process, rest in zip(runtimes, rests, strict=True):
        assert process.returncode == 0, banners + rest  # Ctrl-C stops it cleanly
        assert "Traceback" not in banners + rest
