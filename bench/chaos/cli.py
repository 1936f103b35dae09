"""`python -m bench.chaos`: the chaos run's command line (`make chaos`)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from bench.chaos.config import OPTIONS, PROG, ChaosConfig
from bench.chaos.driver import run_chaos
from iotsched.local.template import TemplateNotFound, find_template

_DEFAULTS = ChaosConfig()
_PRESET = ChaosConfig.default_timeouts()


def _config_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """One option per settable ChaosConfig field; unset (None) keeps the base configuration's."""
    for name, flag in reversed(OPTIONS):
        default = getattr(_DEFAULTS, name)
        command = click.option(
            flag,
            name,
            type=type(default),
            default=None,
            help=f"default {default} ({getattr(_PRESET, name)} with --default-timeouts)",
        )(command)
    return command


@click.command(
    help="Chaos run of iotsched on the local runtime; checks the invariants. Exit 0 if every "
    "invariant holds, 1 if not, 2 on bad use."
)
@_config_options
@click.option(
    "--default-timeouts",
    is_flag=True,
    help="the template's default timeouts (worker 300 s, visibility 1800 s, lease 20 s, a "
    "sweep every 60 s), on real time: measures failover against 60 s (median) and 90 s "
    "(max); several minutes",
)
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
@click.option("--template", type=click.Path(path_type=Path), default=None, help="template.yaml")
@click.option(
    "--results",
    type=click.Path(path_type=Path),
    default=None,
    help="markdown file whose chaos section receives the figures (`make chaos` passes "
    "bench/results.md); by default none: the summary stays in the work directory",
)
@click.option("--no-results", is_flag=True, help="do not write the results")
@click.pass_context
def chaos(
    ctx: click.Context,
    /,
    default_timeouts: bool,
    as_json: bool,
    template: Path | None,
    results: Path | None,
    no_results: bool,
    **fields: Any,
) -> None:
    base = _PRESET if default_timeouts else _DEFAULTS
    config = replace(base, **{name: value for name, value in fields.items() if value is not None})
    if config.instances < 1 or config.shards < 1 or not 0 <= config.kill_probability < 1:
        raise click.UsageError(
            "need --instances >= 1, --shards >= 1 and 0 <= --kill-probability < 1"
        )
    if config.problems():
        raise click.UsageError("; ".join(config.problems()))
    try:
        template_path = find_template(template)
    except TemplateNotFound as exc:
        raise click.UsageError(str(exc)) from exc
    target = None if no_results else results
    # With --json, progress and tables go to stderr and stdout carries only the JSON object.
    console = Console(stderr=as_json)
    summary = run_chaos(config, template=template_path, console=console, results=target)
    if as_json:
        sys.stdout.write(json.dumps(summary, default=str) + "\n")
    elif target is not None:
        console.print(f"figures written to {target}")
    else:
        console.print(f"summary written to {Path(summary['work_dir']) / 'summary.json'}")
    ctx.exit(0 if summary["ok"] else 1)


def main(argv: list[str] | None = None) -> None:
    """Run the command line; it always ends in SystemExit (0, 1, or 2 on bad use)."""
    chaos.main(args=argv, prog_name=PROG)
