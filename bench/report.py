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

from bench.markdown import plural, table, verdict
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


def summary_rows(f: dict[str, Any]) -> list[list[Any]]:
    rows: list[list[Any]] = []
    if "cost" in f:
        c = f["cost"]
        r = c["requests_per_shard"]
        rows.append(
            [
                "AWS requests per shard execution",
                f"botocore hooks over {plural(c['instances'], 'instance')} × "
                f"{c['shards_per_instance']} no-op shards",
                f"DynamoDB {c['dynamodb_wru_per_shard']} WRU"
                + (
                    f" (table {c['dynamodb_wru_per_shard_table']} + indexes "
                    f"{c['dynamodb_wru_per_shard_indexes']})"
                    if "dynamodb_wru_per_shard_indexes" in c
                    else ""
                )
                + f" ({r['dynamodb']} requests, "
                f"{c['dynamodb_rru_per_shard']} RRU); SQS {r['sqs']}; Lambda {r['lambda']}",
                "≤ 3.5 WRU; ≤ 0.35 SQS; ≤ 0.12 Lambda",
                " / ".join(
                    verdict(c["met"][k]).replace("**", "")
                    for k in ("dynamodb_wru", "sqs", "lambda")
                ),
            ]
        )
        rows.append(
            [
                "USD per million no-op shards"
                + (", index writes counted" if "dynamodb_wru_per_shard_indexes" in c else ""),
                f"{plural(c['instances'], 'instance')} × {c['shards_per_instance']} shards; list "
                "prices (below) × the counts; Lambda GB-s from the handlers' CPU time plus "
                "assumed AWS round trips",
                f"${c['usd_per_million_shards']}",
                "≤ $2.5",
                verdict(c["met"]["usd_per_million"]),
            ]
        )
        long = c.get("heartbeat_30s")
        if long:
            rows.append(
                [
                    f"USD per million {long['shard_seconds']} s heartbeating shards",
                    f"{plural(long['instances'], 'instance')} × {long['shards_per_instance']} shards "
                    "on a manual clock; the scheduler's requests (DynamoDB with index writes, "
                    "SQS, Lambda invocations, SNS), not the handler's compute",
                    f"${long['usd_per_million_shards']}",
                    f"≤ ${long['target']}",
                    verdict(long["met"]),
                ]
            )
        five = c.get("heartbeat_5min")
        if five:
            rows.append(
                [
                    f"USD per million {five['shard_seconds']} s heartbeating shards",
                    f"the same, shards of {five['shard_seconds']} s (a function timeout of "
                    "900 s: each shard within one invocation)",
                    f"${five['usd_per_million_shards']}",
                    "report",
                    "reported",
                ]
            )
        floor = c.get("floor")
        if floor and c.get("request_ratio_to_floor") is not None:
            design = c["requests_per_shard"]["dynamodb"] + c["sqs_calls"] / c["shard_executions"]
            rows.append(
                [
                    "requests on the shard path vs the bare batch-API floor's",
                    f"the no-op run above against the floor (`bench.bare_worker.handle`: a "
                    f"conditional put per message, a completion transaction and a delete per "
                    f"batch) over {floor['shard_executions']:,} messages sent and drained alike; "
                    "DynamoDB and SQS requests counted by the same hooks; the per-minute tick "
                    "of empty buckets is not a shard's",
                    f"ratio {c['request_ratio_to_floor']} ({floor['requests_per_shard']} vs "
                    f"{round(design, 3)} requests per shard)",
                    f"≥ {c['request_ratio_target']}",
                    verdict(c["request_ratio_met"]),
                ]
            )
    if "partitions" in f:
        p = f["partitions"]
        sb, ib = p.get("ceiling_shards_binding") or {}, p.get("ceiling_instances_binding") or {}
        rows.append(
            [
                "shards/s before a partition reaches 1,000 WCU/s",
                "hottest shared partition (a family's buckets even) of "
                + ", ".join(
                    f"{n} ({p['scenarios'][n]['what']})"
                    for n in ("instances_100_shards", "heartbeat_30s")
                    if n in p["scenarios"]
                ),
                f"{p['ceiling_shards_per_s']} ({sb.get('scenario')}, `{sb.get('partition')}`)",
                "≥ 20,000",
                verdict(p["met"]["ceiling_shards_per_s"]),
            ]
        )
        if "tick" in p["scenarios"]:
            rows.append(
                [
                    "instances/s before a partition reaches 1,000 WCU/s",
                    f"hottest shared partition of {p['scenarios']['tick']['what']}",
                    f"{p['ceiling_instances_per_s']} ({ib.get('scenario')}, "
                    f"`{ib.get('partition')}`)",
                    "≥ 2,000",
                    verdict(p["met"]["ceiling_instances_per_s"]),
                ]
            )
        rollout = p.get("rollout_hottest_key")
        if rollout:
            rows.append(
                [
                    "shards/s one instance may start before its own partition reaches "
                    "1,000 WCU/s or 3,000 RCU/s",
                    f"hottest per-instance or per-task partition of rollout_fast "
                    f"({p['scenarios']['rollout_fast']['what']})",
                    f"{p['rollout_hottest_key_shards_per_s']} ({rollout['unit']}, "
                    f"`{rollout['partition']}`)",
                    f"≥ {p['targets']['rollout_hottest_key_shards_per_s']:,}",
                    verdict(p["met"]["rollout_hottest_key_shards_per_s"]),
                ]
            )
        capped = p.get("capped_backlog_hottest_key")
        if capped and p.get("capped_backlog_hold_ms") is not None:
            rows.append(
                [
                    "shortest slot hold at which a tenant starting at its cap keeps its own "
                    "partitions under 1,000 WCU/s and 3,000 RCU/s",
                    f"cap ÷ the shards/s at which the hottest per-task or per-instance "
                    f"partition of capped_backlog ({p['scenarios']['capped_backlog']['what']}) "
                    "reaches its limit",
                    f"{p['capped_backlog_hold_ms']} ms (cap {p['capped_backlog_cap']}, "
                    f"{p['capped_backlog_hottest_key_shards_per_s']} shards/s, {capped['unit']}, "
                    f"`{capped['partition']}`)",
                    f"≤ {p['targets']['capped_backlog_hold_ms']} ms",
                    verdict(p["met"]["capped_backlog_hold_ms"]),
                ]
            )
        item = p.get("rollout_hottest_item")
        if item:
            rows.append(
                [
                    "shards/s one instance may start before its hottest own item reaches "
                    "1,000 WCU/s or 3,000 RCU/s (a partition split by heat)",
                    f"hottest item of rollout_fast's own partitions "
                    f"({p['scenarios']['rollout_fast']['what']})",
                    f"{p['rollout_hottest_item_shards_per_s']} ({item['binds']}, "
                    f"`{item['partition']}` `{item['item']}`)",
                    f"≥ {p['targets']['rollout_hottest_item_shards_per_s']:,}",
                    verdict(p["met"]["rollout_hottest_item_shards_per_s"]),
                ]
            )
    if "dispatch" in f:
        d = f["dispatch"]
        rows.append(
            [
                f"dispatch of one instance with {d['shards']:,} shards",
                f"dispatcher handler vs {d['send_message_batch_calls']['floor']:,} bare "
                f"SendMessageBatch, {plural(d['runs_per_side'], 'run')} each",
                f"ratio {d['ratio']} ({d['design_median_s']} s vs {d['floor_median_s']} s)",
                "≤ 1.3",
                verdict(d["met"]),
            ]
        )
    if "throughput" in f:
        t = f["throughput"]
        rows.append(
            [
                "end-to-end throughput",
                f"local runtime, 2 workers vs bare loop, {t['shards_per_run']} shards × "
                f"{plural(t['runs_per_side'], 'run')} each",
                f"ratio {t['ratio']} ({t['design_shards_per_s']} vs {t['floor_shards_per_s']} "
                "shards/s)",
                "≥ 0.6",
                verdict(t["met"]),
            ]
        )
    if "tick" in f:
        k = f["tick"]
        rows.append(
            [
                "tick with 10,000 due tasks"
                + ("" if k["due_tasks"] >= 10_000 else f" (measured at {k['due_tasks']:,})"),
                f"{plural(k['runs'], 'tick')} of {k['due_tasks']:,} due tasks",
                f"{k['claims_per_s']} claims/s; 10k tick {k['tick_10k_due_seconds']} s"
                + (
                    ""
                    if k["due_tasks"] >= 10_000
                    else f" (extrapolated linearly from {k['due_tasks']:,})"
                ),
                "well inside the minute",
                verdict(k["met"]),
            ]
        )
    if "coldstart" in f and "cold_start_ratio_to_floor" in f["coldstart"]:
        c = f["coldstart"]
        w = c["functions"][c["worst"]]
        rows.append(
            [
                "cold start",
                "each function's `import app` against its floor (the libraries it cannot drop), "
                f"{plural(c['runs'], 'fresh interpreter')} each, alternated; process CPU medians",
                f"ratio {c['cold_start_ratio_to_floor']} ({c['worst']}: {w['import_ms']} ms vs "
                f"{w['floor_ms']} ms)",
                f"≤ {c['target']}",
                verdict(c["met"]),
            ]
        )
    if "planning" in f:
        p = f["planning"]
        peaks = ", ".join(f"{int(n):,}: {v} MB" for n, v in p["plan_peak_mb"].items())
        rows.append(
            [
                "planning 1,000,000 devices (id_range, 100 shards)",
                "tracemalloc peak; perf_counter median",
                peaks,
                "memory does not grow with device count",
                verdict(p["met"]),
            ]
        )
    if "peer" in f:
        p = f["peer"]
        rows.append(
            [
                f"peer: {p['jobs']:,} no-op jobs due at one instant",
                f"local runtime vs APScheduler 3 (SQLite job store, thread pool), "
                f"{plural(p['runs_per_side'], 'run')} each",
                f"iotsched {p['iotsched_median_s']} s vs APScheduler "
                f"{p['apscheduler_median_s']} s: ratio {p['ratio']}",
                "report",
                "reported",
            ]
        )
    if "fairness" in f:
        fa = f["fairness"]
        rows.append(
            [
                "tenant B's p95 shard start behind tenant A's backfill",
                f"local runtime; A backfills {fa['a_shards']:,} no-op shards, B runs "
                f"{fa['b_shards']} shards {fa['b_after_s']:g} s later; the same run with the "
                "backfill at low priority (fair) and at normal (FIFO, one queue)",
                f"fair {fa['tenant_fairness_p95_start_s']} s vs FIFO "
                f"{fa['tenant_fifo_p95_start_s']} s: {fa['ratio']}× smaller",
                f"≤ {fa['bound_s']:g} s and ≥ 10× smaller",
                verdict(fa["met"]),
            ]
        )
        if "same_priority_ratio" in fa:
            rows += _same_priority_rows(fa)
    return rows


def _same_priority_rows(fa: dict[str, Any]) -> list[list[Any]]:
    """Fairness between tenants of one priority (fair queuing), and a capped backlog's cost."""
    how = (
        f"local runtime; A floods {fa['a_shards']:,} no-op shards at normal priority, B runs "
        f"{fa['b_shards']} shards {fa['b_after_s']:g} s later at normal; the same run with the "
        "queue in arrival order (FIFO)"
    )
    waiting = fa["phases"]["capped_fair"]
    return [
        [
            "tenant B's p95 shard start behind tenant A's flood, one priority",
            how,
            f"fair {fa['tenant_fairness_same_priority_p95_s']} s vs FIFO "
            f"{fa['tenant_fifo_p95_start_s']} s: {fa['same_priority_ratio']}× smaller",
            f"≤ {fa['bound_s']:g} s and ≥ 10× smaller",
            verdict(fa["same_priority_met"]),
        ],
        [
            "the same, A's tenant capped",
            how + f"; A's tenant at `max_concurrent_shards: {fa['a_cap']}`",
            f"fair {fa['tenant_fairness_same_priority_capped_p95_s']} s vs FIFO "
            f"{fa['tenant_fifo_capped_p95_s']} s: {fa['capped_ratio']}× smaller",
            "report (the cap's window keeps A's backlog off the queue, FIFO or not)",
            "reported",
        ],
        [
            "requests per waiting shard per minute, a capped backlog",
            f"every process's requests at the emulator over {waiting['waiting_window_s']} s "
            f"while {waiting['waiting_shards']:,} of A's shards waited behind its cap",
            f"{waiting['requests_per_waiting_shard_per_minute']:g} "
            f"({waiting['waiting_requests']:,} requests)",
            "≤ 1",
            verdict(fa["waiting_met"]),
        ],
    ]


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
