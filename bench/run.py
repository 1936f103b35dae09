"""`python -m bench`: run the benchmarks, write bench/results.json and bench/results.md.

Profiles (sizes and runs; timed figures are medians of the runs):

* default (`make bench`, a few minutes on 2 CPUs): the full sizes where the emulator allows
  it in that time, smaller ones (stated in the results) where it does not;
* `--full`: the full sizes everywhere (100 × 100 shards counted, 10,000-shard dispatch,
  a 10,000-task tick, 1,000 peer jobs); tens of minutes on the emulator; written to
  bench/results-full.json and bench/results-full.md, which the default report summarises;
* `--quick`: a smoke run of every benchmark at tiny sizes, one run each; it writes to a
  temporary directory unless `--out` names one.
"""

# ruff: noqa: RUF002  (a multiplication sign in the docstring)

from __future__ import annotations

import os
import shlex
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from bench.common import BENCH_DIR, machine, prepare_environment
from bench.report import FULL_STEM, load, results_json, write
from bench.report import rewrite as rewrite_results

PROFILES: dict[str, dict[str, dict[str, int]]] = {
    "quick": {
        "planning": {"runs": 2},
        "coldstart": {"runs": 1},
        "cost": {
            "instances": 1,
            "shards": 20,
            "long_instances": 2,
            "long_shards": 5,
            "fleet_instances": 1,
        },
        "dispatch": {"shards": 200, "pairs": 1},
        "tick": {"tasks": 20, "runs": 1},
        "tick_fanout": {"tasks": 200},
        "throughput": {"shards": 20, "pairs": 1},
        "peer": {"jobs": 10, "runs": 1},
        "bigsend": {"shards": 2_000},
        "fairness": {"a_shards": 200, "b_shards": 10, "waiting_window_s": 10},
        "partitions": {
            "tick_tasks": 20,
            "instances": 2,
            "shards": 10,
            "long_instances": 2,
            "long_shards": 5,
            "reports": 2,
            "failing": 2,
            "failing_shards": 3,
            "capped_shards": 40,
            "rollout_shards": 60,
        },
    },
    "default": {
        "planning": {"runs": 7},
        "coldstart": {"runs": 15},
        "cost": {
            "instances": 5,
            "shards": 100,
            "long_instances": 2,
            "long_shards": 20,
            "fleet_instances": 5,
        },
        "dispatch": {"shards": 2_000, "pairs": 5},
        "tick": {"tasks": 100, "runs": 5},
        "tick_fanout": {"tasks": 2_000},
        "throughput": {"shards": 100, "pairs": 5},
        "peer": {"jobs": 40, "runs": 5},
        "bigsend": {"shards": 100_000},
        "fairness": {"a_shards": 2_000, "b_shards": 10},
        "partitions": {
            "tick_tasks": 1_000,
            "instances": 5,
            "shards": 100,
            "long_instances": 3,
            "long_shards": 20,
            "reports": 10,
            "failing": 5,
            "failing_shards": 10,
            "capped_shards": 400,
            "rollout_shards": 200,
        },
    },
    "full": {
        "planning": {"runs": 7},
        "coldstart": {"runs": 15},
        "cost": {
            "instances": 100,
            "shards": 100,
            "long_instances": 5,
            "long_shards": 50,
            "fleet_instances": 10,
        },
        "dispatch": {"shards": 10_000, "pairs": 5},
        "tick": {"tasks": 10_000, "runs": 1},
        "tick_fanout": {"tasks": 2_000},
        "throughput": {"shards": 200, "pairs": 5},
        "peer": {"jobs": 1_000, "runs": 5},
        "bigsend": {"shards": 100_000},
        "fairness": {"a_shards": 100_000, "b_shards": 10},
        "partitions": {
            "tick_tasks": 1_000,
            "instances": 20,
            "shards": 100,
            "long_instances": 5,
            "long_shards": 50,
            "reports": 50,
            "failing": 10,
            "failing_shards": 10,
            "capped_shards": 2_000,
            "rollout_shards": 1_000,
        },
    },
}
ORDER = (
    "planning",
    "coldstart",
    "cost",
    "partitions",
    "dispatch",
    "tick",
    "tick_fanout",
    "bigsend",
    "throughput",
    "peer",
    "fairness",
)


def _say(message: str) -> None:
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


def run(profile: str, only: set[str] | None = None) -> dict[str, Any]:
    """Every benchmark of `profile` (or those in `only`); a failure is recorded, not fatal."""
    from bench import (
        bigsend,
        coldstart,
        cost,
        dispatch,
        fairness,
        partitions,
        peer,
        planning,
        throughput,
        tick,
        tick_fanout,
    )

    sizes = PROFILES[profile]
    selected = [name for name in ORDER if only is None or name in only]
    figures: dict[str, Any] = {}
    errors: dict[str, str] = {}
    started = time.perf_counter()
    load_before = [round(x, 2) for x in os.getloadavg()]

    def attempt(name: str, fn: Callable[[], dict[str, Any]]) -> None:
        if name not in selected:
            return
        _say(f"bench: {name} {sizes[name]} ...")
        t = time.perf_counter()
        try:
            figures[name] = fn()
        except Exception as exc:
            traceback.print_exc()
            errors[name] = f"{type(exc).__name__}: {exc}"
        _say(f"bench: {name} done in {time.perf_counter() - t:.0f} s")

    attempt("planning", lambda: planning.run(**sizes["planning"]))
    attempt("coldstart", lambda: coldstart.run(**sizes["coldstart"]))
    attempt("cost", lambda: cost.run(**sizes["cost"]))
    attempt("partitions", lambda: partitions.run(**sizes["partitions"]))
    attempt("dispatch", lambda: dispatch.run(**sizes["dispatch"]))
    attempt("tick", lambda: tick.run(**sizes["tick"]))
    attempt("tick_fanout", lambda: tick_fanout.run(**sizes["tick_fanout"]))
    attempt("bigsend", lambda: bigsend.run(**sizes["bigsend"]))
    if {"throughput", "peer"} & set(selected):
        try:
            with throughput.local_runtime() as runtime:
                attempt("throughput", lambda: throughput.run(runtime, **sizes["throughput"]))
                attempt("peer", lambda: peer.run(runtime, **sizes["peer"]))
        except Exception as exc:  # the runtime itself did not start or stop
            traceback.print_exc()
            errors["local_runtime"] = f"{type(exc).__name__}: {exc}"
    attempt("fairness", lambda: fairness.run(**sizes["fairness"]))
    host = machine()
    host["load_average"] = {"before": load_before, "after": host.pop("load_average")}
    return {
        "profile": profile,
        "figures": figures,
        "errors": errors,
        "seconds": time.perf_counter() - started,
        "machine": host,
    }


def merged(existing: Path, fresh: dict[str, Any], command: str) -> dict[str, Any]:
    """The results in `existing` with `fresh`'s figures (and errors) in place of theirs, and a
    note saying which figures this run measured, when, and at what load."""
    results = load(existing)
    measured = sorted(fresh["figures"])
    results["figures"] = {**results["figures"], **fresh["figures"]}
    results["errors"] = {
        **{k: v for k, v in results["errors"].items() if k not in measured},
        **fresh["errors"],
    }
    host = fresh["machine"]
    load_avg = host["load_average"]
    results["notes"] = [
        *[n for n in results["notes"] if not n.startswith(_merge_prefix(measured))],
        f"{_merge_prefix(measured)} measured again on their own (`{command}`, {host['date']}, "
        f"{fresh['seconds']:.0f} s, load average {load_avg['before'][0]} at the start and "
        f"{load_avg['after'][0]} at the end); the other figures are from the run above.",
    ]
    return results


def _merge_prefix(measured: list[str]) -> str:
    return "The " + ", ".join(measured) + " figures were"


@click.command(help=(__doc__ or "").split("\n")[0])
@click.option("--quick", is_flag=True, help="tiny sizes, one run each (smoke)")
@click.option("--full", is_flag=True, help="the full sizes everywhere")
@click.option(
    "--only",
    multiple=True,
    type=click.Choice(ORDER),
    help="run only this benchmark (repeatable)",
)
@click.option(
    "--out", type=click.Path(path_type=Path), default=None, help="directory for the results"
)
@click.option(
    "--merge",
    is_flag=True,
    help="with --only: replace only those benchmarks' figures in the existing results "
    "(the others and their run's header are kept; a note records this run)",
)
@click.option(
    "--rewrite",
    is_flag=True,
    help="measure nothing: write results.md again from results.json",
)
@click.pass_context
def bench(
    ctx: click.Context,
    /,
    quick: bool,
    full: bool,
    only: tuple[str, ...],
    out: Path | None,
    merge: bool,
    rewrite: bool,
) -> None:
    """Exit 1 if a benchmark failed (targets missed are reported, not failures)."""
    if quick and full:
        raise click.UsageError("--quick and --full are exclusive")
    ctx.exit(
        _bench(ctx.obj, quick=quick, full=full, only=only, out=out, merge=merge, rewrite=rewrite)
    )


def main(argv: list[str] | None = None) -> None:
    """Entry point: `python -m bench`; it always ends in SystemExit."""
    args = list(argv) if argv is not None else sys.argv[1:]
    bench.main(args=args, prog_name="python -m bench", obj=args)


def _bench(
    argv: list[str],
    *,
    quick: bool,
    full: bool,
    only: tuple[str, ...],
    out: Path | None,
    merge: bool,
    rewrite: bool,
) -> int:
    stem = FULL_STEM if full else "results"
    if rewrite:
        _json, md = rewrite_results(out or BENCH_DIR, stem)
        _say(f"bench: wrote {md}")
        return 0
    if merge and not only:
        raise click.UsageError("--merge needs --only (a whole run replaces every figure anyway)")
    profile = "quick" if quick else "full" if full else "default"
    if out is None:
        out = Path(tempfile.mkdtemp(prefix="iotsched-bench-")) if quick else BENCH_DIR
    prepare_environment()
    results = run(profile, set(only) if only else None)
    command = "python -m bench" + "".join(f" {shlex.quote(a)}" for a in argv)
    results["command"] = "make bench" if command == "python -m bench" else command
    if merge and (out / f"{stem}.json").exists():
        results = merged(out / f"{stem}.json", results, command)

    json_path, md_path = write(results, out, stem=stem)
    summary = results_json(results)
    for key in (
        "requests_per_shard",
        "usd_per_million_shards",
        "usd_per_million_shards_30s",
        "request_ratio_to_floor",
        "usd_per_million_shards_5min",
        "ceiling_shards_per_s",
        "ceiling_instances_per_s",
        "binding_partition",
        "rollout_hottest_key_shards_per_s",
        "rollout_hottest_item_shards_per_s",
        "capped_backlog_hold_ms",
        "dispatch_ratio_to_floor",
        "throughput_ratio_to_floor",
        "tick_10k_due_seconds",
        "cold_start_ratio_to_floor",
        "plan_peak_mb",
        "peer_apscheduler_ratio",
        "big_instance_send_s",
        "tenant_fairness_p95_start_s",
        "tenant_fifo_p95_start_s",
        "tenant_fairness_same_priority_p95_s",
        "tenant_fairness_same_priority_capped_p95_s",
        "tenant_fifo_capped_p95_s",
        "requests_per_waiting_shard_per_minute",
    ):
        _say(f"  {key}: {summary.get(key)}")
    _say(f"bench: wrote {json_path} and {md_path} in {results['seconds']:.0f} s")
    return 1 if results["errors"] else 0


if __name__ == "__main__":
    main()
