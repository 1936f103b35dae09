"""The report's sections on planning memory and the peer comparison with APScheduler."""

from __future__ import annotations

from typing import Any

from bench.report.text import plural, table, verdict


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
