"""results.md's summary table (`summary_rows`): one row per headline figure, with how it was
measured, what the run measured, its target and its verdict."""

# ruff: noqa: RUF001  (the report's typography: multiplication signs and en dashes)

from __future__ import annotations

from typing import Any

from bench.markdown import plural, verdict


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
