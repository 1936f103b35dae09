"""The report's section on write units by partition and the ceilings they set."""

from __future__ import annotations

from typing import Any

from bench.report.text import table, verdict


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
