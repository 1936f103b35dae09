"""Web pages of other origins against `iotsched local up`, in a real headless Chromium.

A browser on the operator's machine reaches both of the runtime's ports (the console's and the
emulator's) from any page it shows. The page here is served by a server of its own on another
port, under the name `evil.example` (Chromium resolves it to 127.0.0.1): it sends what a form, a
`no-cors` fetch or a CORS fetch can send to the runtime's API, its control and the emulator's
S3. A second name, `rebind.example`, resolves to 127.0.0.1 too and stands for DNS rebinding:
the page's own origin answered by the runtime's port. Nothing the pages send may change the
runtime's state or read it; the console's own origin still may.
"""

from __future__ import annotations

import json
import pprint
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote

import boto3
import pytest

from tests.integration.test_console import CHROMIUM, CHROMIUM_ARGS
from tests.support import TEST_BUCKETS, free_port, local_up_env, local_up_logged

pytestmark = [pytest.mark.slow, pytest.mark.moto, pytest.mark.timeout(480)]

ROOT = Path(__file__).resolve().parents[2]
TASKS = """\
tasks:
  - id: job
    handler: noop
    trigger: {rate: 1h}
    params: {seconds: 600}
    timeout_s: 900
  - id: held
    handler: noop
    trigger: {rate: 1h}
    timeout_s: 5
"""
SECRET = b"the fleet's keys"
#: The instant the pages' ticks ask for: a tick there would move every task's next fire past it.
FAR = "2031-01-01T00:00:00+00:00"

#: What the hostile page sends, each a `fetch` a page of any origin may make. `mode: no-cors`
#: is what a form or an image sends: the page cannot read the answer, the server still acts.
ATTACKS_JS = """
async ({runtime, emulator, bucket, instance, far}) => {
  const attempts = {
    pause: [`${runtime}/api/tasks/job/pause`, {method: "POST", mode: "no-cors"}],
    resume: [`${runtime}/api/tasks/held/resume`, {method: "POST", mode: "no-cors",
      headers: {"Content-Type": "application/x-www-form-urlencoded"}}],
    run: [`${runtime}/api/tasks/job/runs`, {method: "POST", mode: "no-cors",
      headers: {"Content-Type": "application/x-www-form-urlencoded"}}],
    cancel: [`${runtime}/api/instances/${encodeURIComponent(instance)}/cancel`,
      {method: "POST", mode: "no-cors"}],
    tick: [`${runtime}/_local/tick`, {method: "POST", mode: "no-cors",
      headers: {"Content-Type": "text/plain"}, body: JSON.stringify({at: far})}],
    sweep: [`${runtime}/_local/sweep`, {method: "POST", mode: "no-cors",
      headers: {"Content-Type": "text/plain"}, body: "{}"}],
    read_tasks: [`${runtime}/api/tasks`, {}],
    s3_list: [`${emulator}/${bucket}`, {}],
    s3_read: [`${emulator}/${bucket}/secret.txt`, {}],
    s3_overwrite: [`${emulator}/${bucket}/secret.txt`, {method: "PUT", body: "pwned"}],
    s3_form_upload: [`${emulator}/${bucket}`, {method: "POST", mode: "no-cors", body: (() => {
      const form = new FormData();
      form.append("key", "secret.txt");
      form.append("file", new Blob(["pwned by a form"]), "secret.txt");
      return form;
    })()}],
  };
  const seen = {};
  for (const [name, [url, init]] of Object.entries(attempts)) {
    try {
      const answer = await fetch(url, init);
      seen[name] = answer.type === "opaque" ? "sent, answer unreadable" : `read ${answer.status}`;
    } catch (error) {
      seen[name] = "refused by the browser";
    }
  }
  return seen;
}
"""

#: What a rebound page (its name now resolving to 127.0.0.1) sends to its own origin.
REBOUND_JS = """
async (far) => {
  const seen = {};
  const tasks = await fetch("/api/tasks");
  seen.read_tasks = tasks.status;
  const tick = await fetch("/_local/tick", {method: "POST",
    headers: {"Content-Type": "application/json"}, body: JSON.stringify({at: far})});
  seen.tick = tick.status;
  return seen;
}
"""

#: The console's own origin, as its pages call the API: JSON, even without a body.
OWN_JS = """
async () => {
  const answer = await fetch("/api/tasks/held/resume", {method: "POST",
    headers: {"Content-Type": "application/json", Accept: "application/json"}});
  return answer.status;
}
"""


@dataclass
class Runtime:
    """A running `iotsched local up` and the environment that reaches it."""

    port: int
    aws_port: int
    env: dict[str, str]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def emulator(self) -> str:
        return f"http://127.0.0.1:{self.aws_port}"

    def cli(self, *args: str) -> Any:
        done = subprocess.run(
            [sys.executable, "-m", "iotsched.cli", *args, "--json"],
            capture_output=True,
            text=True,
            env=self.env,
            cwd=ROOT,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def status(self) -> Any:
        with urllib.request.urlopen(f"{self.url}/_local/status", timeout=30) as answer:
            return json.loads(answer.read())


@pytest.fixture(scope="module")
def local_up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runtime]:
    if not CHROMIUM.exists():
        pytest.skip(
            "!!! BROWSER TEST NOT RUN: /usr/bin/chromium is missing and could not be installed "
            "(run `make browser`, i.e. apt-get install -y chromium, as root) !!!"
        )
    aws_port, port = free_port(), free_port()
    env = local_up_env()
    log = tmp_path_factory.mktemp("hostile") / "local-up.log"
    # The test deployments' index buckets (tests.support): each is a query of every list.
    buckets = ("--param", f"IndexBuckets={TEST_BUCKETS}")
    with local_up_logged(log, aws_port=aws_port, port=port, env=env, args=buckets):
        emulator = f"http://127.0.0.1:{aws_port}"
        cli_env = {**env, "AWS_ENDPOINT_URL": emulator, "IOTSCHED_INDEX_BUCKETS": TEST_BUCKETS}
        yield Runtime(port, aws_port, cli_env)


@pytest.fixture(scope="module")
def hostile_site() -> Iterator[int]:
    """A web server of its own on another port: the page the attacks run from."""
    page = b"<!doctype html><title>a page of another site</title><p>nothing to see here</p>"

    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


def test_any_web_page_cannot_drive_the_local_runtime(
    local_up: Runtime, hostile_site: int, tmp_path: Path
) -> None:
    from playwright.sync_api import sync_playwright

    tasks = tmp_path / "tasks.yaml"
    tasks.write_text(TASKS)
    assert local_up.cli("tasks", "apply", str(tasks))["created"] == ["job", "held"]
    assert local_up.cli("tasks", "pause", "held")["paused"] is True
    running = local_up.cli("run", "job", "--request-id", "setup")["instance_id"]
    s3 = boto3.client("s3", endpoint_url=local_up.emulator, region_name="us-east-1")
    bucket = next(b["Name"] for b in s3.list_buckets()["Buckets"] if "data" in b["Name"].lower())
    s3.put_object(Bucket=bucket, Key="secret.txt", Body=SECRET)
    before = {t["id"]: t for t in local_up.cli("tasks", "list")}

    answered: dict[str, int] = {}  # what the ports answered, as the browser's network saw it
    to_pages: dict[str, int] = {}  # what they answered the other origins' pages
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM),
            args=[
                *CHROMIUM_ARGS,
                "--host-resolver-rules=MAP evil.example 127.0.0.1, MAP rebind.example 127.0.0.1",
            ],
            headless=True,
        )
        try:
            page = browser.new_context().new_page()
            page.set_default_timeout(30_000)
            page.on(
                "response",
                lambda r: answered.__setitem__(f"{r.request.method} {r.url}", r.status),
            )
            page.goto(f"http://evil.example:{hostile_site}/")
            from_elsewhere = page.evaluate(
                ATTACKS_JS,
                {
                    "runtime": local_up.url,
                    "emulator": local_up.emulator,
                    "bucket": bucket,
                    "instance": running,
                    "far": FAR,
                },
            )
            rebound = {
                "console": page.goto(f"http://rebind.example:{local_up.port}/"),
                "emulator": page.goto(f"http://rebind.example:{local_up.aws_port}/{bucket}"),
            }
            rebound_status = {name: r.status if r else None for name, r in rebound.items()}
            page.goto(f"http://rebind.example:{local_up.port}/config.json")
            rebound_calls = page.evaluate(REBOUND_JS, FAR)
            to_pages = dict(answered)
            page.goto(f"{local_up.url}/config.json")
            own_origin = page.evaluate(OWN_JS)
        finally:
            browser.close()

    after = {t["id"]: t for t in local_up.cli("tasks", "list")}
    instances = local_up.cli("instances", "job")
    status = local_up.status()
    stored = s3.get_object(Bucket=bucket, Key="secret.txt")["Body"].read()
    on_runtime = {k: v for k, v in to_pages.items() if f":{local_up.port}/" in k}
    on_emulator = {k: v for k, v in to_pages.items() if f":{local_up.aws_port}/" in k}

    outcome = {
        "the page's attempts": from_elsewhere,
        "the runtime's answers to the page": sorted(set(on_runtime.values())),
        "the emulator's answers to the page": sorted(set(on_emulator.values())),
        "rebound pages": rebound_status,
        "a rebound page's own calls": rebound_calls,
        "job paused": after["job"]["paused"],
        "job's instances": [i["instance_id"] for i in instances],
        "the setup run cancelled": any(i["status"] == "cancelled" for i in instances),
        "ticks delivered": status["ticks_delivered"],
        "next fires moved": {t: after[t]["next_fire"] != before[t]["next_fire"] for t in after},
        "the object": stored,
    }
    refused_by_browser = "refused by the browser"
    unreadable = "sent, answer unreadable"
    expected = {
        "the page's attempts": {
            # sent, as a form would send them, and refused by the port (below)
            **dict.fromkeys(["pause", "resume", "run", "cancel", "tick", "sweep"], unreadable),
            "s3_form_upload": unreadable,
            # the ports allow no other origin to read, nor to send what needs a preflight
            **dict.fromkeys(
                ["read_tasks", "s3_list", "s3_read", "s3_overwrite"], refused_by_browser
            ),
        },
        "the runtime's answers to the page": [403, 421],
        "the emulator's answers to the page": [403, 421],
        "rebound pages": {"console": 421, "emulator": 421},
        "a rebound page's own calls": {"read_tasks": 421, "tick": 421},
        "job paused": False,
        "job's instances": [running],
        "the setup run cancelled": False,
        "ticks delivered": 0,
        "next fires moved": {"held": False, "job": False},
        "the object": SECRET,
    }
    assert outcome == expected, pprint.pformat(outcome, width=100)
    # the console's own origin still changes what it may
    assert own_origin == 200
    assert {t["id"]: t["paused"] for t in local_up.cli("tasks", "list")}["held"] is False
    # the setup run ends now, not when the runtime stops its worker (15 s later)
    cancel = urllib.request.Request(
        f"{local_up.url}/api/instances/{quote(running, safe='')}/cancel",
        data=b"{}",
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(cancel, timeout=30) as answer:
        assert json.loads(answer.read())["status"] == "cancelled"
