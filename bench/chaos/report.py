"""The chaos run's report: its figures and invariants as terminal tables, and its own section
of a results file (`write_chaos_results`), which bench/report.py carries over as it is."""

from __future__ import annotations

import os
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.chaos.config import RESUME_SLACK_S, VISIBILITY_FACTOR
from bench.markdown import fmt_counter
from bench.report import (
    CHAOS_DEFAULT_TIMEOUTS_HEADING,
    CHAOS_HEADING,
)


def _chaos_figures(summary: dict[str, Any]) -> list[tuple[str, str]]:
    res = summary["resumption"]
    eff = summary["effects"]
    return [
        ("instances x shards", f"{summary['instances']} x {summary['config']['shards']}"),
        ("instances by status", fmt_counter(Counter(summary["instances_by_status"]))),
        (
            "instance claim -> final",
            f"median {summary['instance_duration_s']['median']} s, "
            f"max {summary['instance_duration_s']['max']} s (bound "
            f"{summary['config']['final_within_s']:g} s; at most "
            f"{summary['config']['max_open']} open at a time)",
        ),
        ("shards by status", fmt_counter(Counter(summary["shards_by_status"]))),
        (
            "attempts / worker SIGKILLs",
            f"{summary['attempts']} / {summary['worker_kills']} "
            f"({summary['kill_fraction']:.1%}); failovers on record {summary['failovers']}",
        ),
        (
            "death -> resumption",
            f"median {res['median_s']} s, p90 {res['p90_s']} s, max {res['max_s']} s "
            f"({_chaos_goal_text(summary['config'])}); "
            + (
                f"{res['via_sweeper']} via a sweeper re-send (median "
                f"{res['via_sweeper_median_s']} s)"
                if res["via_sweeper"]
                else "none via a sweeper re-send"
            ),
        ),
        *(
            [
                (
                    "death -> the batch's waiting records held again / started",
                    f"held by another invocation: median "
                    f"{summary['stranded']['held_again_median_s']} s, max "
                    f"{summary['stranded']['held_again_max_s']} s; first attempt started: median "
                    f"{summary['stranded']['median_s']} s, max {summary['stranded']['max_s']} s "
                    f"(over {summary['stranded']['waiting']} records the dead invocations had "
                    "received and not started)",
                )
            ]
            if summary["config"].get("batch_size", 1) > 1 and "stranded" in summary
            else []
        ),
        (
            "dispatcher kills (claim, no send)",
            f"{summary['dispatcher_kills']}; claims resumed {summary['dispatches_resumed']}",
        ),
        (
            "ticks / deliveries",
            f"{summary['ticks']} / {summary['tick_deliveries']}; duplicate claims rejected "
            f"{summary['duplicate_claims_rejected']}",
        ),
        (
            "effect keys",
            f"{eff['required']} required, {eff['applied_once']} applied once, "
            f"{eff['applied_more_than_once']} more than once, {eff['missing']} missing",
        ),
        (
            "sweeps",
            f"{summary['sweeps']}: "
            + (fmt_counter(Counter(summary["sweeper"])) or "nothing to do"),
        ),
        (
            "adversarial DynamoDB: faults injected",
            fmt_counter(Counter({k: v for k, v in summary["adversary"].items() if k != "requests"}))
            + f" (of {summary['adversary'].get('requests', 0)} DynamoDB requests)"
            if summary.get("adversary")
            else "off (plain moto)",
        ),
        ("dead-lettered shards", str(summary["dead_lettered_shards"])),
        (
            "worker function timeouts / respawns",
            f"{summary['function_timeouts']} / {summary['worker_respawns']}",
        ),
        (
            "ticking / last instance final",
            f"{summary['fire_s']} s / {summary['final_after_s']} s after the last tick",
        ),
        ("wall time", f"{summary['duration_s']} s"),
    ]


def _chaos_goal_text(config: dict[str, Any]) -> str:
    if config.get("resume_max_goal_s"):
        return f"goals: median {config['resume_median_goal_s']:g} s, max {config['resume_max_goal_s']:g} s"
    return f"goal {config['visibility_timeout_s'] + RESUME_SLACK_S} s"


def print_chaos_summary(console: Console, summary: dict[str, Any]) -> None:
    """The figures and the invariants as two tables."""
    figures = Table("figure", "value", title="chaos run")
    for name, value in _chaos_figures(summary):
        figures.add_row(name, value)
    console.print(figures)
    checks = Table("invariant", "", "detail", title="invariants")
    for inv in summary["invariants"]:
        checks.add_row(inv["name"], "[green]ok[/]" if inv["ok"] else "[red]FAIL[/]", inv["detail"])
    console.print(checks)
    console.print("[bold green]all invariants hold[/]" if summary["ok"] else "[bold red]FAILED[/]")


def _chaos_heading(config: dict[str, Any]) -> str:
    """The section a run's figures go to: batches of several records have their own."""
    if not config.get("default_timeouts_preset"):
        return CHAOS_HEADING
    batch = int(config.get("batch_size", 1))
    return CHAOS_DEFAULT_TIMEOUTS_HEADING + (f", batches of {batch}" if batch > 1 else "")


def chaos_results_section(summary: dict[str, Any]) -> str:
    """The "Chaos run" section of bench/results.md."""
    config = summary["config"]
    preset = bool(config.get("default_timeouts_preset"))
    if preset:
        intro = [
            _chaos_heading(config),
            "",
            f"Last run {datetime.now(UTC).strftime('%Y-%m-%d %H:%M')} UTC on "
            f"{summary.get('machine') or f'{os.cpu_count()} CPUs'}, on real time "
            f"({summary.get('duration_s')} s of wall time):",
            "",
            "```sh",
            summary["command"],
            "```",
            "",
            "The deployment is template.yaml's with its default timeouts: worker timeout "
            f"{config.get('worker_timeout_s')} s, shard-queue visibility timeout "
            f"{config.get('visibility_timeout_s')} s, shard lease "
            f"{config.get('shard_lease_s')} s (renewed every third by the worker), a sweep every "
            f"{config.get('sweep_every_s'):g} s as the template's rule; task timeout "
            f"{config.get('task_timeout_s')} s, shards of {config.get('effects')} units of "
            f"{config.get('unit_seconds'):g} s, "
            + (
                "one shard per worker invocation "
                if config.get("batch_size", 1) == 1
                else f"up to {config.get('batch_size')} shard messages per worker invocation "
            )
            + f"(`WorkerBatchSize={config.get('batch_size')}`), {config.get('workers')} worker "
            "processes. Workers SIGKILL themselves mid-shard; resumption is measured from the "
            "death (logged by the handler) to the next attempt's start, both on the wall clock"
            + (
                "; for the records a dead invocation had received and not started (the handler "
                "logs them as it dies), from the death to the first start of an attempt in "
                "another invocation that held them (the handler logs, as each attempt starts, "
                "the records its invocation has not started), and to their own first start."
                if config.get("batch_size", 1) > 1
                else "."
            ),
            "",
        ]
    else:
        intro = [
            CHAOS_HEADING,
            "",
            f"Last run {datetime.now(UTC).strftime('%Y-%m-%d %H:%M')} UTC on "
            f"{summary.get('machine') or f'{os.cpu_count()} CPUs'}, by `make chaos`:",
            "",
            "```sh",
            summary["command"],
            "```",
            "",
            "The deployment is template.yaml's, scaled down with its rules kept: one shard per "
            "worker invocation (`WorkerBatchSize=1`, the failover-first setting; the default is "
            f"10), worker timeout {config.get('worker_timeout_s')} s, shard-queue "
            f"visibility timeout {config.get('visibility_timeout_s')} s (>= {VISIBILITY_FACTOR}x "
            f"the worker timeout), task timeout {config.get('task_timeout_s')} s + lease margin "
            f"{config.get('lease_margin_s')} s, {config.get('workers')} worker processes (the "
            "event source's concurrency), a sweep every "
            f"{config.get('sweep_every_s')} s.",
            "",
        ]
    lines = [
        *intro,
        "| figure | value |",
        "|---|---|",
        *(f"| {name} | {value} |" for name, value in _chaos_figures(summary)),
        "",
        "| invariant | result | detail |",
        "|---|---|---|",
        *(
            f"| {i['name']} | {'ok' if i['ok'] else 'FAIL'} | {i['detail']} |"
            for i in summary["invariants"]
        ),
        "",
        f"Result: {'all invariants hold' if summary['ok'] else 'FAILED'}.",
        "",
    ]
    return "\n".join(lines)


def write_chaos_results(path: Path, summary: dict[str, Any]) -> None:
    """Replace (or add) the "Chaos run" section of `path` (the `--default-timeouts` run's own
    section for that run); other sections stay as they are."""
    text = path.read_text(encoding="utf-8") if path.exists() else "# Benchmark results\n\n"
    section = chaos_results_section(summary)
    heading = _chaos_heading(summary["config"])
    start = text.find(heading + "\n")
    if start < 0:
        text = text.rstrip("\n") + "\n\n" + section
    else:
        end = text.find("\n## ", start + len(heading))
        text = text[:start] + section + ("" if end < 0 else text[end + 1 :])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
