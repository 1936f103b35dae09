"""results.md's sections of what a shard costs: requests and capacity units per shard
(`cost_section`, with the heartbeating shards' `heartbeat_section`) and write units by
partition (`partitions_section`)."""

# ruff: noqa: RUF001  (the report's typography: multiplication signs and en dashes)

from __future__ import annotations

from typing import Any

from bench.common import rounded
from bench.markdown import plural, table, verdict

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
        out += heartbeat_section(long, "usd_per_million_shards_30s")
    five = c.get("heartbeat_5min")
    if five:
        out += heartbeat_section(five, "usd_per_million_shards_5min", target=False)
    return out


def heartbeat_section(k: dict[str, Any], key: str, *, target: bool = True) -> list[str]:
    out = [
        f"### {k['shard_seconds']} s heartbeating shards",
        "",
        f"{plural(k['instances'], 'instance')} × {k['shards_per_instance']} shards of "
        f"{k['shard_seconds']} s on a manual clock (`bench/partitions.py`, scenario "
        f"`heartbeat_30s`, its shards' length set): each heartbeats every {k['heartbeat_s']:.0f} s and asks "
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
    if target and not k["met"]:
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
            "shard, and so the cancellation reads (one per renewal period and running "
            "shard). Left to a later change: it moves the worker's attempt timer off the "
            "main thread's SIGALRM.",
        ]
    out += [
        "",
        f"`{key}` = **${k['usd_per_million_shards']}** "
        + (f"(target ≤ ${k['target']}: {verdict(k['met'])})." if target else "(reported)."),
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
    for subsection in (_reads_section(p), _own_keys_section(p)):
        if subsection:
            out += ["", *subsection]
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
        if s.get("read_partitions"):
            out += [
                "",
                f"Reads: {s['rcu']:,} RCU, {s['rcu_per_shard']} per shard ("
                + ", ".join(f"{t} {v['rcu']:,}" for t, v in s["read_by_target"].items())
                + f"); {s['read_partition_count']:,} partitions read. The hottest by RCU:",
                "",
            ]
            out += table(
                ["table or index", "partition key", "class", "reads", "RCU"],
                [
                    [
                        r["target"],
                        f"`{r['partition']}`",
                        r["class"],
                        ", ".join(f"{op} {n:,}" for op, n in r["reads"].items()),
                        r["rcu"],
                    ]
                    for r in s["read_partitions"]
                ],
            )
    out += [
        "",
        "Every shared partition written is listed, and the hottest few read; of the per-task "
        "and per-instance ones, the two hottest of each table or index (`partition_count` and "
        "`read_partition_count` in `results.json`'s details count them all).",
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
            "`LEASE#<k>` at its first renewal); long ones put it, move it when their lease's "
            "end enters another minute, and delete it, "
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


def _reads_section(p: dict[str, Any]) -> list[str]:
    """The read ceilings by scenario and class (`bench/indexreads.py`)."""
    if "read_rule" not in p:
        return []
    out = [
        "### Read units by partition",
        "",
        "Every DynamoDB read of the same runs, charged by `bench/indexreads.py` to (table or "
        "index, partition key value); the accountants' own reads are not counted. Rule: "
        + p["read_rule"],
        "",
    ]
    rows = []
    for name, s in p["scenarios"].items():
        for cls, c in s.get("read_classes", {}).items():
            at = c.get("at_scale")
            rows.append(
                [
                    name,
                    cls,
                    c["partitions"],
                    f"{c['hottest']['target']} `{c['hottest']['partition']}`",
                    c["hottest"]["rcu"],
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
            "partitions read",
            "hottest by RCU",
            "its RCU",
            "share of all RCU",
            "shards/s at 3,000 RCU/s",
            "instances/s at 3,000 RCU/s",
            "shared, a family's buckets even: shards/s / instances/s",
        ],
        rows,
    )
    return out


def _own_keys_section(p: dict[str, Any]) -> list[str]:
    """Each scenario's own partitions: the rate at which the hottest reaches its limit."""
    if "own_rule" not in p:
        return []
    out = ["### One instance's own partitions", "", "Rule: " + p["own_rule"], ""]
    rows = []
    for name, s in p["scenarios"].items():
        own = s.get("own_keys", {})

        def cell(unit: str, own: dict[str, Any] = own) -> str:
            k = own.get(unit)
            if not k:
                return ""
            return f"{k['shards_per_s']} ({k['target']} `{k['partition']}`, {k['units']:,})"

        hot = own.get("hottest")
        rows.append([name, cell("WCU"), cell("RCU"), hot["unit"] if hot else ""])
    out += table(
        [
            "scenario",
            "shards/s at 1,000 WCU/s (partition, its WCU)",
            "shards/s at 3,000 RCU/s (partition, its RCU)",
            "binds",
        ],
        rows,
    )
    for name, figure in (
        ("rollout_fast", "rollout_hottest_key"),
        ("capped_backlog", "capped_backlog_hottest_key"),
    ):
        hot = p.get(figure)
        if not hot:
            continue
        target = p["targets"].get(f"{figure}_shards_per_s")
        met = p["met"].get(f"{figure}_shards_per_s")
        out += [
            "",
            f"`{figure}_shards_per_s` = **{p[f'{figure}_shards_per_s']}** ("
            + (f"target ≥ {target:,}: {verdict(met)}; " if target else "")
            + f"{hot['target']} `{hot['partition']}`, {hot['class']}, {hot['unit']} binds). "
            f"{name}'s own partitions:",
            "",
        ]
        out += table(
            [
                "table or index",
                "partition key",
                "class",
                "WCU",
                "shards/s at 1,000 WCU/s",
                "RCU",
                "shards/s at 3,000 RCU/s",
            ],
            [
                [
                    r["target"],
                    f"`{r['partition']}`",
                    r["class"],
                    r["wcu"],
                    r["shards_per_s_at_wcu_limit"] or "",
                    r["rcu"],
                    r["shards_per_s_at_rcu_limit"] or "",
                ]
                for r in p["scenarios"][name]["own_partitions"]
            ],
        )
        items = p["scenarios"][name].get("own_items")
        if items:
            out += [
                "",
                f"By item (a query's range as one): the bound once DynamoDB has split a hot "
                f"partition down to its hottest item; `{name}`'s first ten:",
                "",
            ]
            out += table(
                ["table or index", "partition key", "item", "WCU", "RCU", "shards/s", "binds"],
                [
                    [
                        r["target"],
                        f"`{r['partition']}`",
                        f"`{r['item'][:80]}`",
                        r["wcu"],
                        rounded(r["rcu"], 1),
                        r["shards_per_s"],
                        r["binds"],
                    ]
                    for r in items
                ],
            )
    return out
