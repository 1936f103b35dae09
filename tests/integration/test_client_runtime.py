"""`iotsched.client` on the real local runtime (`iotsched local up --manual-clock`, its worker
processes): a task applied, run through the client, its instances paged, its shards and logs
read, each answer checked against the CLI's `--json` (direct, and through `--api-url`)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from iotsched.client import Client, ConflictError, NotFoundError
from tests.support import PATIENCE_S, free_port, local_up_argv, local_up_env

pytestmark = [pytest.mark.slow, pytest.mark.moto]

ROOT = Path(__file__).resolve().parents[2]
# An audit window holding every record of the test: the API's default window ends at the
# runtime's manual clock, the direct CLI's at the wall clock.
TODAY = datetime.now(UTC).date()
WINDOW = ("--since", str(TODAY - timedelta(days=1)), "--until", str(TODAY + timedelta(days=2)))
TASKS = """\
tasks:
  - id: client-scan
    handler: noop
    trigger: {rate: 1h}
    timeout_s: 5
    params: {log: 3}
    sharding:
      strategy: static
      shards: [{n: 0}, {n: 1}, {n: 2}]
"""


@dataclass(frozen=True)
class Up:
    """A running `local up`: how to reach it."""

    env: dict[str, str]
    api_url: str

    def cli(self, *args: str, api: bool = False) -> subprocess.CompletedProcess[str]:
        """`iotsched ARGS` against the runtime: directly, or through the API (`--api-url`)."""
        via = ["--api-url", self.api_url] if api else []
        return subprocess.run(
            [sys.executable, "-m", "iotsched.cli", *via, *args],
            capture_output=True,
            text=True,
            env=self.env,
            cwd=ROOT,
            timeout=60,
            check=False,
        )

    def json(self, *args: str, api: bool = False) -> Any:
        done = self.cli(*args, "--json", api=api)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)


@pytest.fixture(scope="module")
def up() -> Iterator[Up]:
    aws_port, port = free_port(), free_port()
    env = local_up_env()
    proc = subprocess.Popen(
        local_up_argv(aws_port=aws_port, port=port, clock=("--manual-clock",)),
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
        assert f"http://127.0.0.1:{port}/" in banner, banner
        yield Up(
            env={**env, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{aws_port}"},
            api_url=f"http://127.0.0.1:{port}/api",
        )
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()


def _ended(api: Client, instance_id: str) -> str:
    deadline = time.monotonic() + PATIENCE_S
    status = ""
    while time.monotonic() < deadline:
        status = api.instance(instance_id).status.value
        if status in ("succeeded", "failed", "timed_out", "aborted", "cancelled"):
            break
        time.sleep(0.5)
    return status


def _within(small: dict[str, Any], large: dict[str, Any]) -> None:
    """Every field of the direct CLI's answer is the API's, with the same value."""
    differing = {k: (v, large.get(k, "<absent>")) for k, v in small.items() if large.get(k) != v}
    assert not differing


def test_the_client_runs_a_task_and_reads_what_it_did(up: Up, tmp_path: Path) -> None:
    api = Client.local(up.api_url)
    tasks = tmp_path / "tasks.yaml"
    tasks.write_text(TASKS)
    assert up.json("tasks", "apply", str(tasks))["created"] == ["client-scan"]

    # the task, as the client and `tasks show` see it
    task = api.task("client-scan")
    shown = up.json("tasks", "show", "client-scan")
    assert task.definition.model_dump(mode="json", exclude_defaults=True) == shown["definition"]
    assert (task.id, task.version, task.paused) == (shown["id"], shown["version"], False)
    assert [t.id for t in api.tasks()] == [t["id"] for t in up.json("tasks", "list")]

    # run it three times, each with its own request id; a repeated id is the same instance
    runs = [api.run("client-scan", request_id=f"client-{n}") for n in range(3)]
    assert [r.outcome for r in runs] == ["claimed"] * 3
    again = api.run("client-scan", request_id="client-1")
    assert again.instance.instance_id == runs[1].instance.instance_id
    ids = [r.instance.instance_id for r in runs]
    assert all(_ended(api, i) == "succeeded" for i in ids)

    # instances, a page of one at a time, against `instances --json`
    paged = list(api.instances("client-scan", page_size=1))
    listed = up.json("instances", "client-scan")
    assert sorted(i.instance_id for i in paged) == sorted(ids)
    assert [i.instance_id for i in paged] == [i["instance_id"] for i in listed]
    for mine, theirs in zip(paged, listed, strict=True):
        _within(theirs, mine.model_dump(mode="json"))

    # shards, two a page, and each shard's log, against `shards` and `logs --json`
    first = ids[0]
    shards = list(api.shards(first, page_size=2))
    direct = up.json("shards", first)
    assert [s.index for s in shards] == [0, 1, 2]
    assert all(s.status == "succeeded" for s in shards)
    _within(direct["instance"], api.instance(first).model_dump(mode="json"))
    for shard, theirs in zip(shards, direct["shards"], strict=True):
        _within(theirs, shard.model_dump(mode="json"))
    log = api.logs(first, 1)
    assert log.line_count == 3 and log.outcome == "succeeded"
    assert [line.message for line in log.lines][:1] == ["noop shard 1: line 1 of 3"]
    assert log.model_dump(mode="json") == up.json("logs", first, "--shard", "1")

    # the audit trail names the four runs asked for, of three instances
    audit = api.audit(task="client-scan", since=WINDOW[1], until=WINDOW[3])
    assert [r.model_dump(mode="json") for r in audit] == up.json(
        "audit", "--task", "client-scan", *WINDOW
    )
    run_records = [r for r in audit if r.verb == "run"]
    assert len(run_records) == 4
    assert {i for r in run_records for i in r.instance_ids} == set(ids)

    # errors are typed
    with pytest.raises(NotFoundError) as missing:
        api.task("no-such-task")
    assert missing.value.message == "no task 'no-such-task'"
    submitted = api.submit("client-scan", delay="2h", request_id="later")
    assert api.cancel(submitted.instance_id, reason="not needed").status == "cancelled"
    with pytest.raises(ConflictError):
        api.cancel(submitted.instance_id)


def test_the_cli_goes_through_the_api_with_api_url(up: Up, tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.yaml"
    tasks.write_text(TASKS.replace("client-scan", "cli-scan"))
    assert up.cli("tasks", "apply", str(tasks)).returncode == 0

    ran = up.json("run", "cli-scan", "--request-id", "via-api", api=True)
    assert ran["trigger_kind"] == "manual"
    assert _ended(Client.local(up.api_url), ran["instance_id"]) == "succeeded"
    # the same answers, the API's views adding fields of their own
    for verb in (("instances", "cli-scan"), ("tasks", "list")):
        via, direct = up.json(*verb, api=True), up.json(*verb)
        assert len(via) == len(direct)
        for theirs, mine in zip(direct, via, strict=True):
            _within(theirs, mine)
    via, direct = (
        up.json("shards", ran["instance_id"], api=True),
        up.json("shards", ran["instance_id"]),
    )
    _within(direct["instance"], via["instance"])
    assert via["shards"] == direct["shards"]
    assert up.json("logs", ran["instance_id"], api=True) == up.json("logs", ran["instance_id"])
    shown = up.json("tasks", "show", "cli-scan", api=True)
    _within(up.json("tasks", "show", "cli-scan"), shown)
    assert up.json("audit", "--task", "cli-scan", *WINDOW, api=True) == up.json(
        "audit", "--task", "cli-scan", *WINDOW
    )

    # the direct path's exit codes: an unknown id is bad input, an action refused 1
    unknown = up.cli("tasks", "show", "nope", api=True)
    assert (unknown.returncode, unknown.stdout) == (2, "")
    assert "no task 'nope'" in unknown.stderr
    bad = up.cli("run", "cli-scan", "--request-id", "no spaces allowed", api=True)
    assert bad.returncode == 2 and "request_id" in bad.stderr
    done = up.cli("cancel", ran["instance_id"], api=True)
    assert done.returncode == 1 and "409 conflict" in done.stderr
    gone = up.cli(
        "shards",
        "cli-scan@2026-11-29T12:00Z",
        api=True,
    )
    assert gone.returncode == 2 and "Traceback" not in gone.stderr
