"""bench/results.json and bench/results.md from one run's figures.

The "Chaos run" sections of results.md belong to `iotsched.local.chaos` (`make chaos` and its
`--default-timeouts` run): they are carried over as they are, after this run's sections.
"""

# ruff: noqa: RUF001  (the report's typography: multiplication signs and en dashes)

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CHAOS_HEADING = "## Chaos run"
FULL_STEM = "results-full"
#: The cold-start target: the largest function ratio to the bare handler.
TARGET = 1.5
#: Item kinds by key prefixes (pk/sk), as `iotsched.adapters.dynamodb` lays the table out.
ITEM_KINDS = {
    "TASK/DEF": "task",
    "TASK/INST": "instance",
    "INST/SHARD": "shard record",
    "EFFECT/EFFECT": "effect key",
}


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
    return {
        "requests_per_shard": {
            **cost.get("requests_per_shard", {}),
            "dynamodb_wru": cost.get("dynamodb_wru_per_shard"),
            "dynamodb_rru": cost.get("dynamodb_rru_per_shard"),
        }
        if cost
        else None,
        "usd_per_million_shards": cost.get("usd_per_million_shards"),
        "dispatch_10k_ratio_to_floor": dispatch.get("ratio"),
        "throughput_ratio_to_floor": throughput.get("ratio"),
        "tick_10k_due_seconds": tick.get("tick_10k_due_seconds"),
        "tick_max_tasks_per_invocation": figures.get("tick_fanout", {}).get(
            "tick_max_tasks_per_invocation"
        ),
        "cold_start_ratio": cold.get("cold_start_ratio"),
        "plan_peak_mb": plan.get("plan_peak_mb"),
        "peer_apscheduler_ratio": peer.get("ratio"),
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
    out += _table(["figure", "how", "measured", "target", "result"], _summary_rows(full["figures"]))
    return "\n".join(out) + "\n"


# -- markdown ----------------------------------------------------------------------------------


def _n(count: int, word: str) -> str:
    """'1 run', '5 runs', '1,000 shards'."""
    return f"{count:,} {word}" + ("" if count == 1 else "s")


def _yes(met: Any) -> str:
    if met is None:
        return "n/a"
    return "**met**" if met else "**missed**"


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return lines


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
    out += _table(["figure", "how", "measured", "target", "result"], _summary_rows(f))
    out.append("")
    for name, section in (
        ("cost", _cost),
        ("dispatch", _dispatch),
        ("throughput", _throughput),
        ("tick", _tick),
        ("coldstart", _coldstart),
        ("planning", _planning),
        ("peer", _peer),
    ):
        if name in f:
            out += section(f[name], f)
            out.append("")
    out += _emulator_notes()
    return "\n".join(out).rstrip("\n") + "\n"


def _summary_rows(f: dict[str, Any]) -> list[list[Any]]:
    rows: list[list[Any]] = []
    if "cost" in f:
        c = f["cost"]
        r = c["requests_per_shard"]
        rows.append(
            [
                "AWS requests per shard execution",
                f"botocore hooks over {_n(c['instances'], 'instance')} × "
                f"{c['shards_per_instance']} no-op shards",
                f"DynamoDB {c['dynamodb_wru_per_shard']} WRU ({r['dynamodb']} requests, "
                f"{c['dynamodb_rru_per_shard']} RRU); SQS {r['sqs']}; Lambda {r['lambda']}",
                "≤ 3.5 WRU; ≤ 0.35 SQS; ≤ 0.12 Lambda",
                " / ".join(
                    _yes(c["met"][k]).replace("**", "") for k in ("dynamodb_wru", "sqs", "lambda")
                ),
            ]
        )
        rows.append(
            [
                "USD per million shards",
                "list prices (below) × the counts; Lambda GB-s from the handlers' CPU time plus "
                "assumed AWS round trips",
                f"${c['usd_per_million_shards']}",
                "≤ $2.5",
                _yes(c["met"]["usd_per_million"]),
            ]
        )
    if "dispatch" in f:
        d = f["dispatch"]
        rows.append(
            [
                f"dispatch of one instance with {d['shards']:,} shards",
                f"dispatcher handler vs {d['send_message_batch_calls']['floor']:,} bare "
                f"SendMessageBatch, {_n(d['runs_per_side'], 'run')} each",
                f"ratio {d['ratio']} ({d['design_median_s']} s vs {d['floor_median_s']} s)",
                "≤ 1.3",
                _yes(d["met"]),
            ]
        )
    if "throughput" in f:
        t = f["throughput"]
        rows.append(
            [
                "end-to-end throughput",
                f"local runtime, 2 workers vs bare loop, {t['shards_per_run']} shards × "
                f"{_n(t['runs_per_side'], 'run')} each",
                f"ratio {t['ratio']} ({t['design_shards_per_s']} vs {t['floor_shards_per_s']} "
                "shards/s)",
                "≥ 0.6",
                _yes(t["met"]),
            ]
        )
    if "tick" in f:
        k = f["tick"]
        rows.append(
            [
                "tick with 10,000 due tasks",
                f"{_n(k['runs'], 'tick')} of {k['due_tasks']:,} due tasks",
                f"{k['claims_per_s']} claims/s; 10k tick {k['tick_10k_due_seconds']} s"
                + ("" if k["due_tasks"] >= 10_000 else " (extrapolated)"),
                "well inside the minute",
                _yes(k["met"]),
            ]
        )
    if "coldstart" in f:
        c = f["coldstart"]
        rows.append(
            [
                "cold start",
                f"`python -X importtime`, median of {_n(c['runs'], 'fresh interpreter')}",
                f"ratio {c['cold_start_ratio']} ({c['worst']}: "
                f"{c['median_ms'][c['worst']]} ms vs {c['median_ms']['baseline']} ms)",
                "≤ 1.5",
                _yes(c["met"]),
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
                _yes(p["met"]),
            ]
        )
    if "peer" in f:
        p = f["peer"]
        rows.append(
            [
                f"peer: {p['jobs']:,} no-op jobs due at one instant",
                f"local runtime vs APScheduler 3 (SQLite job store, thread pool), "
                f"{_n(p['runs_per_side'], 'run')} each",
                f"iotsched {p['iotsched_median_s']} s vs APScheduler "
                f"{p['apscheduler_median_s']} s: ratio {p['ratio']}",
                "report",
                "reported",
            ]
        )
    return rows


def _cost(c: dict[str, Any], f: dict[str, Any]) -> list[str]:
    r = c["requests_per_shard"]
    out = [
        "## AWS requests and USD per shard execution",
        "",
        f"{_n(c['instances'], 'instance')} × {c['shards_per_instance']} no-op shards "
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
            f"*Scale:* {_n(c['instances'], 'instance')} rather than 100 (the emulator takes about "
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
            _yes(c["met"]["dynamodb_wru"]),
        ],
        ["SQS (billed requests)", r["sqs"], "", "≤ 0.35", _yes(c["met"]["sqs"])],
        ["Lambda invocations", r["lambda"], "", "≤ 0.12", _yes(c["met"]["lambda"])],
        ["SNS publishes", r["sns"], "", "", ""],
    ]
    out += _table(["service", "requests per shard", "units per shard", "target", "result"], rows)
    out += ["", "Calls per shard by caller:", ""]
    op_rows = []
    for phase, ops in c["calls_per_shard_by_phase"].items():
        for op, n in ops.items():
            op_rows.append([phase, op, n])
    out += _table(["caller", "operation", "calls per shard"], op_rows)
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
    out += _table(
        ["item", "USD per million shards"],
        [[k, f"${v}"] for k, v in c["usd_per_million_by_item"].items()]
        + [["**total**", f"**${c['usd_per_million_shards']}**"]],
    )
    out.append("")
    wru = c["wru_per_shard_by_operation"]
    inst = c["largest_item_bytes"].get("TASK/INST", 0)
    counter_wru = 4 if inst > 1024 else 2
    worker_calls = c["calls_per_shard_by_phase"].get("worker", {})
    transactions = worker_calls.get("DynamoDB.TransactWriteItems", 0)
    out += [
        "**How a shard is paid for.** One lease write per shard, a conditional PutItem of "
        f"the new shard record for a first attempt ({wru.get('PutItem', 0)} WRU per shard with "
        "the dispatcher's claims; retries and takeovers update the record instead); the "
        "completions of one worker batch in one TransactWriteItems "
        f"({transactions} per shard, {wru.get('TransactWriteItems', 0)} WRU per shard): each "
        f"shard record's fenced final write (2 WRU, transactional) and one counter decrement per "
        f"instance in the batch ({counter_wru} WRU: the instance item is {inst} bytes while it "
        "runs" + (", over 1 KB, so a write to it costs 2 KB" if inst > 1024 else "") + "); "
        f"one strongly consistent read per instance before the batch's leases and one after its "
        f"commit to learn `remaining` ({c['dynamodb_rru_per_shard']} RRU per shard). With full "
        f"batches of one instance: 1 + (10 × 2 + {counter_wru}) / 10 = "
        f"{1 + (20 + counter_wru) / 10:.1f} WRU per shard plus the dispatcher's share.",
        "",
        "*Batch size:* these figures take batches of 10, template.yaml's default "
        "`WorkerBatchSize`. The worker holds a batch's records at a visibility of one lease so "
        "that a dead worker's unstarted records come back within a lease: one "
        "ChangeMessageVisibilityBatch when the invocation starts "
        f"({worker_calls.get('SQS.ChangeMessageVisibilityBatch', 0)} per shard here) and three "
        "a lease period while it runs (these no-op batches end before the first). At 1 (the "
        "chaos run's setting) every shard is a "
        "batch of its own: one invocation, no visibility hold, one two-item transaction "
        f"(2 + {counter_wru} WRU) and two instance reads per shard. A worker that dies holding "
        "a batch also loses its finished shards' uncommitted completions: their messages come "
        "back and the shards run again as their next attempt (the effect ledger keeps their "
        "effects single).",
        "",
    ]
    if not c["met"]["sqs"]:
        out += [
            "**Why the SQS target is missed.** The batch's visibility hold is one request per "
            "invocation of several records (0.1 per shard with full batches): the price of a "
            "dead worker's unstarted records coming back within a lease rather than a "
            "visibility timeout ($0.04 per million shards). Batches of 1 make none, and cost "
            "an invocation, a receive and a delete per shard instead.",
            "",
        ]
    if not c["met"]["dynamodb_wru"] or not c["met"]["usd_per_million"]:
        usd = c["usd_per_million_by_item"]
        out += [
            "**Why a target is missed.** DynamoDB writes are "
            f"${usd['dynamodb_writes']} of the ${c['usd_per_million_shards']} per million.",
            "",
        ]
    if inst > 1024:
        out += [
            "**What would lower it further** (changes in `src/`, not made here): keep the "
            "instance's counter on a small item of its own (`INST#<id>` / `COUNT`, under 100 "
            "bytes) or keep the instance item under 1 KB: 2 WRU per batch for the counter "
            f"instead of 4, {1 + 22 / 10:.1f} WRU per shard with full batches.",
            "",
        ]
    return out


def _dispatch(d: dict[str, Any], f: dict[str, Any]) -> list[str]:
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
    out += _table(
        ["side", "runs (s)", "median (s)"],
        [
            ["dispatcher handler", ", ".join(map(str, d["design_seconds"])), d["design_median_s"]],
            ["bare floor", ", ".join(map(str, d["floor_seconds"])), d["floor_median_s"]],
        ],
    )
    out += [
        "",
        f"Ratio {d['ratio']} (target ≤ 1.3: {_yes(d['met'])}); per pair: "
        + ", ".join(map(str, d["pair_ratios"]))
        + ".",
    ]
    return out


def _throughput(t: dict[str, Any], f: dict[str, Any]) -> list[str]:
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
    out += _table(
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
        f"Ratio {t['ratio']} (target ≥ 0.6: {_yes(t['met'])}); per pair: "
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
    out += _table(["side", "operation", "calls/shard", "ms/call", "ms/shard"], rows)
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
        "**How it got here** (src): the shards of one worker batch commit in one transaction "
        "(one instance read before the leases and one after the commit, per batch), held by a "
        "timer rather than committed before every shard that could outlast them, so the "
        "default timeouts batch too (this ratio was 0.19 while they did not); and a first "
        "attempt's lease is a conditional PutItem of the new shard record (the update "
        "expression, `if_not_exists` and `list_append`, took ~44 ms per call in moto; retries "
        "and takeovers still use it). "
        + (
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


def _tick(k: dict[str, Any], f: dict[str, Any]) -> list[str]:
    per_task = k["emulator_per_task"]
    emulator_ms = sum(v["emulator_ms"] for v in per_task.values())
    calls = sum(v["calls"] for v in per_task.values())
    batched = str(k.get("path", "one by one")).startswith("batched")
    out = [
        "## Tick with many due tasks",
        "",
        f"{k['due_tasks']:,} one-shard `noop` tasks all due at one instant; `dispatch_tick` "
        f"handles that tick in this process; {_n(k['runs'], 'tick')}"
        + (f" ({k['path']})" if "path" in k else "")
        + f". Durations (s): {', '.join(map(str, k['tick_seconds']))}; median "
        f"{k['tick_median_s']} s, **{k['claims_per_s']} claims per second**. A 10,000-task tick: "
        f"**{k['tick_10k_due_seconds']} s** ({k['tick_10k_basis']}); target: well inside the "
        f"minute, {_yes(k['met'])}.",
        "",
        f"Per due task: {calls:.2f} calls, {emulator_ms:.1f} ms of emulator time "
        f"(the emulator was busy {k['emulator_share'] * 100:.0f}% of the tick; the rest is "
        "the client: botocore, a new connection per request to the emulator, pydantic):",
        "",
    ]
    out += _table(
        ["operation", "calls per task", "ms per call"],
        [[op, v["calls"], v["ms_per_call"]] for op, v in per_task.items()],
    )
    out.append("")
    if batched:
        out += [
            "**How.** From 10 due tasks on, the tick takes pages of 100 tasks, 4 in flight: one "
            "TransactWriteItems per ~100 claims (a cancelled transaction's CancellationReasons "
            "name the claims that lost; those tasks go one by one, the rest again), the shard "
            "messages of every instance of the page in shared SendMessageBatch calls, then one "
            "transaction per ~100 running marks and one per ~100 clock advances, in the order "
            "of the one-by-one path, so a crash leaves what it always left (see "
            "`iotsched.services.dispatch`). Before this, each task took four round trips "
            "(about 18 claims per second here, a 10,000-task tick 450-550 s).",
            "",
        ]
    cpu_ms = k.get("dispatcher_cpu_ms_per_task")
    aws = k.get("aws_estimate_10k_s")
    if not k["met"] and batched:
        aws_text = (
            " On AWS (an estimate from this run, not a measurement: its CPU on a Lambda's share "
            "of a vCPU plus its calls at the round trips assumed for the cost figures, added "
            "rather than overlapped): " + ", ".join(f"{v} s at {mb}" for mb, v in aws.items()) + "."
            if aws
            else ""
        )
        out += [
            "**Why it is missed.** The tick makes about "
            f"{k.get('requests_per_task', calls)} requests per task; what is left is the "
            "emulator's CPU, which this process shares (one GIL) with the dispatcher "
            f"({cpu_ms} ms of CPU per due task here). Where it goes, from "
            "`python -m bench.tick_profile 2000` (a 2,000-task tick, one page in flight, the "
            "emulator thread's CPU per task; 2026-11-29 19:56 UTC, load average 2.1): "
            "TransactWriteItems 5.05 ms, of which moto's request handler 0.86 (it parses "
            "every action's expressions to validate them, and the backend parses them again), "
            "the claims' conditional puts 0.43, the clock advances' updates 1.82, the running "
            "marks' updates 1.32, the rest 0.39 (conditions evaluated, items backed up for a "
            "rollback); the due Query 1.26 ms (moto scans the whole table and sorts the due "
            "partition for every 1 MB page, then serialises the answer attribute by "
            "attribute); SendMessageBatch 0.47 ms. A moto UpdateItem costs 3-5 times a "
            "conditional PutItem, and the design needs two per task (the running mark, the "
            "clock advance) besides the claim. That floor, about 6.8 ms of emulator CPU and "
            "1.1 ms of dispatcher CPU per task, is some 80 s for 10,000 tasks on an idle core "
            "before the Query's scans grow with the table; on a loaded machine it is more.",
            "",
            "**Weighed, with figures** (ad hoc A/B runs on this machine, 2026-11-29): "
            "the due Query now returns only the attributes a task record is built from "
            "(ProjectionExpression; 4 interleaved runs over 2,000 due tasks: 0.64-0.88 against "
            "1.08-1.24 ms of emulator time per task, 0.79-0.95 against 1.16-1.43 ms of wall "
            "time; the read units are the same). Larger Query pages: none to have, DynamoDB "
            "ends a page at 1 MB of items read whatever the Limit or projection. Plain "
            "conditional writes instead of the transactions (`python -m bench.tick_profile "
            "1000 --plain`, the one-by-one path): 2.94 ms of emulator CPU per PutItem request "
            "and 6.77 per UpdateItem request against 0.35-0.43 and 1.3-2.3 (+0.4 of "
            "validation) inside a transaction, and 9.75 ms of dispatcher CPU per task against "
            "1.1: half the write units on AWS, but much slower here and on a Lambda's CPU. The "
            "claim and the clock advance in one transaction: two actions per task, so a page "
            "of 100 still needs two transactions for them (100 actions each), the same three "
            "per page, and the clock would move before the messages are sent. Pages in "
            "flight, 1 against 4 (2,000 tasks, two runs each): 16.9 and 25.9 s against 20.8 "
            "and 20.5 s, the machine's noise: the emulator takes one request at a time and "
            "shares the dispatcher's GIL, so in-flight pages only matter against a real "
            "service's latency." + aws_text,
            "",
            "**What would close it.** On this emulator, nothing on the dispatcher's side "
            "without a design change, and not well inside the minute even with one: without "
            "the running marks (about 1.7 ms per task with their share of the validation, "
            "some 17 s of 10,000 tasks) the floor would still be near a minute. The running "
            "mark is what tells the sweeper that an "
            "instance's messages went out (it re-sends every `planning` instance whose "
            "dispatch lease ended), so dropping it needs the worker's first lease to move the "
            "instance on instead. The rest is moto's own cost (its update parsing and "
            "validation, its whole-table scan per Query page; its whole-table copy per "
            "transaction is already replaced by a per-item backup in bench/common.py), not "
            "the dispatcher's to remove. On AWS "
            "the tick is CPU-bound at 512 MB (about 0.3 vCPU): a larger memory size for the "
            "dispatcher (one vCPU at 1,769 MB), or the due list split across parallel "
            "dispatcher invocations (the conditional claims keep duplicates harmless). Most "
            "of the dispatcher's CPU is botocore's (building, validating and parsing the "
            "batched requests); turning its parameter validation off saved nothing "
            "measurable here (1,000 tasks, two runs each: 0.69 and 0.88 against 0.77 and "
            "0.84 ms per task).",
            "",
        ]
    elif not k["met"]:
        cpu_text = (
            f" The dispatcher's own CPU time was {cpu_ms} ms per due task here (botocore "
            "serialising and parsing four calls, pydantic building the instance and its "
            f"messages): {cpu_ms * 10:.0f} s of CPU for 10,000 tasks on this machine's cores, "
            "and a 512 MB Lambda has about 0.3 of a vCPU (one vCPU at 1,769 MB)."
            if cpu_ms
            else ""
        )
        out += [
            "**Why it is missed.** `dispatch_tick` handles due tasks one after another, four "
            "round trips each (claim PutItem, SendMessageBatch of the instance's messages, the "
            "running UpdateItem, the task's advance UpdateItem). At 5–10 ms per DynamoDB or "
            "SQS call from a Lambda, the waiting alone is 200–300 s for 10,000 tasks on AWS; "
            "here each round trip also pays the emulator." + cpu_text + " The dispatcher's "
            "function timeout (60 s by default in the template) also ends such a tick "
            "part-way; the tasks it did not reach stay due and wait for the next delivery (a "
            "retry of the invocation or the next minute's tick).",
            "",
        ]
    return out


def _coldstart(c: dict[str, Any], f: dict[str, Any]) -> list[str]:
    out = [
        "## Cold start",
        "",
        '`python -X importtime -c "import app"` in each function\'s code directory, a fresh '
        f"interpreter per run, {_n(c['runs'], 'run')} each after one untimed run, interleaved; the "
        "baseline is `bench/baseline_handler/app.py` (Powertools Logger and Metrics, "
        "`import boto3`, a decorated handler).",
        "",
    ]
    out += _table(
        ["module", "median import (ms)", "ratio to baseline", "interpreter CPU (ms)", "CPU ratio"],
        [
            [
                n,
                v,
                c["ratios"].get(n, 1.0),
                c["interpreter_cpu_median_ms"][n],
                c["cpu_ratios"].get(n, 1.0),
            ]
            for n, v in c["median_ms"].items()
        ],
    )
    worst = c["worst"]
    out += [
        "",
        f"Figure: the largest ratio, {c['cold_start_ratio']} ({worst}); target ≤ 1.5: "
        f"{_yes(c['met'])}. The CPU columns (user + system time of the whole interpreter, "
        "read from the kernel) check the wall-clock figure: they move less when other "
        "processes share the machine.",
        "",
        f"Self time by package inside `{worst}`'s import (ms): "
        + ", ".join(f"{k} {v}" for k, v in c["top_packages_ms"][worst].items())
        + "; in the baseline: "
        + ", ".join(f"{k} {v}" for k, v in c["top_packages_ms"]["baseline"].items())
        + ". Largest iotsched modules: "
        + ", ".join(f"{k} {v}" for k, v in c["top_iotsched_modules_ms"].items())
        + ".",
        "",
    ]
    floors = c.get("floors", {})
    counted = c.get("instructions")
    # Ratios of functions and floors for the comparisons below: counted when there is a count
    # (the load of the machine does not move it), else timed.
    steady = counted["ratios"] if counted else {**c["ratios"]}
    if not counted:
        steady.update({name: fl["ratio"] for name, fl in floors.items()})
    if floors:
        floor_of = {fn: name for name, fl in floors.items() for fn in fl["floor_of"]}
        out += [
            "Each function's floor, measured the same way in the same run (not in the figure): "
            "the baseline plus only the libraries the function cannot drop, imported in its "
            "order: pydantic (the task models' validation library, in the CoreLayer), Powertools' "
            "batch utility (worker and DLQ), its REST resolver with validation "
            "(API), its EventBridge data class (dispatcher). A function's ratio less its "
            "floor's is what iotsched's own modules cost.",
            "",
        ]
        out += _table(
            ["floor", "adds to the baseline", "floor of", "median (ms)", "ratio", "CPU ratio"],
            [
                [
                    name,
                    "; ".join(f"`{line}`" for line in fl["adds"]),
                    ", ".join(fl["floor_of"]),
                    fl["median_ms"],
                    fl["ratio"],
                    fl["cpu_ratio"],
                ]
                for name, fl in floors.items()
            ],
        )
        out += [
            "",
            "Over its floor (ratio points, iotsched's own share"
            + (", from the instruction counts below" if counted else "")
            + "): "
            + ", ".join(
                f"{fn} {steady[fn] - steady[floor_of[fn]]:+.2f}"
                for fn in c["ratios"]
                if fn in floor_of and fn in steady and floor_of[fn] in steady
            )
            + ".",
            "",
        ]
    if counted:
        out += [
            "The same modules counted in instructions (`python -m bench.coldstart "
            f"--instructions`, valgrind's callgrind, {counted['when']}; the interpreter's own "
            f"start, {counted['interpreter_start'] / 1e6:.1f} million, subtracted). A count "
            "does not move with the load of the machine, which the timed medians above do by "
            "tenths when other work shares it; it leaves out page faults and cache misses, so it "
            "checks the timed ratios rather than replaces them.",
            "",
        ]
        out += _table(
            ["module", "instructions (millions)", "ratio to baseline"],
            [
                [name, f"{n / 1e6:.1f}", counted["ratios"].get(name, 1.0)]
                for name, n in counted["instructions"].items()
            ],
        )
        out.append("")
    floor_ratio = {name: steady.get(name, fl["ratio"]) for name, fl in floors.items()}
    if not c["met"]:
        over = [name for name in floors if floor_ratio[name] > TARGET]
        out += [
            "**Why it is missed.** "
            + (
                f"Pydantic's own import is {floor_ratio['baseline+pydantic']} of the "
                "baseline before any model is defined; the floors "
                + ", ".join(f"{name} ({floor_ratio[name]})" for name in over)
                + " are already over the target"
                + (" (counted in instructions)" if counted else "")
                + ", so no change inside iotsched meets it for "
                + ", ".join(fn for name in over for fn in floors[name]["floor_of"])
                + ". "
                if over and "baseline+pydantic" in floors
                else ""
            )
            + "What iotsched adds is the modules a function runs on every cold start: the "
            "core models (pydantic class creation, even with validators deferred), the "
            "frozen dataclasses of the ports and services (Python 3.11 compiles each generated "
            "method: about 1 ms a class), the use-cases, and the adapters the composition "
            "root builds; the API adds its routes and models.",
            "",
            "**What would close it.** Outside iotsched: a validation library lighter to import "
            "than pydantic on the Lambda path (the task models are pydantic models), or Powertools "
            "importing less (`utilities.batch` imports asyncio for its async processor and "
            "the data class of every event source; `event_handler` imports every resolver). "
            "Inside: plain classes instead of frozen dataclasses in `iotsched.ports` and the "
            "services, and routes that import their use-cases on first call in the API. "
            "Already off every function's path (checked by "
            "`tests/unit/test_cold_imports.py`): the in-memory fakes, the fault injector and "
            "the HTTP Device Management System client (imported where `iotsched.bootstrap` "
            "chooses them), the API models' validators (built on first use), the CLI, the "
            "local runtime, moto, yaml and rich.",
            "",
        ]
    return out


def _planning(p: dict[str, Any], f: dict[str, Any]) -> list[str]:
    out = [
        "## Planning an id_range instance (100 shards)",
        "",
        "`build_instance` (which plans with `plan_shards`), then the 100 `shard_messages` and "
        f"their JSON bodies; time: median of {_n(p['runs'], 'run')}; memory: tracemalloc peak.",
        "",
    ]
    out += _table(
        ["devices", "median (ms)", "peak (MB)", "message bytes"],
        [
            [f"{int(n):,}", p["median_ms"][n], p["plan_peak_mb"][n], p["message_bytes"][n]]
            for n in p["plan_peak_mb"]
        ],
    )
    out += [
        "",
        f"Peak at 1M over peak at 10k: {p['peak_growth_1m_over_10k']} ({_yes(p['met'])}: the "
        "plan stores the id space and the count; each shard's bounds are derived).",
    ]
    return out


def _peer(p: dict[str, Any], f: dict[str, Any]) -> list[str]:
    out = [
        "## Peer side by side: APScheduler 3",
        "",
        f"{p['jobs']:,} no-op jobs all due at one instant, {_n(p['runs_per_side'], 'run')} each, "
        "alternated. iotsched: the local runtime (dispatcher process, 2 worker processes, "
        "the emulator; the dispatcher's function timeout raised from the template's 60 s to "
        "900 s, since a 1,000-task tick takes longer than a minute here and the runtime ends a "
        "dispatcher that overruns, as Lambda does; the table emptied before each run); from "
        "the tick to an empty shard queue, "
        "then every instance checked "
        f"`succeeded` ({p['iotsched_all_succeeded']}). APScheduler {p.get('version', '3')}: "
        f"{p['apscheduler_setup']}; from the due instant to the last job's "
        f"EVENT_JOB_EXECUTED (all ran: {p['apscheduler_all_ran']}, missed: "
        f"{p['apscheduler_missed']}).",
        "",
    ]
    out += _table(
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
            "is bound by the emulator: about ten serial requests per job); "
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
        "die. iotsched's time here is also the emulator's (one request at a time, about "
        "ten per job); APScheduler's is SQLite on local disk.",
    ]
    return out


def _emulator_notes() -> list[str]:
    return [
        "## The emulator",
        "",
        "moto 5 in server mode (`iotsched.local.server.EmulatorServer`), in the benchmark's "
        "process, serving one request at a time: throughput figures are bound by it. Two "
        "fixes apply in the benchmark's process only (`bench/common.py`), to both sides of "
        "every comparison, without changing any result: moto's SendMessage and ReceiveMessage "
        "stop counting every message of the queue for each message they handle (quadratic in "
        "the queue's length otherwise), and TransactWriteItems backs up the items it names "
        "rather than deep-copying the whole table for each transaction (quadratic in the "
        "table's size otherwise). moto's cost per request still varies with the request "
        "(an UpdateItem's time grows with its expression); the sections above give the "
        "emulator's own time per operation (measured inside its request lock) where it "
        "explains a figure.",
        "",
        "Commands: `make bench` (this profile: `python -m bench`), `python -m bench --full` "
        "(the full sizes everywhere; tens of minutes here), `python -m bench --quick` "
        "(a smoke run; writes to a temporary directory unless `--out` is given).",
    ]
