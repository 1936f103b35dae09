"""The reports the benchmarks write: bench/results.json and bench/results.md.

* The results files: `write` (results.json with its headline keys first, results.md), `load`
  and `rewrite` (the markdown again from a run's JSON); the "Chaos run" sections of results.md
  belong to the chaos run and are carried over as they are, after a benchmark run's sections.
* results.md: the header, the summary table, one section per benchmark, the emulator's notes,
  and the full-size run's summary when results-full.json lies beside it.
* The chaos run's sections are kept here by heading (`chaos_section`); bench/chaos/report.py
  writes them.
"""

# ruff: noqa: RUF001  (the report's typography: multiplication signs and en dashes)

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.markdown import plural, table
from bench.report_summary import summary_rows
from bench.report_timings import (
    coldstart_section,
    dispatch_section,
    fairness_section,
    peer_section,
    planning_section,
    throughput_section,
    tick_section,
)
from bench.report_units import cost_section, partitions_section

FULL_STEM = "results-full"
CHAOS_HEADING = "## Chaos run"
#: The chaos run's `--default-timeouts` section (its own: `make chaos` replaces the one above).
CHAOS_DEFAULT_TIMEOUTS_HEADING = "## Chaos run at the template's default timeouts"


# The results files.


def chaos_section(text: str) -> str:
    """Every chaos section of an existing results.md ('' if none), in their order.

    `make chaos` writes "Chaos run" and `--default-timeouts` its own "Chaos run at ..." section:
    any level-2 heading that starts with "Chaos run" is theirs.
    """
    sections: list[str] = []
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("## "):
            if current is not None:
                sections.append("\n".join(current).rstrip("\n") + "\n")
            current = [line] if line.startswith(CHAOS_HEADING) else None
        elif current is not None:
            current.append(line)
    if current is not None:
        sections.append("\n".join(current).rstrip("\n") + "\n")
    return "\n".join(sections)


def load(json_path: Path) -> dict[str, Any]:
    """A run's results as `write` takes them, from its results JSON."""
    saved = json.loads(json_path.read_text(encoding="utf-8"))
    return {
        "profile": saved["profile"],
        "command": saved["command"],
        "machine": saved["machine"],
        "seconds": saved["seconds"],
        "errors": saved["errors"],
        "notes": saved.get("notes", []),
        "figures": saved["details"],
    }


def rewrite(directory: Path, stem: str = "results") -> tuple[Path, Path]:
    """Write the markdown again from the JSON (after a change to this module's text)."""
    return write(load(directory / f"{stem}.json"), directory, stem=stem)


def write(results: dict[str, Any], directory: Path, stem: str = "results") -> tuple[Path, Path]:
    """Write `stem`.json and `stem`.md into `directory`; returns their paths.

    The default run's markdown also summarises the full-size run (results-full.json) when
    one lies beside it, and keeps the "Chaos run" sections of the file it replaces.
    """
    directory.mkdir(parents=True, exist_ok=True)
    json_path = directory / f"{stem}.json"
    md_path = directory / f"{stem}.md"
    json_path.write_text(json.dumps(results_json(results), indent=2) + "\n", encoding="utf-8")
    previous = md_path.read_text(encoding="utf-8") if md_path.exists() else ""
    text = markdown(results)
    full = directory / f"{FULL_STEM}.json"
    if stem != FULL_STEM and results["profile"] != "full" and full.exists():
        text = text.rstrip("\n") + "\n\n" + full_run_section(load(full))
    chaos = chaos_section(previous)
    if chaos:
        text = text.rstrip("\n") + "\n\n" + chaos
    md_path.write_text(text, encoding="utf-8")
    return json_path, md_path


# results.json.


def results_json(results: dict[str, Any]) -> dict[str, Any]:
    """The headline keys first, then everything measured."""
    figures = results["figures"]
    cost = figures.get("cost", {})
    dispatch = figures.get("dispatch", {})
    throughput = figures.get("throughput", {})
    tick = figures.get("tick", {})
    cold = figures.get("coldstart", {})
    plan = figures.get("planning", {})
    peer = figures.get("peer", {})
    parts = figures.get("partitions", {})
    return {
        "requests_per_shard": {
            **cost.get("requests_per_shard", {}),
            "dynamodb_wru": cost.get("dynamodb_wru_per_shard"),
            "dynamodb_rru": cost.get("dynamodb_rru_per_shard"),
        }
        if cost
        else None,
        "usd_per_million_shards": cost.get("usd_per_million_shards"),
        "usd_per_million_shards_30s": cost.get("usd_per_million_shards_30s"),
        "request_ratio_to_floor": cost.get("request_ratio_to_floor"),
        "usd_per_million_shards_5min": cost.get("usd_per_million_shards_5min"),
        "ceiling_shards_per_s": parts.get("ceiling_shards_per_s"),
        "ceiling_instances_per_s": parts.get("ceiling_instances_per_s"),
        "ceiling_rule": parts.get("rule"),
        "binding_partition": parts.get("binding"),
        "rollout_hottest_key_shards_per_s": parts.get("rollout_hottest_key_shards_per_s"),
        "rollout_hottest_key": parts.get("rollout_hottest_key"),
        "rollout_hottest_item_shards_per_s": parts.get("rollout_hottest_item_shards_per_s"),
        "rollout_hottest_item": parts.get("rollout_hottest_item"),
        "capped_backlog_hold_ms": parts.get("capped_backlog_hold_ms"),
        "dispatch_ratio_to_floor": dispatch.get("ratio"),
        "throughput_ratio_to_floor": throughput.get("ratio"),
        "tick_10k_due_seconds": tick.get("tick_10k_due_seconds"),
        "tick_max_tasks_per_invocation": figures.get("tick_fanout", {}).get(
            "tick_max_tasks_per_invocation"
        ),
        "cold_start_ratio_to_floor": cold.get("cold_start_ratio_to_floor"),
        "plan_peak_mb": plan.get("plan_peak_mb"),
        "peer_apscheduler_ratio": peer.get("ratio"),
        "big_instance_send_s": figures.get("bigsend", {}).get("big_instance_send_s"),
        "tenant_fairness_p95_start_s": figures.get("fairness", {}).get(
            "tenant_fairness_p95_start_s"
        ),
        "tenant_fifo_p95_start_s": figures.get("fairness", {}).get("tenant_fifo_p95_start_s"),
        **{
            key: figures.get("fairness", {}).get(key)
            for key in (
                "tenant_fairness_same_priority_p95_s",
                "tenant_fairness_same_priority_capped_p95_s",
                "tenant_fifo_capped_p95_s",
                "requests_per_waiting_shard_per_minute",
            )
        },
        "measured_at": measured_at(figures),
        "targets_met": {
            name: figure.get("met")
            for name, figure in figures.items()
            if isinstance(figure, dict) and "met" in figure
        },
        "profile": results["profile"],
        "command": results["command"],
        "machine": results["machine"],
        "seconds": results["seconds"],
        "errors": results["errors"],
        "notes": results.get("notes", []),
        "details": figures,
    }


def measured_at(f: dict[str, Any]) -> dict[str, str]:
    """Each headline key: the size it was measured at (or what it was derived from)."""
    out: dict[str, str] = {}
    if "cost" in f:
        c = f["cost"]
        noop = (
            f"{plural(c['instances'], 'instance')} × {c['shards_per_instance']} no-op shards, "
            "batches of "
            "10" + (", index writes counted" if "dynamodb_wru_per_shard_indexes" in c else "")
        )
        out["requests_per_shard"] = noop
        out["usd_per_million_shards"] = noop + (
            "; Lambda duration from the handlers' CPU plus assumed AWS round trips"
        )
        if c.get("floor"):
            out["request_ratio_to_floor"] = (
                noop + ": its DynamoDB and SQS requests per shard against the bare batch-API "
                "floor's over as many messages, counted alike"
            )
        for key, name, deployed in (
            ("usd_per_million_shards_30s", "heartbeat_30s", ""),
            ("usd_per_million_shards_5min", "heartbeat_5min", ", a function timeout of 900 s"),
        ):
            if long := c.get(name):
                out[key] = (
                    f"{long['instances']} instances × {long['shards_per_instance']} shards of "
                    f"{long['shard_seconds']} s heartbeating every {long['heartbeat_s']:.0f} s "
                    f"on a manual clock{deployed}; " + long["what"]
                )
    if "partitions" in f:
        s = f["partitions"]["scenarios"]
        out["ceiling_shards_per_s"] = (
            "; ".join(
                f"{n}: {s[n]['what']}" for n in ("instances_100_shards", "heartbeat_30s") if n in s
            )
            + " (see ceiling_rule)"
        )
        if "tick" in s:
            out["ceiling_instances_per_s"] = s["tick"]["what"] + " (see ceiling_rule)"
        if "rollout_fast" in s:
            out["rollout_hottest_key_shards_per_s"] = (
                s["rollout_fast"]["what"] + " (see details.partitions.own_rule)"
            )
            out["rollout_hottest_item_shards_per_s"] = (
                s["rollout_fast"]["what"] + " (see details.partitions.own_rule)"
            )
        if "capped_backlog" in s:
            out["capped_backlog_hold_ms"] = (
                s["capped_backlog"]["what"] + ": the cap ÷ its hottest own key's shards/s"
            )
    if "dispatch" in f:
        d = f["dispatch"]
        out["dispatch_ratio_to_floor"] = (
            f"one instance of {d['shards']:,} shards, {d['runs_per_side']} runs per side"
        )
    if "throughput" in f:
        t = f["throughput"]
        out["throughput_ratio_to_floor"] = (
            f"{t['shards_per_run']} shards per run, {t['runs_per_side']} runs per side"
        )
    if "tick" in f:
        out["tick_10k_due_seconds"] = f["tick"]["tick_10k_basis"]
    if "coldstart" in f:
        out["cold_start_ratio_to_floor"] = (
            f"every function against its floor, {f['coldstart']['runs']} fresh interpreters "
            "per side, alternated"
        )
    if "planning" in f:
        out["plan_peak_mb"] = "one id_range instance of 100 shards, by device count"
    if "peer" in f:
        p = f["peer"]
        out["peer_apscheduler_ratio"] = f"{p['jobs']:,} jobs, {p['runs_per_side']} runs per side"
    if "bigsend" in f:
        b, m = f["bigsend"], f["bigsend"]["model"]
        out["big_instance_send_s"] = (
            f"one instance of {b['shards']:,} shards, requests counted on the emulator, at "
            f"{m['sqs_ms'][1]:g} ms a SendMessageBatch ({m['send_workers']} in flight) and "
            f"{m['dynamodb_ms'][1]:g} ms a DynamoDB write"
        )
    if "fairness" in f:
        fa = f["fairness"]
        basis = (
            f"local runtime, tenant A's backfill of {fa['a_shards']:,} no-op shards, tenant B's "
            f"run of {fa['b_shards']} shards {fa['b_after_s']:g} s later; p95 (nearest rank) of "
            "B's shard start delays"
        )
        out["tenant_fairness_p95_start_s"] = basis + ": backfill at low priority (its default)"
        out["tenant_fifo_p95_start_s"] = (
            basis + ": backfill at normal priority, one queue in arrival order (FIFO)"
        )
        out["tenant_fairness_same_priority_p95_s"] = (
            basis + ": backfill at normal priority, the queue's fair queuing on"
        )
        capped = f"; A's tenant capped at {fa.get('a_cap')} shards in flight"
        out["tenant_fairness_same_priority_capped_p95_s"] = (
            out["tenant_fairness_same_priority_p95_s"] + capped
        )
        out["tenant_fifo_capped_p95_s"] = out["tenant_fifo_p95_start_s"] + capped
        waiting = fa.get("phases", {}).get("capped_fair", {})
        out["requests_per_waiting_shard_per_minute"] = (
            f"local runtime, every process's requests at the emulator over "
            f"{waiting.get('waiting_window_s')} s while {waiting.get('waiting_shards'):,} of "
            f"A's capped shards waited (cap {fa.get('a_cap')})"
            if waiting.get("waiting_shards") is not None
            else "not measured"
        )
    return out


# results.md: the page, its summary and the full-size run.


def full_run_section(full: dict[str, Any]) -> str:
    """The full-size run's summary table, for the default run's report."""
    out = [
        "## Full-size run",
        "",
        f"The same benchmarks at the full sizes, by `{full['command']}` on "
        f"{full['machine']['date']} in {full['seconds'] / 60:.0f} min (details in "
        f"`bench/{FULL_STEM}.md` and `bench/{FULL_STEM}.json`).",
        "",
    ]
    out += [f"*{note}*" for note in full.get("notes", [])]
    if full.get("notes"):
        out.append("")
    cost = full["figures"].get("cost", {})
    if cost and "dynamodb_wru_per_shard_indexes" not in cost:
        out += [
            "*That run's cost figures leave index writes out (it predates their accounting); "
            "the figures above this section count them.*",
            "",
        ]
    out += table(["figure", "how", "measured", "target", "result"], summary_rows(full["figures"]))
    return "\n".join(out) + "\n"


def markdown(results: dict[str, Any]) -> str:
    """The readable report."""
    f = results["figures"]
    m = results["machine"]
    out: list[str] = [
        "# Benchmark results",
        "",
        f"Written by `{results['command']}` (profile `{results['profile']}`) on {m['date']}, "
        f"in {results['seconds']:.0f} s. Every AWS call went to the embedded emulator (moto "
        "in server mode, one request at a time; see *The emulator* below), never to AWS. "
        "Ratios are measured A/B in the same run against the same emulator, alternating the "
        "sides; timed figures are medians of the runs listed.",
        "",
        f"Machine: `{m['uname']}`, {m['nproc']} CPUs, Python {m['python']} "
        f"({m['implementation']}); "
        + ", ".join(f"{k} {v}" for k, v in m["packages"].items())
        + ". Load average (1, 5, 15 min) when the run started: "
        + ", ".join(map(str, m["load_average"]["before"]))
        + "; when it ended: "
        + ", ".join(map(str, m["load_average"]["after"]))
        + " (other work shares this machine: absolute times move with it; the A/B ratios "
        "alternate their sides to spread it evenly).",
        "",
    ]
    if results.get("notes"):
        out += [f"*{note}*" for note in results["notes"]]
        out.append("")
    if results["errors"]:
        out += ["**Errors in this run:**", ""]
        out += [f"* {name}: `{error}`" for name, error in results["errors"].items()]
        out.append("")
    out += ["## Summary", ""]
    out += table(["figure", "how", "measured", "target", "result"], summary_rows(f))
    out.append("")
    for name, section in (
        ("cost", cost_section),
        ("partitions", partitions_section),
        ("dispatch", dispatch_section),
        ("throughput", throughput_section),
        ("tick", tick_section),
        ("coldstart", coldstart_section),
        ("planning", planning_section),
        ("peer", peer_section),
        ("fairness", fairness_section),
    ):
        if name in f:
            out += section(f[name], f)
            out.append("")
    out += emulator_section()
    return "\n".join(out).rstrip("\n") + "\n"


def emulator_section() -> list[str]:
    return [
        "## The emulator",
        "",
        "moto 5 in server mode (`iotsched.local.emulator.EmulatorServer`, the emulator of "
        "the demo, the tests and the chaos run), in the benchmark's process, serving one "
        "request at a time: throughput figures are bound by it. Its speed-ups apply "
        "everywhere, to both sides of every comparison, without changing any result: moto's "
        "SendMessage and ReceiveMessage stop walking every message of the queue for each "
        "message they handle (quadratic in the queue's length otherwise), a Query reads only "
        "its partition, and TransactWriteItems backs up the items it names rather than "
        "deep-copying the whole table for each transaction (quadratic in the "
        "table's size otherwise). moto's cost per request still varies with the request "
        "(an UpdateItem's time grows with its expression); the sections above give the "
        "emulator's own time per operation (measured inside its request lock) where it "
        "explains a figure. Its standard queues are served as SQS's fair queues serve them "
        "(a quiet tenant's messages before a noisy one's backlog: "
        "`iotsched.local.moto_patches`), but where a phase says arrival order.",
        "",
        "Commands: `make bench` (this profile: `python -m bench`), `python -m bench --full` "
        "(the full sizes everywhere; tens of minutes here), `python -m bench --quick` "
        "(a smoke run; writes to a temporary directory unless `--out` is given).",
    ]
