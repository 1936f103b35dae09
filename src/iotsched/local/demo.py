"""`iotsched demo`: a full IoT scenario on the embedded emulator.

It applies the example tasks, replays two hours of ticks (each delivered twice, concurrently, as
EventBridge may), SIGKILLs a worker process in the middle of a shard so that failover happens for
real, waits until every instance has ended, and summarises what the records say.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from iotsched.bootstrap import build
from iotsched.core.records import ShardStatus
from iotsched.local.runtime import LocalRuntime
from iotsched.services.tasks import apply_tasks, parse_task_file
from iotsched.tasklib import registry

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
DEMO_START = datetime(2026, 11, 28, 22, 58, tzinfo=UTC)
DEMO_HOURS = 2
# Short timeouts so failover takes seconds: a dead worker's message reappears after 8 s.
DEMO_PARAMETERS = {"WorkerTimeoutSeconds": "6", "ShardVisibilityTimeoutSeconds": "8"}
DEMO_ENV = {"IOTSCHED_LEASE_MARGIN_S": "1", "POWERTOOLS_LOG_LEVEL": "WARNING"}


class DemoError(Exception):
    """The demo cannot run (no template found)."""


def find_template(explicit: Path | None) -> Path:
    """template.yaml: the given path, or the nearest one from the working directory up."""
    if explicit is not None:
        if not explicit.is_file():
            raise DemoError(f"{explicit}: no such template")
        return explicit
    here = Path.cwd().resolve()
    for directory in (here, *here.parents):
        candidate = directory / "template.yaml"
        if candidate.is_file():
            return candidate
    raise DemoError(
        "template.yaml not found here or above; run from the repository or pass --template"
    )


def run_demo(*, template: Path | None = None, console: Console | None = None) -> dict[str, Any]:
    """Run the scenario and return its summary (see the CLI's `demo --json`)."""
    say = console.print if console else (lambda *a, **k: None)
    started = time.monotonic()
    runtime = LocalRuntime(
        find_template(template),
        manual_clock=True,
        workers=2,
        dispatchers=2,
        parameter_overrides=DEMO_PARAMETERS,
        env_overrides=DEMO_ENV,
        start_at=DEMO_START,
    )
    with runtime:
        say(f"[bold]iotsched demo[/]: emulator at {runtime.endpoint_url}, 2 worker processes")
        services = build(runtime.settings())
        data = yaml.safe_load((EXAMPLES / "demo-tasks.yaml").read_text(encoding="utf-8"))
        definitions = parse_task_file(data, handlers=registry())
        apply_tasks(definitions, services.tasks, now=DEMO_START)
        say(f"applied {len(definitions)} tasks: {', '.join(d.id for d in definitions)}")

        minutes = DEMO_HOURS * 60 + 3
        killed: dict[str, Any] | None = None
        with Progress(disable=console is None, console=console, transient=True) as progress:
            bar = progress.add_task("replaying ticks (each delivered twice)", total=minutes)
            for n in range(minutes):
                at = DEMO_START + timedelta(minutes=n)
                runtime.tick(at, repeat=2)
                progress.advance(bar)
                if killed is None and at.minute == 0 and at > DEMO_START:
                    killed = _kill_busy_worker(runtime, services, "device-scan")
                    if killed:
                        say(
                            f"[red]SIGKILL[/] worker process {killed['worker']} (pid "
                            f"{killed['pid']}) in the middle of {killed['shard']}"
                        )
        say("waiting for every instance to end (failover after the 8 s visibility timeout) ...")
        all_final = runtime.wait_for(
            lambda: all(i.status.final for i in services.instances.list_instances(limit=1000)),
            timeout=180,
            poll=0.5,
        )
        summary = _summarise(runtime, services, all_final, killed)
    summary["duration_s"] = round(time.monotonic() - started, 1)
    if console:
        _print_summary(console, summary)
    return summary


def _kill_busy_worker(runtime: LocalRuntime, services: Any, task_id: str) -> dict[str, Any] | None:
    """SIGKILL the worker process that holds a running shard of `task_id`: a death mid-shard."""
    holder: list[tuple[int, str]] = []

    def running_shard() -> bool:
        for instance in services.instances.list_instances(task_id=task_id, limit=5):
            for shard in services.instances.list_shards(instance.instance_id):
                if shard.status is ShardStatus.RUNNING and shard.owner:
                    process = shard.owner.split("#", 1)[0]
                    for index, worker in enumerate(runtime.workers):
                        if worker.name == process and worker.state == "busy":
                            holder.append((index, f"{instance.instance_id} shard {shard.index}"))
                            return True
        return False

    if not runtime.wait_for(running_shard, 20, 0.02):
        return None
    index, shard = holder[0]
    worker = runtime.workers[index]
    assert worker.proc is not None
    info = {"worker": worker.name, "pid": worker.proc.pid, "shard": shard}
    runtime.kill_worker(index)
    return info


def _summarise(
    runtime: LocalRuntime, services: Any, all_final: bool, killed: dict[str, Any] | None
) -> dict[str, Any]:
    instances = services.instances.list_instances(limit=1000)
    shard_status: Counter[str] = Counter()
    failovers = 0
    for inst in instances:
        records = {s.index: s for s in services.instances.list_shards(inst.instance_id)}
        for index in range(inst.plan.count if inst.status.value != "skipped" else 0):
            record = records.get(index)
            shard_status[record.status.value if record else ShardStatus.PENDING.value] += 1
            if record:
                # An attempt that never recorded an end, followed by another: its worker died.
                failovers += sum(1 for a in record.attempts[:-1] if a.ended_at is None)
    alerts = _drain_alerts(runtime)
    return {
        "all_final": all_final,
        "instances": len(instances),
        "instances_by_status": dict(Counter(i.status.value for i in instances)),
        "shards_by_status": dict(shard_status),
        "failovers": failovers,
        "duplicate_claims_rejected": sum(
            int(t.report.get("duplicate_claims", 0)) for t in runtime.ticks
        ),
        "ticks_delivered": len(runtime.ticks),
        "worker_kills": runtime.kills,
        "function_timeouts": runtime.timeouts,
        "killed": killed,
        "alerts_published": len(alerts),
        "alerts": [
            {k: a[k] for k in ("type", "severity", "task_id", "instance_id", "failed_shards")}
            for a in alerts
        ],
    }


def _drain_alerts(runtime: LocalRuntime) -> list[dict[str, Any]]:
    url = runtime.deployment.alert_inbox_url
    if url is None:
        return []
    from iotsched.adapters.aws import AwsClients

    sqs = AwsClients(region="us-east-1", endpoint_url=runtime.endpoint_url).sqs()
    alerts: list[dict[str, Any]] = []
    while True:
        batch = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
        if not batch:
            return alerts
        for message in batch:
            alerts.append(json.loads(json.loads(message["Body"])["Message"]))
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])


def _print_summary(console: Console, summary: dict[str, Any]) -> None:
    table = Table("figure", "value", title="demo summary")
    table.add_row("instances by status", json.dumps(summary["instances_by_status"]))
    table.add_row("shards by status", json.dumps(summary["shards_by_status"]))
    table.add_row("failovers (dead attempt taken over)", str(summary["failovers"]))
    table.add_row("duplicate claims rejected", str(summary["duplicate_claims_rejected"]))
    table.add_row("ticks delivered", str(summary["ticks_delivered"]))
    table.add_row("alerts published", str(summary["alerts_published"]))
    table.add_row("every instance final", "yes" if summary["all_final"] else "[red]NO[/]")
    table.add_row("wall time", f"{summary['duration_s']} s")
    console.print(table)
    for alert in summary["alerts"]:
        console.print(
            f"  alert {alert['type']} \\[{alert['severity']}] {alert['instance_id']}: "
            f"failed shards {[s['shard'] for s in alert['failed_shards']]}"
        )
