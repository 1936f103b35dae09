"""`python -m bench.chaos`: the chaos run's command line (`make chaos`)."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from rich.console import Console

from bench.chaos.config import OPTIONS, PROG, ChaosConfig
from bench.chaos.driver import run_chaos
from iotsched.local.demo import DemoError, find_template


def main(argv: list[str] | None = None) -> int:
    """Exit 0 if every invariant holds, 1 if not, 2 on bad use."""
    defaults = ChaosConfig()
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Chaos run of iotsched on the local runtime; checks the invariants.",
    )
    preset = ChaosConfig.default_timeouts()
    for name, flag in OPTIONS:
        default = getattr(defaults, name)
        parser.add_argument(
            flag,
            dest=name,
            type=type(default),
            default=None,
            help=f"default {default} ({getattr(preset, name)} with --default-timeouts)",
        )
    parser.add_argument(
        "--default-timeouts",
        action="store_true",
        help="the template's default timeouts (worker 300 s, visibility 1800 s, lease 20 s, a "
        "sweep every 60 s), on real time: measures failover against 60 s (median) and 90 s "
        "(max); several minutes",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--template", type=Path, default=None, help="template.yaml")
    parser.add_argument(
        "--results",
        type=Path,
        default=None,
        help="markdown file whose chaos section receives the figures (`make chaos` passes "
        "bench/results.md); by default none: the summary stays in the work directory",
    )
    parser.add_argument("--no-results", action="store_true", help="do not write the results")
    args = parser.parse_args(argv)
    base = preset if args.default_timeouts else defaults
    config = replace(
        base,
        **{name: getattr(args, name) for name, _ in OPTIONS if getattr(args, name) is not None},
    )
    if config.instances < 1 or config.shards < 1 or not 0 <= config.kill_probability < 1:
        parser.error("need --instances >= 1, --shards >= 1 and 0 <= --kill-probability < 1")
    if config.problems():
        parser.error("; ".join(config.problems()))
    try:
        template = find_template(args.template)
    except DemoError as exc:
        parser.error(str(exc))
    results = None if args.no_results else args.results
    # With --json, progress and tables go to stderr and stdout carries only the JSON object.
    console = Console(stderr=args.json)
    summary = run_chaos(config, template=template, console=console, results=results)
    if args.json:
        sys.stdout.write(json.dumps(summary, default=str) + "\n")
    elif results is not None:
        console.print(f"figures written to {results}")
    else:
        console.print(f"summary written to {Path(summary['work_dir']) / 'summary.json'}")
    return 0 if summary["ok"] else 1
