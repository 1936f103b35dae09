"""results.md: the header, the summary table, the sections in order, the emulator's notes."""

# ruff: noqa: RUF001  (the report's typography: multiplication signs and en dashes)

from __future__ import annotations

from typing import Any

from bench.report.coldstart import coldstart_section
from bench.report.cost import cost_section
from bench.report.partitions import partitions_section
from bench.report.peer import peer_section, planning_section
from bench.report.text import plural, table, verdict
from bench.report.timing import dispatch_section, throughput_section, tick_section

FULL_STEM = "results-full"


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
    return rows


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
        "FIFO is the backfill asked at `normal`, sharing B's queue; fair is its default, `low`.",
        "",
    ]
    rows = [
        [
            name,
            p["backfill_priority"],
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
            "B p95 start (s)",
            "B's start delays (s)",
            "A's shards ended when B ended",
        ],
        rows,
    )
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
