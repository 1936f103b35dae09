"""The report's timed sections: dispatch of one big instance, end-to-end throughput, the tick."""

from __future__ import annotations

from typing import Any

from bench.report.text import plural, table, verdict


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
