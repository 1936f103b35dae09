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
from collections import Counter
from pathlib import Path
from typing import Any

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
        "ceiling_shards_per_s": parts.get("ceiling_shards_per_s"),
        "ceiling_instances_per_s": parts.get("ceiling_instances_per_s"),
        "ceiling_rule": parts.get("rule"),
        "binding_partition": parts.get("binding"),
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
        long = c.get("heartbeat_30s")
        if long:
            out["usd_per_million_shards_30s"] = (
                f"{long['instances']} instances × {long['shards_per_instance']} shards of "
                f"{long['shard_seconds']} s heartbeating every {long['heartbeat_s']:.0f} s on a "
                "manual clock; " + long["what"]
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


def fairness_section(fa: dict[str, Any], _f: dict[str, Any]) -> list[str]:
    """Fairness between tenants: B's start delays behind A's backlog, both phases."""
    out = [
        "## Fairness between tenants",
        "",
        f"Tenant A backfills one business date of a task of {fa['a_shards']:,} no-op shards; "
        f"{fa['b_after_s']:g} s after the backfill began, tenant B runs a task of "
        f"{fa['b_shards']} no-op shards. A shard's start delay is its first attempt's start "
        "less the instant B's run was asked for. Worker processes: "
        f"{fa['worker_processes']['normal']} on the normal queue, "
        f"{fa['worker_processes']['high_and_low']} on the high and low queues together. "
        "FIFO is the backfill asked at `normal`, sharing B's queue, served in arrival order; "
        "fair is its default, `low`; same-priority fair is the backfill at `normal` with the "
        "queue's fair queuing (each message names its tenant). The capped phases put A's "
        f"tenant under `max_concurrent_shards: {fa.get('a_cap', '-')}`. After each phase A's "
        "instance is cancelled and the queues purged.",
        "",
    ]
    rows = [
        [
            name,
            p["backfill_priority"],
            "on" if p.get("fair_queuing", name != "fifo") else "off",
            "yes" if p.get("capped") else "no",
            p["b_p95_start_s"],
            ", ".join(f"{d:g}" for d in p["b_start_delays_s"]),
            p["a_shards_ended_when_b_ended"],
        ]
        for name, p in fa["phases"].items()
    ]
    out += table(
        [
            "phase",
            "backfill priority",
            "fair queuing",
            "A capped",
            "B p95 start (s)",
            "B's start delays (s)",
            "A's shards ended when B ended",
        ],
        rows,
    )
    waiting = fa["phases"].get("capped_fair", {})
    if "requests_per_waiting_shard_per_minute" in waiting:
        out += [
            "",
            f"While A's capped backlog waited ({waiting['waiting_shards']:,} shards not "
            f"started, {waiting['a_shards_started_in_window']} started in the window), every "
            f"process made {waiting['waiting_requests']:,} requests to the emulator in "
            f"{waiting['waiting_window_s']} s: "
            f"{waiting['requests_per_waiting_shard_per_minute']:g} per waiting shard per "
            "minute. The unsent shards cost nothing; the requests are the window's shards "
            "running, their refills, and the sweeper.",
        ]
    return out


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
        "explains a figure.",
        "",
        "Commands: `make bench` (this profile: `python -m bench`), `python -m bench --full` "
        "(the full sizes everywhere; tens of minutes here), `python -m bench --quick` "
        "(a smoke run; writes to a temporary directory unless `--out` is given).",
    ]


# results.md: one section per benchmark.

#: Item kinds by key prefixes (pk/sk), as the DynamoDB adapter lays the table out.
ITEM_KINDS = {
    "TASK/DEF": "task",
    "TASK/INST": "instance",
    "INST/SHARD": "shard record",
    "EFFECT/EFFECT": "effect key",
}


def cost_section(c: dict[str, Any], f: dict[str, Any]) -> list[str]:
    r = c["requests_per_shard"]
    out = [
        "## AWS requests and USD per shard execution",
        "",
        f"{plural(c['instances'], 'instance')} × {c['shards_per_instance']} no-op shards "
        f"({c['shard_executions']:,} shard executions; {c['instances_succeeded']} of "
        f"{c['instances']} instances succeeded): one `id_range` task over 1,000,000 device ids, due every "
        "minute; each tick is one dispatcher invocation (`dispatch_tick`), then the queue is "
        "drained as the Lambda event source mapping does (ReceiveMessage of 10, the worker "
        "function's batch path: each message run by a `ShardBatch` given the function's "
        "timeout (template.yaml's default) as its time left, as Lambda does, and the task its "
        "default `timeout_s`; then the finished shards' completions committed together; "
        "DeleteMessageBatch), one worker invocation per batch. "
        "Counted by botocore "
        "hooks on every client (`bench/counting.py`): write units per item and per started KB "
        "of the larger of the item before and after the write (sizes read from the emulator's "
        "memory), transactional items ×2, failed conditions charged; read units per started "
        f"4 KB. {c['api_calls']:,} calls, {c['http_attempts']:,} HTTP attempts "
        f"({'no retries' if c['http_attempts'] == c['api_calls'] else 'with retries'}), "
        f"{c['conditional_failures']} failed conditions. Not counted, being fixed costs per "
        "minute rather than per shard: the sweeper's invocation and index queries every "
        "minute, and the event source mapping's idle long polls.",
        "",
    ]
    if c["instances"] < 100:
        out += [
            f"*Scale:* {plural(c['instances'], 'instance')} rather than 100 (the emulator takes about "
            f"{c['wall_seconds'] / c['shard_executions'] * 1000:.0f} ms per shard here; "
            "`python -m bench --full` runs 100 × 100). Per-shard counts do not depend on the "
            "instance count: every instance makes the same calls, and the per-tick share of "
            "the dispatcher is the same at any count.",
            "",
        ]
    rows = [
        [
            "DynamoDB",
            r["dynamodb"],
            f"{c['dynamodb_wru_per_shard']} WRU, {c['dynamodb_rru_per_shard']} RRU",
            "≤ 3.5 WRU",
            verdict(c["met"]["dynamodb_wru"]),
        ],
        ["SQS (billed requests)", r["sqs"], "", "≤ 0.35", verdict(c["met"]["sqs"])],
        ["Lambda invocations", r["lambda"], "", "≤ 0.12", verdict(c["met"]["lambda"])],
        ["SNS publishes", r["sns"], "", "", ""],
    ]
    out += table(["service", "requests per shard", "units per shard", "target", "result"], rows)
    out += ["", "Calls per shard by caller:", ""]
    op_rows = []
    for phase, ops in c["calls_per_shard_by_phase"].items():
        for op, n in ops.items():
            op_rows.append([phase, op, n])
    out += table(["caller", "operation", "calls per shard"], op_rows)
    out += [
        "",
        "Write units per shard by operation: "
        + ", ".join(f"{k} {v}" for k, v in c["wru_per_shard_by_operation"].items())
        + "; largest item written, by kind (bytes): "
        + ", ".join(f"{ITEM_KINDS.get(k, k)} {v}" for k, v in c["largest_item_bytes"].items())
        + ".",
        "",
        "Prices (us-east-1 list prices, free tiers ignored): "
        + "; ".join(c["prices"].values())
        + ". Lambda: one request per invocation (one per tick for the dispatcher, one per "
        "batch of 10 for the worker); duration at 512 MB arm64, the template's setting, of "
        f"{c['lambda_ms_per_shard_on_aws']} ms per shard: the handlers' own CPU time measured "
        f"here ({c['lambda_cpu_ms_per_shard']} ms per shard, the counter's hooks taken out) "
        "plus each call they make at an assumed round trip from a Lambda in the same region ("
        + ", ".join(f"{k} {v} ms" for k, v in c["assumed_aws_latency_ms"].items())
        + "). Priced with the emulator's round trips instead "
        f"({c['lambda_ms_per_shard_on_emulator']} ms per shard), the total would be "
        f"${c['usd_per_million_with_emulator_duration']} per million.",
        "",
    ]
    out += table(
        ["item", "USD per million shards"],
        [[k, f"${v}"] for k, v in c["usd_per_million_by_item"].items()]
        + [["**total**", f"**${c['usd_per_million_shards']}**"]],
    )
    out.append("")
    worker_calls = c["calls_per_shard_by_phase"].get("worker", {})
    by_index = c.get("dynamodb_wru_per_shard_by_index")
    if by_index is not None:
        out += [
            "**Index writes** (`bench/indexwrites.py`: each write's item read before and after "
            "it by an uncounted client; a key change in an index is a delete plus a put, an "
            "entry costs its projected size, an attribute change writes an index only where it "
            "is projected): "
            f"{c['dynamodb_wru_per_shard_table']} WRU per shard on the table and "
            f"{c['dynamodb_wru_per_shard_indexes']} on the indexes ("
            + ", ".join(f"{k} {v}" for k, v in by_index.items())
            + f"), {c['dynamodb_wru_per_shard']} in all. The request counter's own count of "
            f"the table's units, {c['table_wru_per_shard_by_request_counter']} per shard, "
            "checks the table's part.",
            "",
        ]
    out += [
        "*Batch size:* these figures take batches of 10, template.yaml's default "
        "`WorkerBatchSize`. The worker holds a batch's records at a visibility of one lease so "
        "that a dead worker's unstarted records come back within a lease: "
        f"{worker_calls.get('SQS.ChangeMessageVisibilityBatch', 0)} "
        "ChangeMessageVisibilityBatch per shard here. At 1 (the chaos run's setting) every "
        "shard is a batch of its own (one invocation, a receive and a delete per shard, no "
        "visibility hold); not measured here.",
        "",
    ]
    if not c["met"]["dynamodb_wru"] or not c["met"]["usd_per_million"]:
        usd = c["usd_per_million_by_item"]
        out += [
            "**Why a target is missed.** DynamoDB writes are "
            f"${usd['dynamodb_writes']} (table)"
            + (
                f" and ${usd['dynamodb_index_writes']} (indexes)"
                if "dynamodb_index_writes" in usd
                else ""
            )
            + f" of the ${c['usd_per_million_shards']} per million.",
            "",
        ]
    fleet = c.get("fleet_safety")
    if fleet:
        fr = fleet["requests_per_shard"]
        out += [
            "**Under a rollout and abort criteria** (`fleet_safety`: the same task with "
            "`rollout: {max_shards_per_minute: 100000}`, a rate no shard waits for, and "
            "`abort: {failure_percent: 50, min_executed: 10}`, never met; "
            f"{plural(fleet['instances'], 'instance')} × {fleet['shards_per_instance']} shards): "
            f"{fleet['dynamodb_wru_per_shard']} WRU and {fr['dynamodb']} DynamoDB requests per "
            f"shard against {c['dynamodb_wru_per_shard']} and {r['dynamodb']} without them (the "
            "start gate's counting write per shard, the first start of each minute twice; the "
            "abort's check reads nothing more than the completion did; a run slower per shard "
            "also renews more leases and visibility holds, which are timed), SQS "
            f"{fr['sqs']} against {r['sqs']}; "
            f"${fleet['usd_per_million_shards']} per million shards against "
            f"${c['usd_per_million_shards']}.",
            "",
        ]
    long = c.get("heartbeat_30s")
    if long:
        out += heartbeat_section(long)
    return out


def heartbeat_section(k: dict[str, Any]) -> list[str]:
    out = [
        f"### {k['shard_seconds']} s heartbeating shards",
        "",
        f"{plural(k['instances'], 'instance')} × {k['shards_per_instance']} shards of "
        f"{k['shard_seconds']} s on a manual clock (`bench/partitions.py`, scenario "
        f"`heartbeat_30s`): each heartbeats every {k['heartbeat_s']:.0f} s and asks "
        "`ctx.cancelled()` every second; the lease renewals, the batch's visibility hold and "
        "its commit timer fire when the worker's threads would. Priced: "
        + k["what"]
        + f". Instances ended: {', '.join(k['statuses'])}.",
        "",
    ]
    out += table(
        ["per shard", "value"],
        [
            [
                "DynamoDB WRU (of which indexes)",
                f"{k['dynamodb_wru_per_shard']} ({k['dynamodb_wru_per_shard_indexes']})",
            ],
            ["DynamoDB RRU", k["dynamodb_rru_per_shard"]],
            ["SQS billed requests", k["sqs_per_shard"]],
            ["Lambda invocations", k["lambda_invocations_per_shard"]],
        ],
    )
    out += ["", "Calls per shard by caller:", ""]
    out += table(
        ["caller", "operation", "calls per shard"],
        [
            [phase, op, n]
            for phase, ops in k["calls_per_shard_by_phase"].items()
            for op, n in ops.items()
        ],
    )
    out += [
        "",
        *table(
            ["item", "USD per million shards"],
            [[i, f"${v}"] for i, v in k["usd_per_million_by_item"].items()]
            + [["**total**", f"**${k['usd_per_million_shards']}**"]],
        ),
    ]
    if not k["met"]:
        top = sorted(k["usd_per_million_by_item"].items(), key=lambda kv: -kv[1])[:3]
        out += [
            "",
            "**Why it is missed.** The largest parts per million shards: "
            + ", ".join(f"{name} ${v}" for name, v in top)
            + "; the worker's calls per shard are in the table above (a long shard's "
            "renewals, heartbeats, cancellation checks and visibility holds grow with its "
            "length; a no-op shard makes none of them).",
            "",
            "**What would reach it.** A worker runs a batch's shards one after another, so "
            "every renewal period of a long shard pays its own lease write (and the index "
            "move it makes), the batch's visibility hold and the cancellation reads: their "
            "cost per shard grows with the shard's length. One lease per worker invocation "
            "(an item renewed once per period for all the shards it runs, whose index key "
            "never moves; a takeover conditional on that lease having ended, the attempt "
            "number still fencing a zombie's completion) makes the renewals per invocation; "
            "running the batch's shards side by side makes them per batch rather than per "
            "shard; reading the cancellation with the renewal rather than every second "
            "removes the reads. Left to a later change: it moves the worker's attempt timer "
            "off the main thread's SIGALRM.",
        ]
    out += [
        "",
        f"`usd_per_million_shards_30s` = **${k['usd_per_million_shards']}** (target ≤ "
        f"${k['target']}: {verdict(k['met'])}).",
        "",
    ]
    return out


def partitions_section(p: dict[str, Any], f: dict[str, Any]) -> list[str]:
    out = [
        "## Write units by partition",
        "",
        "Each scenario runs the real services on the emulator (the tick, then the shard "
        "queue drained as the event source mapping and the worker function do); every "
        "DynamoDB write is charged by `bench/indexwrites.py` to (table or index, partition key "
        "value). Classes: *shared* partitions (a key that names no instance and no task: a "
        "constant or a bucket of a sharded prefix; every instance writes them) bound the "
        "platform; *per-task* and *per-instance* partitions (a key naming one task or one "
        "instance) bound that task's or instance's rate and scale out with them.",
        "",
        f"Rule: {p['rule']}",
        "",
    ]
    rows = []
    for name, s in p["scenarios"].items():
        for cls, c in s["classes"].items():
            at = c.get("at_scale")
            rows.append(
                [
                    name,
                    cls,
                    c["partitions"],
                    f"{c['hottest']['target']} `{c['hottest']['partition']}`",
                    c["hottest"]["wcu"],
                    c["hottest_share"],
                    c["ceiling_shards_per_s"],
                    c["ceiling_instances_per_s"],
                    f"`{at['family']}`: {at['ceiling_shards_per_s']} / "
                    f"{at['ceiling_instances_per_s']}"
                    if at
                    else "",
                ]
            )
    out += table(
        [
            "scenario",
            "class",
            "partitions",
            "hottest",
            "its WCU",
            "share of all WCU",
            "ceiling shards/s",
            "ceiling instances/s",
            "shared, a family's buckets even: shards/s / instances/s",
        ],
        rows,
    )
    for name, s in p["scenarios"].items():
        out += [
            "",
            f"### {name}: {s['what']}",
            "",
            f"{s['instances']} instances ({', '.join(f'{k} {v}' for k, v in s['statuses'].items())}), "
            f"{s['shards']:,} shards, {s['wcu']:,} WCU: {s['wcu_per_instance']} per instance, "
            f"{s['wcu_per_shard']} per shard; the hottest partition "
            f"{s['hottest']['target']} `{s['hottest']['partition']}` ({s['hottest']['class']}) "
            f"took {s['hottest_share'] * 100:.1f}% of them; {s['partition_count']:,} partitions "
            f"written ({s['seconds']} s here).",
            "",
        ]
        out += table(
            [
                "table or index",
                "puts",
                "updates",
                "deletes",
                "WCU",
                "WCU per instance",
                "WCU per shard",
            ],
            [
                [
                    t,
                    v["puts"],
                    v["updates"],
                    v["deletes"],
                    v["wcu"],
                    v["wcu_per_instance"],
                    v["wcu_per_shard"],
                ]
                for t, v in s["by_target"].items()
            ],
        )
        out.append("")
        out += table(
            [
                "table or index",
                "partition key",
                "class",
                "puts",
                "updates",
                "deletes",
                "unchanged",
                "WCU",
            ],
            [
                [
                    r["target"],
                    f"`{r['partition']}`",
                    r["class"],
                    r["puts"],
                    r["updates"],
                    r["deletes"],
                    r["unchanged"],
                    r["wcu"],
                ]
                for r in s["partitions"]
            ],
        )
    out += [
        "",
        "Every shared partition is listed; of the per-task and per-instance ones, the two "
        "hottest of each table or index (all of them in `results.json`'s details).",
        "",
    ]
    b = p.get("binding")
    sb, ib = p.get("ceiling_shards_binding"), p.get("ceiling_instances_binding")
    out += [
        f"`ceiling_shards_per_s` = **{p['ceiling_shards_per_s']}** (target ≥ 20,000: "
        f"{verdict(p['met']['ceiling_shards_per_s'])}; {sb['scenario']}, `{sb['partition']}`); "
        f"`ceiling_instances_per_s` = **{p['ceiling_instances_per_s']}** (target ≥ 2,000: "
        f"{verdict(p['met']['ceiling_instances_per_s'])}; {ib['scenario']}, `{ib['partition']}`); "
        f"measured hottest partition alone: {p['ceiling_shards_per_s_hottest_measured']} "
        f"shards/s, {p['ceiling_instances_per_s_hottest_measured']} instances/s."
        if sb and ib
        else "",
        "",
    ]
    if sb and not p["met"]["ceiling_shards_per_s"]:
        out += [
            "**What would reach it.** Quick shards write no lease index (a lease enters "
            "`LEASE#<k>` at its first renewal); long ones move their entry at every renewal, "
            f"so `{sb['partition']}` binds at {p['ceiling_shards_per_s']} shards/s for "
            f"`{sb['scenario']}`. The ceiling grows with the buckets (`IndexBuckets`, up to "
            f"512): about {20_000 / p['ceiling_shards_per_s']:.1f} times this run's count "
            "would reach 20,000; one lease per worker invocation (see the 30 s cost above) "
            "would divide the lease writes by the shards an invocation runs.",
            "",
        ]
    out.append(
        f"**Binding partition:** `{b['partition']}` in the `{b['scenario']}` scenario."
        if b
        else "**Binding partition:** none measured."
    )
    return out


def dispatch_section(d: dict[str, Any], f: dict[str, Any]) -> list[str]:
    out = [
        f"## Dispatch of one instance with {d['shards']:,} shards",
        "",
        "A: the dispatcher Lambda handler (`functions/dispatcher/app.py`, Powertools "
        "decorators, warm, in this process) handles the tick at which an `id_range` task of "
        f"{d['shards']:,} shards is due (query, claim, "
        f"{d['send_message_batch_calls']['design']} SendMessageBatch, running mark, advance). "
        f"B (the floor): {d['send_message_batch_calls']['floor']} SendMessageBatch calls with "
        "the same bodies and 0 BatchWriteItem (the dispatcher writes no shard records: the "
        "lease creates them), issued bare. Same emulator and queue, purged between runs.",
        "",
    ]
    if d["shards"] < 10_000:
        out += [
            f"*Scale:* {d['shards']:,} shards rather than 10,000 in this profile "
            "(`python -m bench --full` runs 10,000). Both sides make one SendMessageBatch "
            "per 10 messages; the design's fixed part (the due query, the claim and two "
            "updates, the handler's decorators) weighs less at 10,000, so the ratio there is "
            "if anything lower.",
            "",
        ]
    out += table(
        ["side", "runs (s)", "median (s)"],
        [
            ["dispatcher handler", ", ".join(map(str, d["design_seconds"])), d["design_median_s"]],
            ["bare floor", ", ".join(map(str, d["floor_seconds"])), d["floor_median_s"]],
        ],
    )
    out += [
        "",
        f"Ratio {d['ratio']} (target ≤ 1.3: {verdict(d['met'])}); per pair: "
        + ", ".join(map(str, d["pair_ratios"]))
        + ".",
    ]
    return out


def throughput_section(t: dict[str, Any], f: dict[str, Any]) -> list[str]:
    design = t["emulator_per_shard"]["design"]
    floor = t["emulator_per_shard"]["floor"]
    calls_design = sum(v["calls"] for v in design.values())
    calls_floor = sum(v["calls"] for v in floor.values())
    ms_design = sum(v["emulator_ms"] for v in design.values())
    ms_floor = sum(v["emulator_ms"] for v in floor.values())
    out = [
        "## End-to-end throughput",
        "",
        "A: the local runtime (dispatcher process, 2 shard-worker processes running "
        "`functions/worker/app.py` behind the event-source-mapping poller); an `id_range` task "
        f"of {t['shards_per_run']} no-op shards falls due; from the tick to the instance's end. "
        "B (the floor): 2 processes of `bench/bare_worker.py` on their own queue in the same "
        "emulator: receive 10, one conditional PutItem lease per message, one TransactWriteItems "
        "per batch (the fenced completions and one counter decrement), DeleteMessageBatch; from "
        "the first SendMessageBatch of the same bodies to the counter's 0. Each pair of runs "
        "starts from an empty table.",
        "",
    ]
    out += table(
        [
            "side",
            "runs (s)",
            "shards/s (median)",
            "emulator calls per shard",
            "emulator ms per shard",
        ],
        [
            [
                "local runtime",
                ", ".join(map(str, t["design_seconds"])),
                t["design_shards_per_s"],
                round(calls_design, 2),
                round(ms_design, 1),
            ],
            [
                "bare loop",
                ", ".join(map(str, t["floor_seconds"])),
                t["floor_shards_per_s"],
                round(calls_floor, 2),
                round(ms_floor, 1),
            ],
        ],
    )
    out += [
        "",
        f"Ratio {t['ratio']} (target ≥ 0.6: {verdict(t['met'])}); per pair: "
        + ", ".join(map(str, t["pair_ratios"]))
        + ". The emulator was busy "
        + f"{t['emulator_busy_share']['design'] * 100:.0f}% of the runtime's runs and "
        + f"{t['emulator_busy_share']['floor'] * 100:.0f}% of the floor's.",
        "",
        "Emulator time per shard by operation (calls per shard, ms per call):",
        "",
    ]
    rows = []
    for side, spans in (("local runtime", design), ("bare loop", floor)):
        for op, v in list(spans.items())[:6]:
            rows.append([side, op, v["calls"], v["ms_per_call"], v["emulator_ms"]])
    out += table(["side", "operation", "calls/shard", "ms/call", "ms/shard"], rows)
    out.append("")
    tx = design.get("DynamoDB.TransactWriteItems", {}).get("ms_per_call", 0)
    tx_floor = floor.get("DynamoDB.TransactWriteItems", {}).get("ms_per_call", 0)
    put = design.get("DynamoDB.PutItem", {}).get("ms_per_call", 0)
    put_floor = floor.get("DynamoDB.PutItem", {}).get("ms_per_call", 0)
    out += [
        ("**Why it is missed.** " if not t["met"] else "**Where the rest goes.** ")
        + "The emulator serves one request at a time, so each side's throughput is about one "
        f"over its emulator time per shard: {ms_design:.0f} ms for the runtime, {ms_floor:.0f} "
        "ms for the floor (both include idle polls: the other side's workers and the DLQ "
        f"poller; the benchmark's own polling is left out). The calls are close ({calls_design:.2f}"
        f" against {calls_floor:.2f} per shard: the same lease per shard, the same transaction "
        "per batch of 10, plus the runtime's instance reads and more idle receives); the "
        f"difference is moto's time per call. Its TransactWriteItems takes {tx} ms here against "
        f"the floor's {tx_floor} ms: moto parses and validates every action's update "
        "expression twice (in its request handler, then in its backend), and its time grows "
        "with the expression; the runtime's final write sets the status, the attempt's entry, "
        "the error and the result and removes three lease attributes, the floor's sets one "
        f"and removes one. The lease PutItem takes {put} ms against {put_floor} ms (a larger "
        "item: the attempt history, bounds, owner and lease index). "
        "DynamoDB's time per request does not grow that way; counted in requests, the floor "
        f"makes {calls_floor / calls_design:.2f} of the runtime's.",
        "",
        (
            "**What would close the rest:** a final write with a shorter expression (or a "
            "conditional put of the whole final record) would shorten moto's parsing, not "
            "DynamoDB's work; fewer idle "
            "receives (a long poll where the emulator allows it) and no instance read after a "
            "commit (the counter's new value is not returned by a transaction) are what is "
            "left between the two sides' requests."
            if not t["met"]
            else ""
        ),
        "",
    ]
    return out


def tick_section(k: dict[str, Any], f: dict[str, Any]) -> list[str]:
    per_task = k["emulator_per_task"]
    emulator_ms = sum(v["emulator_ms"] for v in per_task.values())
    calls = sum(v["calls"] for v in per_task.values())
    out = [
        "## Tick with many due tasks",
        "",
        f"{k['due_tasks']:,} one-shard `noop` tasks all due at one instant; `dispatch_tick` "
        f"handles that tick in this process; {plural(k['runs'], 'tick')}"
        + (f" ({k['path']})" if "path" in k else "")
        + f". Durations (s): {', '.join(map(str, k['tick_seconds']))}; median "
        f"{k['tick_median_s']} s, **{k['claims_per_s']} claims per second**. A 10,000-task tick: "
        f"**{k['tick_10k_due_seconds']} s** ({k['tick_10k_basis']}); target: well inside the "
        f"minute, {verdict(k['met'])}.",
        "",
        f"Per due task: {calls:.2f} calls, {emulator_ms:.1f} ms of emulator time "
        f"(the emulator was busy {k['emulator_share'] * 100:.0f}% of the tick; the rest is "
        "the client: botocore, a new connection per request to the emulator, pydantic):",
        "",
    ]
    out += table(
        ["operation", "calls per task", "ms per call"],
        [[op, v["calls"], v["ms_per_call"]] for op, v in per_task.items()],
    )
    out.append("")
    cpu_ms = k.get("dispatcher_cpu_ms_per_task")
    aws = k.get("aws_estimate_10k_s")
    if not k["met"]:
        out += [
            "**Why it is missed.** This run's tick made "
            f"{k.get('requests_per_task', calls)} requests per due task, "
            f"{emulator_ms:.1f} ms of emulator time and {cpu_ms} ms of the dispatcher's own CPU "
            "each (the emulator and the dispatcher share this process's GIL)"
            + (
                "; on AWS, an estimate from this run rather than a measurement (its CPU on a "
                "Lambda's share of a vCPU plus its calls at the round trips assumed for the "
                "cost figures, added rather than overlapped): "
                + ", ".join(f"{v} s at {mb}" for mb, v in aws.items())
                if aws
                else ""
            )
            + ". The dispatcher's function timeout (template.yaml) ends a tick that overruns "
            "it; the tasks it did not reach stay due for the next delivery.",
            "",
        ]
    return out


def coldstart_section(c: dict[str, Any], f: dict[str, Any]) -> list[str]:
    out = ["## Cold start", ""]
    if "cold_start_ratio_to_floor" not in c:  # a run of an earlier definition: not comparable
        return [*out, "Not measured in this run by the current definition (`bench/coldstart.py`)."]
    fns = c["functions"]
    out += [
        "Each function's `import app` in its code directory (as Lambda imports the handler's "
        "module, with the CoreLayer's packages on the path) against its floor: the same "
        "function importing only the libraries it cannot drop and building what it builds "
        "from them at import (the Powertools logger, metrics, batch processor or resolver), "
        f"listed below. A fresh interpreter per run, {plural(c['runs'], 'run')} of each side "
        "alternated (A B, B A, ...) after one untimed run; the time is the process's CPU "
        "time around the import, the median of the runs (the wall time beside it moves with "
        "the load of the shared machine; the interpreter's own start is outside both).",
        "",
    ]
    out += table(
        [
            "function",
            "floor (ms)",
            "import (ms)",
            "ratio",
            "per-run ratio (quartiles)",
            "wall floor / import (ms)",
            "wall ratio",
            "full GCs (import / floor)",
            "ratio, collector off",
        ],
        [
            [
                name,
                fn["floor_ms"],
                fn["import_ms"],
                f"**{fn['ratio']}**" if name == c["worst"] else fn["ratio"],
                " – ".join(str(q) for q in fn["pair_ratio_quartiles"]),
                f"{fn['wall_floor_ms']} / {fn['wall_import_ms']}",
                fn["wall_ratio"],
                f"{fn['full_collections']['import']} / {fn['full_collections']['floor']}",
                fn.get("without_collector", {}).get("ratio", "n/a"),
            ]
            for name, fn in fns.items()
        ],
    )
    scan = c.get("entry_point_scan")
    if scan:
        out += [
            "",
            "Outside the import, once per process: a worker's first scan of the entry-point "
            f"group `iotsched.handlers` took {scan['cpu_ms']} ms of CPU ({scan['wall_ms']} ms "
            f"wall) over {scan['distributions']} installed distributions, naming "
            f"{scan['handlers']} handlers without importing them.",
        ]
    unloaded = {name: fn["floor_modules_not_loaded"] for name, fn in fns.items()}
    out += [
        "",
        f"Figure: the largest ratio, {c['cold_start_ratio_to_floor']} ({c['worst']}); target "
        f"≤ {c['target']}: {verdict(c['met'])}. Every function's import loads every module of its "
        "floor (a library needed on every invocation is not deferred to the first one): "
        + (
            "yes."
            if not any(unloaded.values())
            else "**no**: "
            + "; ".join(f"{n}: {', '.join(m)}" for n, m in unloaded.items() if m)
            + "."
        ),
        "",
        "The floors: what each function cannot drop, and why.",
        "",
    ]
    reasons: dict[str, list[str]] = {}
    for name, fn in fns.items():
        for why in fn["floor"]:
            reasons.setdefault(why, []).append(name)
    out += [f"* {why} ({', '.join(names)})." for why, names in reasons.items()]
    out += [
        "",
        "The last column: the same ratio with the garbage collector off in both (CPU medians "
        "of fewer alternated runs): what the modules cost without the collections they set "
        "off. A full collection scans every tracked object, the libraries' included, and "
        "comes when the objects that survived grow by a quarter: a step, not a slope.",
        "",
        "Above the floor (`python -X importtime`, untimed runs: the self time of each module a "
        "function loads and its floor does not, the least of the runs per module, since other "
        "work only adds to it; importtime's own overhead inflates these, and a collection "
        "counts in the module during which it ran):",
        "",
    ]
    for name, fn in fns.items():
        a = fn["above_floor"]
        out.append(
            f"* {name}: {a['self_ms_above_floor']} ms in {a['modules_above_floor']} modules; "
            + ", ".join(f"{m} {ms}" for m, ms in a["largest_modules_ms"].items())
            + "."
        )
    out += [
        "",
        "Imported where they are used, not at a cold start (`tests/unit/test_cold_imports.py` "
        "fails if a function's import loads one again): the task library's handlers (on the "
        "first lookup of a handler's name: the dispatcher, sweeper, DLQ handler and API never "
        "run one), the API's routes, models and use-cases outside the API, each function's "
        "use-cases outside the others, the console's timeline; never on a Lambda's path: the "
        "in-memory fakes, the fault injector, the HTTP Device Management System client, the "
        "OpenAPI generator, the CLI, the local runtime, moto, yaml, rich, click.",
        "",
    ]
    if not c["met"]:
        worst = fns[c["worst"]]
        gcs = worst["full_collections"]
        off = worst.get(
            "without_collector", {"ratio": "n/a", "import_ms": "n/a", "floor_ms": "n/a"}
        )
        out += [
            "**Why it is missed.** What remains above the floors is the modules every "
            "invocation runs: the task and record models (pydantic class creation, even with "
            "their validators built on first use), the frozen dataclasses and protocols of the "
            "ports and services (each dataclass compiles its generated methods), the adapters "
            "the composition root builds, and for the API its routes, models and use-cases. "
            f"For {c['worst']}: {worst['above_floor']['self_ms_above_floor']} ms of module self "
            f"time above its floor under importtime; its import made {gcs['import']} full "
            f"garbage collection(s) against its floor's {gcs['floor']}, and with the collector "
            f"off in both its ratio is {off['ratio']} ({off['import_ms']} ms against "
            f"{off['floor_ms']} ms).",
            "",
            "**What would close it.** Fewer classes created at import on the paths every "
            "invocation takes: plain classes (or `__slots__` classes without generated "
            "methods) for the ports' and services' value types, the API's routes importing "
            "their use-cases and models on first call (a resolver per route group), and models "
            "that only some paths read (alerts, submissions, dependencies) in modules of their "
            "own. For the full collection: freezing the objects the libraries created "
            "(`gc.freeze()` in each function's module once its floor's libraries are imported) "
            "would spare every later collection the scan of them.",
            "",
        ]
    return out


def planning_section(p: dict[str, Any], f: dict[str, Any]) -> list[str]:
    out = [
        "## Planning an id_range instance (100 shards)",
        "",
        "`build_instance` (which plans with `plan_shards`), then the 100 `shard_messages` and "
        f"their JSON bodies; time: median of {plural(p['runs'], 'run')}; memory: tracemalloc peak.",
        "",
    ]
    out += table(
        ["devices", "median (ms)", "peak (MB)", "message bytes"],
        [
            [f"{int(n):,}", p["median_ms"][n], p["plan_peak_mb"][n], p["message_bytes"][n]]
            for n in p["plan_peak_mb"]
        ],
    )
    out += [
        "",
        f"Peak at 1M over peak at 10k: {p['peak_growth_1m_over_10k']} ({verdict(p['met'])}: the "
        "plan stores the id space and the count; each shard's bounds are derived).",
    ]
    return out


def peer_section(p: dict[str, Any], f: dict[str, Any]) -> list[str]:
    out = [
        "## Peer side by side: APScheduler 3",
        "",
        f"{p['jobs']:,} no-op jobs all due at one instant, {plural(p['runs_per_side'], 'run')} each, "
        "alternated. iotsched: the local runtime (dispatcher process, 2 worker processes, "
        "the emulator; the dispatcher's function timeout raised from the template's 60 s to "
        "900 s, since a tick of many tasks can take longer than a minute here and the runtime ends a "
        "dispatcher that overruns, as Lambda does; the table emptied before each run); from "
        "the tick to an empty shard queue, "
        "then every instance checked "
        f"`succeeded` ({p['iotsched_all_succeeded']}). APScheduler {p.get('version', '3')}: "
        f"{p['apscheduler_setup']}; from the due instant to the last job's "
        f"EVENT_JOB_EXECUTED (all ran: {p['apscheduler_all_ran']}, missed: "
        f"{p['apscheduler_missed']}).",
        "",
    ]
    out += table(
        ["scheduler", "runs (s)", "median (s)", "jobs/s"],
        [
            [
                "iotsched (local runtime)",
                ", ".join(map(str, p["iotsched_seconds"])),
                p["iotsched_median_s"],
                p["iotsched_jobs_per_s"],
            ],
            [
                "APScheduler 3",
                ", ".join(map(str, p["apscheduler_seconds"])),
                p["apscheduler_median_s"],
                p["apscheduler_jobs_per_s"],
            ],
        ],
    )
    out += [
        "",
        f"Ratio (iotsched time / APScheduler time): **{p['ratio']}**.",
        "",
    ]
    if p["jobs"] < 1000:
        out += [
            f"*Scale:* {p['jobs']:,} jobs rather than 1,000 in this profile (iotsched's side "
            "is bound by the emulator, which serves one request at a time); "
            "`python -m bench --full` runs 1,000.",
            "",
        ]
    out += [
        "What the comparison leaves out. APScheduler runs every job inside one process: there "
        "is no failover (a job running when the process dies is lost, and nothing re-runs "
        "it), and no claim: its job store is not a lock, so two schedulers sharing the SQLite "
        "(or any SQLAlchemy) store would both run each due job (APScheduler 3 does not support "
        "sharing a job store between schedulers). It keeps no per-run record, attempt, lease "
        "or fencing, shards nothing, and misfires are only a grace time and coalescing. "
        "iotsched pays for each of those in requests: a conditional claim per slot, a lease "
        "per shard, a fenced completion, a record per attempt, across processes that may "
        "die. iotsched's time here is also the emulator's (one request at a time, several "
        "per job); APScheduler's is SQLite on local disk.",
    ]
    return out


# Typography.


def plural(count: int, word: str) -> str:
    """'1 run', '5 runs', '1,000 shards'."""
    return f"{count:,} {word}" + ("" if count == 1 else "s")


def verdict(met: Any) -> str:
    if met is None:
        return "n/a"
    return "**met**" if met else "**missed**"


def table(header: list[str], rows: list[list[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return lines


def fmt_counter(counter: Counter[str]) -> str:
    """'failed 2, succeeded 5': a count per name, by name."""
    return ", ".join(f"{k} {v}" for k, v in sorted(counter.items()))
