"""The chaos run's driver: the local runtime under real process deaths.

One task (handler `chaos`, see `iotsched.tasklib.chaos`) fires once per emulated day, so that each
instance has its own business date and its own effect keys. Every tick is delivered twice,
concurrently, on two dispatcher processes. Meanwhile:

* shard workers SIGKILL their own process on `kill_probability` of their attempts, at a random
  unit in the middle of the shard (the handler logs the instant first);
* dispatchers SIGKILL themselves between a claim and the send of its shard messages with
  probability `dispatcher_kill_probability` (IOTSCHED_FAULT_KILL_AFTER_CLAIM); the run goes
  on firing (at most `extra_instances` more) until that happened at least once;
* the sweeper is delivered every `sweep_every_s` seconds (a manual clock fires nothing itself);
* the next day is ticked once fewer than `max_open` fired instances are open (the load the
  deployment is sized for, rather than one backlog of every shard).

The moto server runs inside this process, patched by `iotsched.local.moto_patches.fast_moto()` (costs that grow with the
data avoided; TransactWriteItems idempotent by ClientRequestToken, as on AWS). Then the
invariants are checked (`bench.chaos.checks`) and the figures reported (`bench.chaos.results`).
"""

from __future__ import annotations

import json
import os
import platform
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress, TaskID

from bench.chaos.checks import Observed, chaos_instances, check_invariants, starts_log
from bench.chaos.config import CHAOS_START, CHAOS_TASK, FINAL, SLOT, ChaosConfig, ChaosConfigError
from bench.chaos.report import print_chaos_summary, write_chaos_results
from iotsched.adversary.schedule import AdversaryConfig
from iotsched.bootstrap import build
from iotsched.core.instance_record import instance_id_for
from iotsched.local.moto_patches import fast_moto
from iotsched.local.processes import RuntimeError_
from iotsched.local.runtime import LocalRuntime
from iotsched.local.template import find_template
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.definitions.task_file import parse_task_file
from iotsched.services.wiring import Wiring
from iotsched.tasklib import registry


def run_chaos(
    config: ChaosConfig,
    *,
    template: Path | None = None,
    console: Console | None = None,
    results: Path | None = None,
    work_dir: Path | None = None,
) -> dict[str, Any]:
    """Run the scenario; return the summary (`ok` is False if an invariant failed).

    Raises ChaosConfigError if `config` breaks the template's rules (`ChaosConfig.problems`).

    `console` shows progress (None: silent); `results` is the markdown file whose "Chaos run"
    section receives the figures (None: not written); `work_dir` holds the death log and the
    function logs (default: a new temporary directory).
    """
    broken = config.problems()
    if broken:
        raise ChaosConfigError("the configuration breaks the product's rules: " + "; ".join(broken))
    started = time.monotonic()
    load_before = os.getloadavg()[0]
    template_path = find_template(template)
    work = work_dir or Path(tempfile.mkdtemp(prefix="iotsched-chaos-"))
    work.mkdir(parents=True, exist_ok=True)
    death_log = work / "deaths.jsonl"
    death_log.unlink(missing_ok=True)
    runtime = LocalRuntime(
        template_path,
        manual_clock=True,
        workers=config.workers,
        dispatchers=2,
        parameter_overrides={
            "WorkerTimeoutSeconds": str(config.worker_timeout_s),
            "ShardVisibilityTimeoutSeconds": str(config.visibility_timeout_s),
            # Failover first: one shard per invocation, so that a death strands no other shard
            # (template.yaml, WorkerBatchSize; the default of 10 is the cheaper setting).
            "WorkerBatchSize": str(config.batch_size),
            "MaxReceiveCount": str(config.max_receive_count),
            "ShardLeaseSeconds": str(config.shard_lease_s),
            "IndexBuckets": str(config.index_buckets),
            "DispatcherTimeoutSeconds": str(config.dispatcher_timeout_s),
        },
        env_overrides={
            "IOTSCHED_LEASE_MARGIN_S": str(config.lease_margin_s),
            "IOTSCHED_DISPATCH_LEASE_S": str(config.dispatch_lease_s),
            "IOTSCHED_FAULT_KILL_AFTER_CLAIM": str(config.dispatcher_kill_probability),
            "POWERTOOLS_LOG_LEVEL": "WARNING",
        },
        start_at=CHAOS_START,
        log_dir=work / "logs",
        adversary=AdversaryConfig.moderate(seed=config.seed) if config.adversary else None,
    )
    say = console.print if console else (lambda *a, **k: None)
    run = Observed(death_log=death_log)
    with fast_moto() as emulator, runtime:
        services = build(runtime.settings())
        say(
            f"[bold]iotsched chaos[/]: emulator at {runtime.endpoint_url}, {config.workers} "
            f"workers, 2 dispatchers, logs in {work}"
        )
        say(REAL_TIME_NOTE.format(c=config))
        _apply_task(services, config, death_log)
        with Progress(disable=console is None, console=console, transient=True) as progress:
            _fire(runtime, services, config, run, progress)
            _wait_final(runtime, services, config, run, progress, death_log)
        summary = check_invariants(runtime, services, config, run, death_log)
        summary["emulator"] = dict(emulator)
        summary["adversary"] = runtime.adversary.stats() if runtime.adversary else None
    summary["work_dir"] = str(work)
    summary["duration_s"] = round(time.monotonic() - started, 1)
    summary["machine"] = _machine(load_before)
    (work / "summary.json").write_text(json.dumps(summary, default=str, indent=1), "utf-8")
    if results is not None:
        write_chaos_results(results, summary)
    if console:
        print_chaos_summary(console, summary)
    return summary


#: What runs on real time, said in the output (the run takes minutes at the default timeouts).
REAL_TIME_NOTE = (
    "Real time: the workers, their leases ({c.lease_s} s, renewed every third), the task "
    "timeout ({c.task_timeout_s} s), the function timeout ({c.worker_timeout_s} s), the "
    "visibility timeout ({c.visibility_timeout_s} s) and the sweeps (every {c.sweep_every_s:g} "
    "s) all run on the wall clock; only the scheduler's tick clock is replayed (one slot a "
    "day, ticked at once)."
)


def _apply_task(services: Wiring, config: ChaosConfig, death_log: Path) -> None:
    task = {
        "id": CHAOS_TASK,
        "handler": "chaos",
        "description": "chaos run: effects through the ledger, random SIGKILLs",
        "trigger": {"rate": "1d"},
        "sharding": {
            "strategy": "id_range",
            "shards": config.shards,
            "key_space": "device_id",
            "id_max": config.shards * 1000,
        },
        # A tick whose dispatcher died leaves the task's clock where it was; the next tick
        # sees that slot as missed and must still fire it (not skip it).
        "misfire": {"policy": "catch_up", "max_catch_up": 500},
        "retry": {"max_attempts": config.max_attempts, "backoff_s": 0},
        "timeout_s": config.task_timeout_s,
        "instance_timeout_s": 3600,
        "params": {
            "effects": config.effects,
            "kill_probability": config.kill_probability,
            "unit_seconds": config.unit_seconds,
            "death_log": str(death_log),
            # with batches: which invocation holds which records when (see `stranded_records`)
            **({"start_log": str(starts_log(death_log))} if config.batch_size > 1 else {}),
            "seed": config.seed,
        },
    }
    definitions = parse_task_file({"tasks": [task]}, handlers=registry())
    apply_tasks(definitions, services.tasks, now=CHAOS_START - timedelta(minutes=1))


def _tick(runtime: LocalRuntime, run: Observed, at: datetime) -> None:
    """Deliver the tick for `at` twice, concurrently; a dispatcher death is counted, not fatal."""
    run.tick_calls += 1
    run.deliveries += 2
    try:
        results = runtime.tick(at, repeat=2)
    except RuntimeError_:
        # A dispatcher host died mid-invocation (the fault after a claim): the runtime has
        # started a new one; the claim it left in `planning` is resumed later.
        run.dispatcher_kills += 1
        return
    run.tick_reports.extend(r.report for r in results)


def _maybe_sweep(runtime: LocalRuntime, config: ChaosConfig, run: Observed) -> None:
    if time.monotonic() - run.last_sweep < config.sweep_every_s:
        return
    run.last_sweep = time.monotonic()
    try:
        report = runtime.sweep(runtime.now())
    except RuntimeError_:
        run.sweep_errors += 1
        return
    run.sweeps += 1
    for key, value in report.items():
        if isinstance(value, list):
            run.sweep_totals[key] += len(value)
    swept_at = time.time()
    run.requeues.extend((swept_at, str(name)) for name in report.get("requeued_shards", []))


def _fire(
    runtime: LocalRuntime,
    services: Wiring,
    config: ChaosConfig,
    run: Observed,
    progress: Progress,
) -> None:
    """Tick day after day; go on (bounded) until a dispatcher died between claim and send.

    The next day is ticked once at most `max_open` fired instances are still open: the load a
    deployment is sized for. (Ticking all days at once would queue every shard behind a
    backlog that the emulator works off in minutes, and a shard message the sweeper re-sends
    would wait behind all of it: that measures the backlog, not failover.)
    """
    bar = progress.add_task("ticks (each delivered twice)", total=config.instances)
    started = time.monotonic()
    limit = config.instances + config.extra_instances
    n = 0
    while n < config.instances or (
        run.dispatcher_kills < config.min_dispatcher_kills and n < limit
    ):
        if not _wait_open_below(runtime, services, config, run, progress, bar):
            break  # stuck: the checks will say what is open
        at = CHAOS_START + n * SLOT
        _tick(runtime, run, at)
        run.ticks.append(at)
        run.open_slots.append(at)
        n += 1
        progress.update(bar, total=max(config.instances, n), completed=n)
        _maybe_sweep(runtime, config, run)
    run.fire_s = round(time.monotonic() - started, 1)


def _wait_open_below(
    runtime: LocalRuntime,
    services: Wiring,
    config: ChaosConfig,
    run: Observed,
    progress: Progress,
    bar: TaskID,
) -> bool:
    """Sweep and wait until fewer than `max_open` fired instances are open (False: timed out)."""
    deadline = time.monotonic() + config.final_within_s
    while True:
        # (one GetItem per open slot: cheaper on the emulator than listing every instance)
        run.open_slots = [s for s in run.open_slots if not _final(services, s)]
        open_ = len(run.open_slots)
        progress.update(
            bar,
            description=f"ticks (each delivered twice): {open_} open, dispatcher deaths "
            f"{run.dispatcher_kills}, worker deaths {_count_lines(run.death_log)}",
        )
        if open_ < config.max_open:
            return True
        if time.monotonic() > deadline:
            return False
        _maybe_sweep(runtime, config, run)
        time.sleep(0.5)


def _wait_final(
    runtime: LocalRuntime,
    services: Wiring,
    config: ChaosConfig,
    run: Observed,
    progress: Progress,
    death_log: Path,
) -> None:
    """Sweep and wait until every fired slot has a final instance, or the bound passes."""
    expected = len(run.ticks)
    bar: TaskID = progress.add_task("instances final", total=expected)
    since = time.monotonic()
    deadline = since + config.final_within_s
    last_redelivery = since
    while time.monotonic() < deadline:
        _maybe_sweep(runtime, config, run)
        instances = chaos_instances(services)
        done = sum(1 for i in instances if i.status in FINAL)
        progress.update(
            bar,
            completed=done,
            description=f"instances final, worker deaths {_count_lines(death_log)}",
        )
        if done == expected and len(instances) == expected:
            run.final_after_s = round(time.monotonic() - since, 1)
            return
        # Both deliveries of the last tick may have died before claiming every slot: once the
        # dispatch lease has passed, deliver that tick again (as EventBridge's retry would).
        if (
            len(instances) < expected
            and time.monotonic() - last_redelivery > config.dispatch_lease_s + 1
        ):
            _tick(runtime, run, run.ticks[-1])
            last_redelivery = time.monotonic()
        time.sleep(2.0)


def _final(services: Wiring, slot: datetime) -> bool:
    instance = services.instances.get_instance(instance_id_for(CHAOS_TASK, slot))
    return instance is not None and instance.status in FINAL


def _count_lines(path: Path) -> int:
    try:
        with path.open("rb") as handle:
            return sum(1 for _ in handle)
    except FileNotFoundError:
        return 0


def _machine(load_before: float) -> str:
    """The machine, as the results state it (it is shared: the load is part of the figures)."""
    return (
        f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}, load average {load_before:.1f} at the start, "
        f"{os.getloadavg()[0]:.1f} at the end"
    )
