"""results.json's headline keys and what each was measured at."""

# ruff: noqa: RUF001  (the report's typography: multiplication signs and en dashes)

from __future__ import annotations

from typing import Any

from bench.report.text import plural


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
        out["tenant_fifo_p95_start_s"] = basis + ": backfill at normal priority, one queue (FIFO)"
    return out
