"""`iotsched demo`: the demo scenario, from an empty emulator to its summary.

It seeds a simulated fleet (`fleet`), applies the example tasks (`examples/demo-tasks.yaml`) and
replays the simulated days on a manual clock that skips the minutes at which nothing is due,
with adverse tick deliveries (`ticks`) and a worker SIGKILLed mid-shard, beside the fleet phase
(`fleet_phase`). Each tick's work is waited for before the next. Once every instance ended it
summarises what the records and the effects hold (`effects`, `summary`):
`effects_applied_twice` is 0 when nothing was done twice.
"""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from iotsched.adapters.aws import AwsClients
from iotsched.bootstrap import build
from iotsched.core.shard_record import ShardStatus
from iotsched.core.task_definition import TaskDefinition
from iotsched.demo.fleet import seed_fleet
from iotsched.demo.fleet_phase import (
    fleet_summary,
    start_fleet,
    wait_fleet,
)
from iotsched.demo.summary import print_summary, summarise
from iotsched.demo.ticks import (
    Racer,
    guarantee_figures,
    plan,
)
from iotsched.local.delivery import TickResult
from iotsched.local.runtime import LocalRuntime
from iotsched.local.template import TemplateNotFound, find_template
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.definitions.control import pause_task
from iotsched.services.definitions.task_file import parse_task_file
from iotsched.services.wiring import Wiring
from iotsched.tasklib import registry
from iotsched.tasklib.resources import task_resources

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
DEMO_START = datetime(2026, 11, 29, 0, 0, tzinfo=UTC)
DEFAULT_DEVICES = 100_000
DEFAULT_DAYS = 3
MAX_DEVICES = 900_000  # ids are 6 digits
MAX_DAYS = 14
# A dead worker's message reappears after 24 s; a batch of shards may run 20 s.
#: 8 index buckets, not 32: every bucket of a delivered minute costs the emulator (which serves
#: one request at a time) a receive, two queries and a delete, and the demo's ten tasks need no
#: more. The tick still fans out, one message per bucket, to real dispatcher processes.
DEMO_PARAMETERS = {
    "WorkerTimeoutSeconds": "20",
    "ShardVisibilityTimeoutSeconds": "24",
    "IndexBuckets": "8",
}
DEMO_ENV = {"IOTSCHED_LEASE_MARGIN_S": "1", "POWERTOOLS_LOG_LEVEL": "WARNING"}
KILL_TASK = "archive-cold-data"
SWEEP_EVERY = timedelta(hours=6)
TICK_WAIT_S = 60.0  # at most this long for a tick's work before the next tick
FINAL_WAIT_S = 240.0
FLEET_WAIT_S = 300.0  # the rollouts take a few real minutes at most


class DemoError(Exception):
    """The demo cannot run (no template found, bad arguments)."""


def demo_tasks() -> list[TaskDefinition]:
    """The example tasks the demo applies."""
    data = yaml.safe_load((EXAMPLES / "demo-tasks.yaml").read_text(encoding="utf-8"))
    return parse_task_file(data, handlers=registry())


def tick_minutes(
    definitions: list[TaskDefinition], start: datetime, end: datetime
) -> list[datetime]:
    """Every minute in `[start, end)` at which at least one task is due, in order."""
    due: set[datetime] = set()
    for definition in definitions:
        for slot in definition.trigger.slots_after(start - timedelta(minutes=1)):
            if slot >= end:
                break
            due.add(slot)
    return sorted(due)


def run_demo(
    *,
    template: Path | None = None,
    console: Console | None = None,
    devices: int = DEFAULT_DEVICES,
    days: int = DEFAULT_DAYS,
    progress_console: Console | None = None,
) -> dict[str, Any]:
    """Run the scenario and return its summary (see the CLI's `demo --json`).

    `console` gets the narration and the summary table; the progress bars go to
    `progress_console` (default: `console`; none when both are None).
    """
    if not 30 <= devices <= MAX_DEVICES:
        raise DemoError(f"--devices must be between 30 and {MAX_DEVICES:,}, not {devices:,}")
    if not 1 <= days <= MAX_DAYS:
        raise DemoError(f"--days must be between 1 and {MAX_DAYS}, not {days}")
    say = console.print if console else (lambda *a, **k: None)
    bars = progress_console or console
    started = time.monotonic()
    end = DEMO_START + timedelta(days=days)
    try:
        template_path = find_template(template)
    except TemplateNotFound as exc:
        raise DemoError(str(exc)) from None
    runtime = LocalRuntime(
        template_path,
        manual_clock=True,
        workers=2,
        dispatchers=2,
        parameter_overrides=DEMO_PARAMETERS,
        env_overrides=DEMO_ENV,
        start_at=DEMO_START,
    )
    timings: dict[str, float] = {}
    with runtime:
        settings = runtime.settings()
        clients = AwsClients(region=settings.region, endpoint_url=settings.endpoint_url)
        services = build(settings, clients=clients)
        resources = task_resources(settings, clients)
        say(
            f"[bold]iotsched demo[/]: emulator at {runtime.endpoint_url}, 2 worker processes, "
            f"{devices:,} devices, {days} simulated days"
        )
        timings["start_s"] = round(time.monotonic() - started, 1)

        mark = time.monotonic()
        with _progress(bars) as progress:
            bar = progress.add_task(f"seeding {devices:,} devices", total=None)
            stats = seed_fleet(
                resources,
                devices=devices,
                start=DEMO_START,
                days=days,
                progress=lambda n: progress.update(bar, completed=n),
            )
        timings["seed_s"] = round(time.monotonic() - mark, 1)
        say(
            f"seeded {stats.devices:,} devices in {stats.groups} groups ({stats.device_blocks} "
            f"blocks), {stats.telemetry_rows:,} telemetry rows, {stats.accounts} accounts"
        )

        definitions = demo_tasks()
        apply_tasks(
            definitions, services.tasks, now=DEMO_START - timedelta(minutes=2), actor="local:demo"
        )
        say(f"applied {len(definitions)} tasks: {', '.join(d.id for d in definitions)}")
        fleet_ids = start_fleet(services)
        say(
            f"fired {len(fleet_ids)} fleet tasks by hand (rollout rates per real minute, abort "
            f"criteria): {', '.join(i.partition('@')[0] for i in fleet_ids)}"
        )

        mark = time.monotonic()
        minutes = tick_minutes(definitions, DEMO_START, end)
        deliveries = plan(minutes)
        say(
            "each due minute is delivered twice at once; "
            f"{sum(1 for d in deliveries if d.late)} are delivered again late (after the next "
            f"due minute's), {sum(1 for d in deliveries if d.race)} are raced by a second "
            "dispatcher (this process) that skips the bucket lease"
        )
        racers: list[Racer] = []
        late_ticks = 0
        killed: dict[str, Any] | None = None
        open_ids: list[str] = []
        dying: set[str] = set()
        next_sweep = DEMO_START + SWEEP_EVERY
        with _progress(bars) as progress:
            bar = progress.add_task(
                f"{days} simulated days, {len(minutes)} due minutes, duplicated, late, raced",
                total=len(minutes),
            )
            for delivery in deliveries:
                at = delivery.at
                _wait_for_work(services, open_ids, dying, TICK_WAIT_S)
                if at >= next_sweep:
                    # On the replayed timeline, as the ticks: the sweeper's own clock is the
                    # real one, to which every replayed fire time is long past (missed runs).
                    runtime.sweep(at, replay=True)
                    next_sweep += SWEEP_EVERY
                racer = None
                if delivery.race:
                    racer = Racer(services, at, buckets=settings.index_buckets)
                    racer.start()  # reads the due tasks before the tick is delivered
                results = runtime.tick(at, repeat=2)
                if racer is not None:
                    racer.join(TICK_WAIT_S)
                    racers.append(racer)
                    open_ids.extend(racer.opened)
                _track(results, open_ids)
                progress.advance(bar)
                if killed is None:
                    target = [i for i in open_ids if i.startswith(f"{KILL_TASK}@")]
                    if target:
                        killed = _kill_mid_shard(runtime, services, target[-1])
                        if killed:
                            dying.add(killed["instance_id"])
                            (progress.console.print if bars is not None else say)(
                                f"[red]SIGKILL[/] worker process {killed['worker']} (pid "
                                f"{killed['pid']}) in the middle of {killed['instance_id']} "
                                f"shard {killed['shard']}"
                            )
                if delivery.late is not None:  # after the kill: its shard is still running
                    _track(runtime.tick(delivery.late), open_ids)
                    late_ticks += 1
        timings["simulate_s"] = round(time.monotonic() - mark, 1)
        say("waiting for every instance to end (failover after the 24 s visibility timeout) ...")
        mark = time.monotonic()
        all_final = runtime.wait_for(
            lambda: _wait_for_work(services, open_ids, set(), 0) == 0, FINAL_WAIT_S, 0.5
        )
        timings["drain_s"] = round(time.monotonic() - mark, 1)
        mark = time.monotonic()
        # The simulated days are over: their tasks stop here (paused, with a note), so that the
        # sweeps of the fleet's real minutes do not find their next fires overdue.
        for definition in definitions:
            pause_task(
                definition.id, services, note="the demo's simulated days are over", actor="demo"
            )
        say("waiting for the fleet tasks' rollouts (real minutes) ...")
        fleet_final = wait_fleet(services, fleet_ids, runtime.sweep, FLEET_WAIT_S)
        timings["fleet_s"] = round(time.monotonic() - mark, 1)
        mark = time.monotonic()
        summary = summarise(
            runtime, services, resources, definitions, all_final and fleet_final, killed
        )
        summary.update(guarantee_figures(runtime.ticks, racers))
        summary["late_ticks_delivered"] = late_ticks
        summary["fleet"] = fleet_summary(services, fleet_ids)
        timings["summary_s"] = round(time.monotonic() - mark, 1)
        summary["seeded"] = {
            "devices": stats.devices,
            "groups": stats.groups,
            "device_blocks": stats.device_blocks,
            "telemetry_rows": stats.telemetry_rows,
            "accounts": stats.accounts,
            "silent_devices": stats.silent,
            "never_reported": stats.never_reported,
        }
        summary["simulated"] = {
            "start": DEMO_START.isoformat(),
            "end": end.isoformat(),
            "days": days,
            "due_minutes": len(minutes),
        }
    summary["timings"] = timings
    summary["duration_s"] = round(time.monotonic() - started, 1)
    if console:
        print_summary(console, summary)
    return summary


def _progress(console: Console | None) -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        disable=console is None,
        transient=True,
    )


def _track(results: list[TickResult], open_ids: list[str]) -> None:
    """Add the instances the ticks started or queued to those the demo waits for."""
    for result in results:
        open_ids.extend(result.report.get("claimed", []))
        open_ids.extend(result.report.get("queued", []))


def _wait_for_work(services: Wiring, open_ids: list[str], dying: set[str], limit: float) -> int:
    """Drop ended instances from `open_ids`; wait (up to `limit` s) until at most one is open
    besides those in `dying` (failing over). Returns how many are still open."""
    deadline = time.monotonic() + limit
    while True:
        still = []
        for instance_id in open_ids:
            instance = services.instances.get_instance(instance_id)
            if instance is None or not instance.status.final:
                still.append(instance_id)
        open_ids[:] = still
        busy = [i for i in still if i not in dying]
        if len(busy) <= (1 if limit > 0 else 0) or time.monotonic() >= deadline:
            return len(still)
        time.sleep(0.1)


def _kill_mid_shard(
    runtime: LocalRuntime, services: Wiring, instance_id: str
) -> dict[str, Any] | None:
    """SIGKILL the worker process that runs a shard of `instance_id`: a death mid-shard."""
    holder: list[tuple[int, int]] = []

    def running_shard() -> bool:
        for shard in services.instances.list_shards(instance_id):
            if shard.status is ShardStatus.RUNNING and shard.owner:
                process = shard.owner.split("#", 1)[0]
                for index, worker in enumerate(runtime.workers):
                    if worker.name == process and worker.state == "busy":
                        holder.append((index, shard.index))
                        return True
        return False

    if not runtime.wait_for(running_shard, 30, 0.05):
        return None
    index, shard = holder[0]
    worker = runtime.workers[index]
    assert worker.proc is not None
    info = {
        "worker": worker.name,
        "pid": worker.proc.pid,
        "instance_id": instance_id,
        "shard": shard,
    }
    runtime.kill_worker(index)
    return info


def stderr_console() -> Console | None:
    """A console on stderr for progress bars while stdout carries JSON (None when not a TTY)."""
    return Console(stderr=True) if sys.stderr.isatty() else None
