"""results.md's sections of how fast and how fair: the dispatch, the throughput, the tick,
cold starts, planning, the peer, and fairness between tenants."""

# ruff: noqa: RUF001  (the report's typography: multiplication signs and en dashes)

from __future__ import annotations

from typing import Any

from bench.markdown import plural, table, verdict


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
