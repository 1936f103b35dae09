"""The console's overview in a real headless Chromium, against a local runtime on a manual clock:
instances that succeeded and failed over three hours, and a missed run; the bars, the duration
table, the failing tasks, the missed runs and the queue depths drawn are checked against the
records read from the store (and SQS), then narrowed by the tenant filter. Screenshots land in
test-artifacts/console/ (gitignored)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from click.testing import CliRunner

from iotsched.adapters.aws import AwsClients
from iotsched.bootstrap import build
from iotsched.cli.main import cli
from iotsched.core.instance_record import (
    InstanceRecord,
    InstanceStatus,
)
from iotsched.core.overview import durations, floor_hour
from iotsched.local.control import ControlServer
from iotsched.local.runtime import LocalRuntime
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.definitions.task_file import parse_task_file
from iotsched.services.operations.overview import overview
from iotsched.services.wiring import Wiring
from iotsched.tasklib import registry
from tests.integration.test_console import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS

pytestmark = [pytest.mark.slow, pytest.mark.moto, pytest.mark.timeout(480)]

PATIENCE_S = 120
TASKS = ("ok", "bad")


def _apply(services: Wiring, tasks: list[dict[str, Any]], now: datetime) -> None:
    apply_tasks(parse_task_file({"tasks": tasks}, handlers=registry()), services.tasks, now=now)


def _records(services: Wiring) -> list[InstanceRecord]:
    return [i for t in TASKS for i in services.instances.list_instances(task_id=t, limit=100)]


@pytest.fixture(scope="module")
def seeded(runtime: LocalRuntime, services: Wiring) -> datetime:
    """`ok` (tenant acme, succeeds) and `bad` (no tenant, fails) fired at the last three whole
    hours; `late`, due two hours ago and never fired, swept into a missed run. Returns the
    current hour."""
    hour = floor_hour(runtime.now())
    applied = hour - timedelta(hours=3) + timedelta(minutes=1)
    common = {"handler": "noop", "trigger": {"rate": "1h"}, "timeout_s": 10}
    _apply(
        services,
        [
            {**common, "id": "ok", "tenant": "acme"},
            {**common, "id": "bad", "params": {"fail": True}, "retry": {"max_attempts": 1}},
        ],
        applied,
    )
    for back in (2, 1, 0):
        (result,) = runtime.tick(hour - timedelta(hours=back))
        assert len(result.report["claimed"]) == 2, result.report

    def ended() -> bool:
        found = _records(services)
        return len(found) == 6 and all(i.status.final for i in found)

    assert runtime.wait_for(ended, PATIENCE_S, 0.5), [i.status for i in _records(services)]
    _apply(services, [{**common, "id": "late"}], applied)
    report = runtime.sweep(runtime.now(), replay=True)
    assert report, report
    return hour


@pytest.fixture(scope="module")
def page(runtime: LocalRuntime) -> Iterator[tuple[str, Any]]:
    if not CHROMIUM.exists():
        pytest.skip("!!! BROWSER TEST NOT RUN: /usr/bin/chromium is missing (make browser) !!!")
    from playwright.sync_api import expect, sync_playwright

    server = ControlServer(runtime, 0)
    server.start()
    url = f"http://127.0.0.1:{server.port}/"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
            )
            context = browser.new_context(viewport={"width": 1280, "height": 1400})
            page = context.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            outside: list[str] = []
            page.on(
                "request",
                lambda request: (
                    None if request.url.startswith(url) else outside.append(request.url)
                ),
            )
            page.set_default_timeout(20_000)
            # assertions wait as long as actions: a refresh on a loaded machine takes seconds
            expect.set_options(timeout=20_000)
            yield url, page
            context.close()
            browser.close()
        assert errors == [], errors
        assert outside == [], outside
    finally:
        server.stop()


#: A chart's bars as drawn, read in the page: hour -> status -> count (data attributes), and
#: whether each hour's segments add up to its total.
DRAWN_JS = """chart => [...chart.querySelectorAll("g.hour")].map(g => {
  const counts = {};
  for (const seg of g.querySelectorAll("rect.seg")) counts[seg.dataset.status] = Number(seg.dataset.count);
  const sum = Object.values(counts).reduce((a, b) => a + b, 0);
  return [g.dataset.hour, counts, sum === Number(g.dataset.total)];
})"""


def drawn(chart: Any) -> dict[str, dict[str, int]]:
    """The chart's bars with a count: hour -> status -> count."""
    rows = chart.evaluate(DRAWN_JS)
    assert all(adds_up for _, _, adds_up in rows)
    return {hour: counts for hour, counts, _ in rows if counts}


def expected(records: list[InstanceRecord], start: datetime) -> dict[str, dict[str, int]]:
    by_hour: dict[str, Counter[str]] = {}
    for inst in records:
        if inst.slot >= start:
            key = floor_hour(inst.slot).strftime("%Y-%m-%dT%H:00:00.000Z")
            by_hour.setdefault(key, Counter())[inst.status.value] += 1
    return {k: dict(v) for k, v in by_hour.items()}


def test_the_overview_draws_the_records(
    runtime: LocalRuntime, services: Wiring, seeded: datetime, page: tuple[str, Any]
) -> None:
    from playwright.sync_api import expect

    url, browser = page
    hour = seeded
    records = _records(services)
    browser.goto(url)  # the default page
    expect(browser.locator("h2")).to_have_text("Overview")
    day = browser.locator("figure[data-chart='Last 24 hours']")
    week = browser.locator("figure[data-chart='Last 7 days']")
    expect(day.locator("g.hour")).to_have_count(24)
    expect(week.locator("g.hour")).to_have_count(168)

    # -- the bars: every hour's segments are the records' counts by status -------------------------
    bars = drawn(day)
    assert bars == expected(records, hour - timedelta(hours=23))
    three = [(hour - timedelta(hours=n)).strftime("%Y-%m-%dT%H:00:00.000Z") for n in (2, 1, 0)]
    assert bars == {key: {"succeeded": 1, "failed": 1} for key in three}
    assert drawn(week) == bars
    assert day.get_attribute("data-total") == "6"
    seg = day.locator(f"g.hour[data-hour='{three[0]}'] rect.seg[data-status=failed]")
    expect(seg.locator("title")).to_contain_text("failed: 1")  # the tooltip a person reads
    expect(day.get_by_role("list", name="Last 24 hours: instances by status")).to_contain_text(
        "succeeded: 3"
    )

    # -- durations: p50/p95 per task as the records give them ----------------------------------------
    for figure in durations(records):
        row = browser.locator(
            f"table[aria-label='Durations per task'] tr[data-task={figure.task_id}]"
        )
        expect(row).to_have_attribute("data-count", "3")
        assert float(str(row.get_attribute("data-p50"))) == pytest.approx(figure.p50_s, abs=1e-3)
        assert float(str(row.get_attribute("data-p95"))) == pytest.approx(figure.p95_s, abs=1e-3)

    # -- failing now, missed runs, queues ----------------------------------------------------------------
    failing = browser.get_by_role("table", name="Tasks failing now")
    expect(failing.locator("tbody tr")).to_have_count(1)
    expect(failing.locator("tr[data-task=bad]")).to_have_attribute("data-failures", "3")
    latest_bad = max(
        (i for i in records if i.task_id == "bad"), key=lambda i: i.finished_at or i.created_at
    )
    assert latest_bad.status is InstanceStatus.FAILED
    expect(failing).to_contain_text(latest_bad.instance_id)
    missed = browser.locator("[data-missed]")
    expect(missed).to_have_attribute("data-missed", "1")
    late = f"late@{(hour - timedelta(hours=2)).strftime('%Y-%m-%dT%H:%MZ')}#missed_run"
    assert [a.alert_id for a in services.alert_log.recent() if a.type == "missed_run"] == [late]
    # the queues at rest: what SQS says now is what the page drew
    queues = browser.get_by_role("table", name="Queue depths").locator("tbody tr")
    expect(queues).to_have_count(4)
    sqs = AwsClients(region="us-east-1", endpoint_url=runtime.endpoint_url).sqs()
    named = {"high": "ShardHighQueue", "normal": "ShardQueue", "low": "ShardLowQueue"}
    for name, logical in {**named, "dead_letter": "ShardDLQ"}.items():
        depth = sqs.get_queue_attributes(
            QueueUrl=runtime.deployment.queues[logical],
            AttributeNames=["ApproximateNumberOfMessages"],
        )["Attributes"]["ApproximateNumberOfMessages"]
        expect(browser.locator(f"tr[data-queue={name}]")).to_have_attribute("data-visible", depth)
    browser.screenshot(path=str(ARTIFACTS / "10-overview.png"), full_page=True)

    # -- the tenant filter: acme's figures only -------------------------------------------------------
    browser.get_by_label("Tenant").select_option("acme")
    expect(day).to_have_attribute("data-total", "3")
    assert drawn(day) == {key: {"succeeded": 1} for key in three}
    expect(browser.locator("[data-failing]")).to_have_attribute("data-failing", "0")
    expect(browser.locator("[data-missed]")).to_have_attribute("data-missed", "0")
    browser.get_by_label("Tenant").select_option("-")
    expect(browser.locator("tr[data-task=bad][data-failures]")).to_have_count(1)
    expect(day).to_have_attribute("data-total", "3")
    assert drawn(day) == {key: {"failed": 1} for key in three}
    expect(browser.locator("[data-missed]")).to_have_attribute("data-missed", "1")
    browser.screenshot(path=str(ARTIFACTS / "10-overview-no-tenant.png"), full_page=True)


def test_the_cli_prints_the_same_figures(
    runtime: LocalRuntime, services: Wiring, seeded: datetime
) -> None:
    """`iotsched overview --json` against the runtime, found by its names (no IOTSCHED_*
    settings): the API's figures, the DLQ's depth included."""
    args = ["--endpoint-url", runtime.endpoint_url, "--stack", runtime.stack, "overview", "--json"]
    env: dict[str, str | None] = {
        "IOTSCHED_TABLE": None,
        "IOTSCHED_SHARD_QUEUE_URL": None,
        "IOTSCHED_ALERT_TOPIC_ARN": None,
        "IOTSCHED_INDEX_BUCKETS": str(runtime.settings().index_buckets),
    }
    result = CliRunner().invoke(cli, args, env=env)
    assert result.exit_code == 0, result.output
    printed = json.loads(result.output)
    api = overview(build(runtime.settings()), hours=24, keep=lambda t: True, operator=True)
    if api["end"] != printed["end"]:  # the hour turned between the two: the same window again
        printed = json.loads(CliRunner().invoke(cli, args, env=env).output)
    for key in ("hourly", "instances", "durations", "failing", "missed_runs"):
        assert printed[key] == api[key], key
    assert printed["instances"] == 6 and printed["missed_runs"]["count"] == 1
    assert [q["queue"] for q in printed["queues"]] == ["high", "normal", "low", "dead_letter"]
