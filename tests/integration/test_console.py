"""The web console in a real headless Chromium, against `iotsched local up` as operators start it.

Debian's chromium (/usr/bin/chromium, installed by `make test` through `make browser`) is
driven by Playwright from PyPI; no browser is downloaded. The test applies tasks with the CLI,
then works only through the page: it checks the tasks table, pauses a task, sees a parameter
edit refused inline, runs a task now for a business date, watches the instance finish without
reloading (the page refreshes itself while work runs), opens the failed shard in the grid,
reruns it, and reads the alert. Screenshots land in test-artifacts/console/ (gitignored).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from iotsched.api.identity import local_principal
from tests.support import free_port, local_up_env, local_up_logged

# Generous: `local up` alone may take a minute to start on a loaded two-core CI machine.
pytestmark = [pytest.mark.slow, pytest.mark.moto, pytest.mark.timeout(480)]

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = ROOT / "test-artifacts" / "console"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-quic",
    "--no-first-run",
    "--disable-component-update",
    "--disable-sync",
]
TASKS = """\
tenants:
  - name: acme
    quotas: {max_tasks: 5, max_instances_per_minute: 100}
tasks:
  - id: device-scan
    tenant: acme
    handler: noop
    trigger: {cron: "0 2 * * *", timezone: Europe/Berlin}
    sharding: {strategy: id_range, shards: 8, key_space: device_id, id_max: 800}
    params: {seconds: 1.0, fail: [5], log: 3}
    retry: {max_attempts: 2, backoff_s: 0}
    timeout_s: 20
  - id: every-minute
    handler: noop
    trigger: {rate: 1m}
    timeout_s: 10
"""
INSTANCE_RE = re.compile(r"^device-scan@\d{4}-\d\d-\d\dT\d\d:\d\dZ$")


@dataclass
class Runtime:
    """A running `iotsched local up`: its console URL and the environment that reaches it."""

    url: str
    env: dict[str, str]

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

    def api(self, path: str) -> Any:
        with urllib.request.urlopen(f"{self.url}api{path}", timeout=60) as answer:
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
    env.update(
        {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
        }
    )
    log = tmp_path_factory.mktemp("console") / "local-up.log"
    with local_up_logged(log, aws_port=aws_port, port=port, env=env) as banner:
        assert f"console: http://127.0.0.1:{port}/" in banner
        runtime = Runtime(
            url=f"http://127.0.0.1:{port}/",
            env={**env, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{aws_port}"},
        )
        tasks = tmp_path_factory.mktemp("tasks") / "tasks.yaml"
        tasks.write_text(TASKS)
        assert runtime.cli("tasks", "apply", str(tasks))["created"] == [
            "device-scan",
            "every-minute",
        ]
        yield runtime


@pytest.fixture(scope="module")
def page(local_up: Runtime) -> Iterator[Any]:
    from playwright.sync_api import expect, sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
        )
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        # Only this origin may be reached: anything else is a bug (no CDN, no fonts).
        outside: list[str] = []
        page.on(
            "request",
            lambda request: (
                None if request.url.startswith(local_up.url) else outside.append(request.url)
            ),
        )
        page.set_default_timeout(20_000)
        # assertions wait as long as actions: a refresh on a loaded machine takes seconds
        expect.set_options(timeout=20_000)
        yield page
        context.close()
        browser.close()
    assert errors == [], errors
    assert outside == [], outside


def test_the_console_pauses_runs_and_shows_the_shard_grid(
    local_up: Runtime, page: Any, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    # -- tasks: trigger in words, timezone, next fires, state -------------------------------------
    page.goto(f"{local_up.url}#/tasks")  # the overview is the default page
    rows = page.locator("table[aria-label=Tasks] tbody tr")
    expect(rows).to_have_count(2)
    scan = page.locator("tr[data-task=device-scan]")
    expect(scan).to_contain_text("every day at 02:00 (Europe/Berlin)")
    expect(scan).to_contain_text("Europe/Berlin")
    expect(scan.locator("ul.fires li")).to_have_count(3)
    expect(scan.locator("ul.fires li").first).to_have_text(re.compile(r"02:00 CET$"))
    expect(scan).to_contain_text("never ran")
    minute = page.locator("tr[data-task=every-minute]")
    expect(minute).to_contain_text("every minute")
    expect(minute).to_contain_text("active")
    page.screenshot(path=str(ARTIFACTS / "01-tasks.png"), full_page=True)

    # -- the tenant column and filter ----------------------------------------------------------------
    expect(scan.locator("td").first).to_have_text("acme")
    expect(minute.locator("td").first).to_have_text("\u2013")
    tenant = page.get_by_label("Tenant")
    tenant.select_option("acme")
    expect(rows).to_have_count(1)
    expect(scan).to_be_visible()
    tenant.select_option("-")
    expect(rows).to_have_count(1)
    expect(minute).to_be_visible()
    page.screenshot(path=str(ARTIFACTS / "01-tasks-no-tenant.png"), full_page=True)
    tenant.select_option("")
    expect(rows).to_have_count(2)

    # -- pause, with a note (optional, as long as the API takes) ---------------------------------
    page.get_by_role("button", name="Pause every-minute…").click()
    pause = page.get_by_role("form", name="Pause every-minute")
    expect(pause.get_by_label("Note (optional)")).to_be_focused()
    expect(pause.get_by_label("Note (optional)")).to_have_attribute("maxlength", "500")
    console_note = "firmware 4.2 recalled"
    pause.get_by_label("Note (optional)").fill(console_note)
    pause.get_by_role("button", name="Pause", exact=True).click()
    expect(minute).to_contain_text("paused")
    expect(pause).to_have_count(0)
    expect(page.get_by_role("button", name="Resume every-minute")).to_be_focused()
    expect(page.locator("#notice")).to_contain_text("every-minute paused")
    expect(minute.locator(".pause-note")).to_have_text(console_note)
    stored = local_up.api("/tasks/every-minute")
    assert (stored["paused"], stored["pause_note"]) == (True, console_note)
    assert [t["paused"] for t in local_up.cli("tasks", "list")] == [False, True]
    # its note, given by the CLI, shows under the state (and goes with a resume)
    note = "held for the firmware recall [ops-7]"
    assert local_up.cli("tasks", "pause", "every-minute", "--note", note)["pause_note"] == note
    page.reload()
    expect(minute.locator(".pause-note")).to_have_text(note)
    expect(scan.locator(".pause-note")).to_have_count(0)
    page.goto(f"{local_up.url}#/tasks/every-minute")  # the task view shows it too
    expect(page.get_by_role("region", name="Task")).to_contain_text(f"Pause note{note}")
    page.goto(f"{local_up.url}#/tasks")
    expect(rows).to_have_count(2)

    # -- edit params: errors inline, nothing written -------------------------------------------------
    page.get_by_role("button", name="Edit device-scan…").click()
    form = page.get_by_role("form", name="Edit device-scan")
    form.get_by_label("Params (JSON object)").fill('{"seconds": ')
    form.get_by_role("button", name="Save").click()
    expect(form.locator("#edit-params-error")).to_contain_text("not valid")
    expect(form.get_by_label("Params (JSON object)")).to_have_attribute("aria-invalid", "true")
    form.get_by_label("Params (JSON object)").fill('{"seconds": 1.0, "fail": [5]}')
    form.get_by_label("Shard timeout (seconds, 1 to 900)").fill("0")
    form.get_by_role("button", name="Save").click()
    expect(form.locator("#edit-timeout_s-error")).to_contain_text("greater than 0")
    expect(form.locator("#edit-params-error")).to_be_hidden()
    page.screenshot(path=str(ARTIFACTS / "02-edit-errors.png"), full_page=True)
    assert local_up.api("/tasks/device-scan")["version"] == 1  # nothing was written
    form.get_by_role("button", name="Cancel").click()

    # -- run now with a business date ------------------------------------------------------------------
    page.get_by_role("button", name="Run device-scan now…").click()
    run = page.get_by_role("form", name="Run device-scan now")
    run.get_by_label("Business date").fill("2026-11-28")
    run.get_by_label("Priority").select_option("low")
    run.get_by_role("button", name="Run now").click()
    notice = page.locator("#notice")
    expect(notice).to_contain_text("Run started:")
    instance_id = notice.locator("a").inner_text()
    assert INSTANCE_RE.match(instance_id), instance_id
    notice.locator("a").click()

    # -- the instance page refreshes itself until the instance ends ---------------------------------
    expect(page.locator("h2")).to_have_text(instance_id)
    grid = page.get_by_role("list", name="Shard grid")
    expect(grid.get_by_role("button")).to_have_count(8)
    page.screenshot(path=str(ARTIFACTS / "03-instance-running.png"), full_page=True)
    status = page.get_by_role("region", name="Instance").locator("dd").first
    expect(status).to_have_text("failed", timeout=120_000)  # shard 5 fails both attempts
    facts = page.get_by_role("region", name="Instance")
    expect(facts).to_contain_text("2026-11-28")
    expect(facts).to_contain_text("manual")
    expect(facts).to_contain_text("8 of 8 done, 1 failed")
    expect(facts).to_contain_text("Prioritylow")
    assert local_up.api(f"/instances/{instance_id}")["priority"] == "low"

    for index in range(8):
        expected = "failed, 2 attempts" if index == 5 else "succeeded"
        expect(grid.get_by_role("button", name=f"Shard {index}: {expected}")).to_have_count(1)
    expect(page.get_by_role("list", name="Shard counts by status")).to_contain_text("succeeded: 7")
    grid.get_by_role("button", name="Shard 5: failed, 2 attempts").click()
    detail = page.get_by_role("region", name="Selected shard")
    expect(detail).to_contain_text("Shard 5")
    expect(detail).to_contain_text("start: 500")
    expect(detail).to_contain_text("end: 600")
    expect(detail).to_contain_text("noop asked to fail shard 5")
    attempts = detail.get_by_role("table", name="Attempts of shard 5").locator("tbody tr")
    expect(attempts).to_have_count(2)
    expect(attempts.first).to_contain_text("WorkerFunction-")
    expect(attempts.first).to_contain_text(re.compile(r"\d+(\.\d)? s"))
    # its log: the handler's 3 lines (Python logging and ctx.log) and the failure, per attempt
    log = detail.get_by_role("region", name="Log of shard 5")
    lines = log.get_by_role("list", name="Log lines of attempt 2").locator("li")
    expect(lines).to_have_count(4)
    for n in (1, 2, 3):
        expect(lines.nth(n - 1)).to_contain_text(f"noop shard 5: line {n} of 3")
    expect(lines.nth(0)).to_contain_text("WARNING")
    expect(lines.nth(1)).to_contain_text("INFO")
    expect(lines.nth(3)).to_contain_text("NoopFailure: noop asked to fail shard 5")
    log.get_by_role("button", name="Attempt 1").click()
    expect(log.get_by_role("list", name="Log lines of attempt 1").locator("li")).to_have_count(4)
    page.screenshot(path=str(ARTIFACTS / "04-shard-grid.png"), full_page=True)
    page.emulate_media(color_scheme="dark")  # 3 am
    page.screenshot(path=str(ARTIFACTS / "04-shard-grid-dark.png"), full_page=True)
    page.emulate_media(color_scheme="light")

    # the API agrees with what the page shows
    shards = local_up.api(f"/instances/{instance_id}/shards")["shards"]
    assert [s["status"] for s in shards] == ["succeeded"] * 5 + ["failed"] + ["succeeded"] * 2
    logged = local_up.api(f"/instances/{instance_id}/shards/5/logs?attempt=1")
    assert [line["message"] for line in logged["lines"][:3]] == [
        f"noop shard 5: line {n} of 3" for n in (1, 2, 3)
    ]
    assert (logged["outcome"], logged["complete"]) == ("failed", True)
    # and so does `iotsched logs`
    printed = local_up.cli("logs", instance_id, "--shard", "5")
    assert (printed["attempt"], printed["outcome"]) == (2, "failed")
    assert [line["message"] for line in printed["lines"][:3]] == [
        f"noop shard 5: line {n} of 3" for n in (1, 2, 3)
    ]
    assert "NoopFailure: noop asked to fail shard 5" in printed["lines"][3]["message"]

    # -- rerun this shard: a second run with shard 5 only ------------------------------------------
    detail.get_by_role("button", name="Rerun shard 5").click()
    expect(page.locator("h2")).to_have_text(f"{instance_id}~run2")
    grid = page.get_by_role("list", name="Shard grid")
    expect(grid.get_by_role("button", name=re.compile(r"not rerun"))).to_have_count(7)
    expect(page.get_by_role("region", name="Instance").locator("dd").first).to_have_text(
        "failed", timeout=120_000
    )
    page.screenshot(path=str(ARTIFACTS / "05-rerun.png"), full_page=True)

    # -- the task's history: both runs, a timeline ----------------------------------------------------
    page.goto(f"{local_up.url}#/tasks/device-scan")
    history = page.get_by_role("table", name="Instances").locator("tbody tr")
    expect(history).to_have_count(2)
    first = page.locator(f"tr[data-instance='{instance_id}']")
    expect(first).to_contain_text("failed")
    expect(first).to_contain_text("manual")
    expect(first).to_contain_text("2026-11-28")
    expect(first).to_contain_text("8/8")
    expect(first.locator("td[data-priority]")).to_have_text("low")
    expect(page.locator(f"tr[data-instance='{instance_id}~run2']")).to_contain_text("rerun")
    expect(page.locator(".timeline .bar")).to_have_count(2)
    page.screenshot(path=str(ARTIFACTS / "06-history.png"), full_page=True)

    # -- alerts ---------------------------------------------------------------------------------------------
    page.get_by_role("link", name="Alerts").click()
    alerts = page.get_by_role("table", name="Recent alerts")
    expect(alerts).to_contain_text(instance_id)
    expect(alerts).to_contain_text("instance failed")
    expect(alerts).to_contain_text("acme")
    page.get_by_label("Tenant").select_option("-")
    expect(page.locator("#view")).to_contain_text("No alert of this tenant.")
    page.get_by_label("Tenant").select_option("acme")
    expect(alerts).to_contain_text(instance_id)
    page.screenshot(path=str(ARTIFACTS / "07-alerts.png"), full_page=True)

    # -- versions, a rollback, and who changed what ------------------------------------------------
    definition = local_up.api("/tasks/device-scan")["definition"]
    changed = tmp_path / "v2.yaml"
    changed.write_text(json.dumps({"tasks": [{**definition, "description": "v2"}]}))
    assert local_up.cli("tasks", "apply", str(changed))["updated"] == ["device-scan"]
    page.goto(f"{local_up.url}#/tasks/device-scan")
    expect(page.locator(f"tr[data-instance='{instance_id}']")).to_contain_text("v1")
    versions = page.get_by_role("table", name="Versions")
    expect(versions.locator("tbody tr")).to_have_count(2)
    expect(versions.locator("tr[data-version='2']")).to_contain_text("(current)")
    expect(versions.locator("tr[data-version='2']")).to_contain_text('description: "" → "v2"')
    page.get_by_role("button", name="Roll device-scan back to version 1").click()
    expect(page.locator("#notice")).to_contain_text("version 3 has version 1's definition")
    expect(versions.locator("tr[data-version='3']")).to_contain_text("rollback")
    assert local_up.api("/tasks/device-scan")["definition"]["description"] == ""
    page.screenshot(path=str(ARTIFACTS / "08-versions.png"), full_page=True)
    page.get_by_role("link", name="Audit").click()
    audit = page.get_by_role("table", name="Audit records")
    # the CLI's changes and the console's, by the one person who made both
    pauses = audit.locator("tr[data-audit=pause]")
    expect(pauses.first.locator("td").nth(1)).to_have_text(local_principal())  # the console's
    expect(pauses.filter(has_text=note)).to_contain_text(local_principal())  # the CLI's
    expect(pauses.first).to_contain_text(f"note: {console_note}")
    expect(audit.locator("tr[data-audit=run]")).to_contain_text(instance_id)
    expect(audit.locator("tr[data-audit=rerun]")).to_contain_text(f"{instance_id}~run2")
    expect(audit.locator("tr[data-audit=rollback]")).to_contain_text(local_principal())
    page.screenshot(path=str(ARTIFACTS / "09-audit.png"), full_page=True)

    # -- tenants: their tasks and quotas, as the API lists them ----------------------------------------
    page.get_by_role("link", name="Tenants").click()
    tenants = page.get_by_role("table", name="Tenants").locator("tbody tr")
    expect(tenants).to_have_count(1)
    acme = page.locator("tr[data-tenant=acme]")
    expect(acme.get_by_role("link", name="device-scan")).to_be_visible()
    expect(acme.locator("td[data-quota=max_tasks]")).to_have_text("5")
    expect(acme.locator("td[data-quota=max_instances_per_minute]")).to_have_text("100")
    expect(acme.locator("td[data-quota=max_concurrent_shards]")).to_have_text("\u2013")
    (listed,) = local_up.api("/tenants")
    assert (listed["name"], listed["quotas"], listed["tasks"]) == (
        "acme",
        {"max_tasks": 5, "max_instances_per_minute": 100},
        ["device-scan"],
    )
    expect(acme.locator("td").first).to_contain_text(str(listed["task_count"]))
    page.get_by_label("Tenant", exact=True).select_option("-")
    expect(page.locator("#view")).to_contain_text("No tenant matches the filter.")
    page.get_by_label("Tenant", exact=True).select_option("acme")
    expect(tenants).to_have_count(1)
    page.screenshot(path=str(ARTIFACTS / "10-tenants.png"), full_page=True)


def test_a_long_log_is_followed_and_read_whole_from_the_bucket(
    local_up: Runtime, tmp_path: Path
) -> None:
    """A log over the record's inline limit goes to the data bucket on the emulator, and
    `iotsched logs --follow` prints it whole once the shard ends."""
    # A task of its own: a manual run of another task in the same minute is that run.
    chatty = tmp_path / "chatty.yaml"
    chatty.write_text(
        "tasks:\n  - id: chatty\n    handler: noop\n    trigger: {rate: 1h}\n"
        "    params: {log: 45}\n"
    )
    assert local_up.cli("tasks", "apply", str(chatty))["created"] == ["chatty"]
    instance_id = local_up.cli("run", "chatty")["instance_id"]
    followed = subprocess.run(
        [
            *(sys.executable, "-m", "iotsched.cli", "logs", instance_id),
            *("--shard", "0", "--follow", "--json"),
        ],
        capture_output=True,
        text=True,
        env=local_up.env,
        cwd=ROOT,
        timeout=180,
        check=False,
    )
    assert followed.returncode == 0, followed.stderr
    (view,) = [json.loads(line) for line in followed.stdout.splitlines()]
    assert (view["outcome"], view["source"], view["truncated"]) == ("succeeded", "object", True), (
        view
    )
    assert view["object_key"] == f"logs/30d/chatty/{instance_id}/0/1.jsonl"
    assert [line["message"] for line in view["lines"]] == [
        f"noop shard 0: line {n} of 45" for n in range(1, 46)
    ]
    local_up.cli("tasks", "delete", "chatty")  # the other tests know two tasks


def test_the_port_serves_the_console_the_api_and_nothing_else(local_up: Runtime) -> None:
    def fetch(
        path: str, method: str = "GET", body: bytes | None = None, *, as_json: bool = True
    ) -> tuple[int, str, bytes]:
        request = urllib.request.Request(local_up.url + path, data=body, method=method)
        if as_json and method not in ("GET", "HEAD"):  # every write, as the console's
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                return answer.status, answer.headers["Content-Type"], answer.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.headers["Content-Type"], exc.read()

    status, kind, page = fetch("")
    assert (status, kind) == (200, "text/html; charset=utf-8")
    assert b'<script type="module" src="console.js">' in page
    status, kind, _ = fetch("console.js")
    assert status == 200 and "javascript" in kind
    assert json.loads(fetch("config.json")[2]) == {"api": "/api", "local": True}
    # the API, every method, under /api
    assert fetch("api/tasks/nope")[0] == 404
    bad = fetch("api/tasks/device-scan", "PUT", b'{"id": "device-scan"}')
    assert bad[0] == 400 and b"handler" in bad[2]
    assert fetch("api/tasks/nope", "DELETE")[0] == 404
    assert fetch("api/tasks/nope", "DELETE", as_json=False)[0] == 415  # (what a form sends)
    # concurrent requests (the console fetches in parallel) each get their own answer
    paths = ["api/tasks/device-scan", "api/instances?task_id=device-scan"] * 30
    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(fetch, paths))
    for path, (status, _, data) in zip(paths, answers, strict=True):
        assert status == 200, (path, data)
        assert isinstance(json.loads(data), dict if "tasks" in path else list), path
    # the port acts as the operator; a header only it reads narrows it to tenants
    assert {t["id"] for t in json.loads(fetch("api/tasks")[2])} == {"device-scan", "every-minute"}
    as_acme = urllib.request.Request(
        local_up.url + "api/tasks", headers={"X-Iotsched-Local-Tenants": "acme"}
    )
    with urllib.request.urlopen(as_acme, timeout=10) as answer:
        assert [t["id"] for t in json.loads(answer.read())] == ["device-scan"]
    # no file outside the console's own
    assert fetch("..%2Fpyproject.toml")[0] == 404
    assert fetch("../pyproject.toml")[0] == 404
    assert fetch("nothing.js")[0] == 404
