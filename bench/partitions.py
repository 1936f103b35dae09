"""The partition benchmark's scenarios: what each writes and reads, by DynamoDB partition.

Each scenario runs on `bench.harness.Harness`: the real services on the emulator at a small
scale, the way the functions run them: the bucket dispatchers of the buckets holding the due
tasks for the tick (`bench.common.tick_as_deployed`), then the shard queue drained as the
Lambda event source mapping does (receive up to 10, the worker's `ShardBatch`, delete what it
acknowledges). Every DynamoDB write is charged by `bench.indexwrites` (table and global
secondary indexes, from the items before and after each write); nothing here knows the
product's key names.

Scenarios (sizes by profile, see bench/run.py):

* `tick`: N one-shard no-op tasks due at one instant, run to their end;
* `instances_100_shards`: a few instances of 100 no-op shards, due at one instant;
* `heartbeat_30s`: shards that run 30 s on a manual clock, heartbeating every 5 s and asking
  `ctx.cancelled()` every second (as `tasklib.common.Liveness` does between units of work);
  the lease renewals, the batch's visibility hold and its commit timer fire on that clock
  when production's threads would (every third of `ShardLeaseSeconds`, 20 s by default), and
  the worker module's monotonic clock follows it;
* `report_10_groups`: instances of 10 static groups and a reduce;
* `failing`: instances whose every shard fails twice (2 attempts, no backoff);
* `capped_backlog`: the first `capped_shards` starts of a backlog, an instance of
  `CAPPED_PLAN_SHARDS` no-op shards whose tenant is capped at `CAPPED_CAP` shards in flight
  (its sends follow the cap: a window at a time, refilled as its shards end; the shards that
  wait are unsent and cost nothing, so the stretch costs per shard what the whole backlog
  does). The tenant is named after its task, so that the tenant's partition (its slots and
  line) is counted as the task's: it bounds one tenant's rate, not the platform's;
* `rollout_fast`: one instance of `ROLLOUT_PLAN_SHARDS` no-op shards under a rollout and an
  abort criterion never met, of which one minute of sends starts: `rollout_shards` of them,
  the rollout's rate per minute. Every start is counted against the rate and reads the
  instance's fence (spread as an instance of that size spreads it); what is measured is what
  each start costs its partitions and items. The rollout's one seat write a minute is spread
  over that minute's starts: at 10,000 shards/s over 600,000, here over far fewer, so its
  share per shard is the larger here.

`bench.partition_ceilings` reads the ledgers: the partitions' classes and the ceilings.
"""

from __future__ import annotations

import time
from typing import Any

from bench.common import emulator, rounded
from bench.harness import HEARTBEAT_S, LONG_SHARD_S, Harness
from bench.partition_ceilings import analyse, summarise
from bench.virtual_time import virtual_worker_time

#: A cap of several slot groups, so that the tenant's keys are measured as a large cap spreads
#: them (a cap of one group keeps the slots on one partition).
CAPPED_CAP = 100
#: The shortest slot hold (a shard's take to its release) at which a capped tenant starting as
#: fast as its cap allows keeps every key of its own under a partition's limits.
CAPPED_HOLD_TARGET_MS = 100
CAPPED_TASK = "pb-capped-00000"
ROLLOUT_TASK = "pb-rollout-00000"
#: The size of `rollout_fast`'s instance: large, as the instances that start fast are.
ROLLOUT_PLAN_SHARDS = 100_000
#: The size of `capped_backlog`'s instance, of which the first `capped_shards` start: waiting
#: shards cost nothing per shard, so a backlog's stretch costs what its whole would.
CAPPED_PLAN_SHARDS = 100_000
#: Scenarios that run a stretch of a larger instance: how many messages they hand to workers.
STRETCHES = ("capped_backlog",)
#: Never met: a no-op shard does not fail.
ROLLOUT_ABORT = {"failure_percent": 50, "min_executed": 10}


# -- scenarios --------------------------------------------------------------------------------


def _groups(n: int) -> list[dict[str, Any]]:
    return [
        {"tenant": "tenant-00001", "group": f"group-{g:02d}", "name": f"Building {g:02d}"}
        for g in range(n)
    ]


def scenarios(sizes: dict[str, int]) -> dict[str, tuple[str, list[dict[str, Any]], int]]:
    """name -> (what it is, task definitions, shards per instance)."""
    tick, inst, shards = sizes["tick_tasks"], sizes["instances"], sizes["shards"]
    long_inst, long_shards = sizes["long_instances"], sizes["long_shards"]
    reports, failing, failing_shards = sizes["reports"], sizes["failing"], sizes["failing_shards"]
    capped, rollout = sizes["capped_shards"], sizes["rollout_shards"]
    return {
        "tick": (
            f"a tick of {tick:,} one-shard no-op tasks",
            [{"id": f"pb-tick-{i:05d}", "handler": "noop"} for i in range(tick)],
            1,
        ),
        "instances_100_shards": (
            f"{inst} instances of {shards} no-op shards, due at one tick",
            [
                {
                    "id": f"pb-many-{i:05d}",
                    "handler": "noop",
                    "sharding": {"strategy": "id_range", "shards": shards, "id_max": 1_000_000},
                }
                for i in range(inst)
            ],
            shards,
        ),
        "heartbeat_30s": (
            f"{long_inst} instances of {long_shards} shards of {LONG_SHARD_S} s, heartbeating "
            f"every {HEARTBEAT_S:.0f} s (manual clock)",
            [
                {
                    "id": f"pb-long-{i:05d}",
                    "handler": "bench_long",
                    "params": {"seconds": LONG_SHARD_S},
                    "instance_timeout_s": 86_400,
                    "sharding": {"strategy": "id_range", "shards": long_shards, "id_max": 100_000},
                }
                for i in range(long_inst)
            ],
            long_shards,
        ),
        "report_10_groups": (
            f"{reports} instances of a 10-group report (static groups) with a reduce",
            [
                {
                    "id": f"pb-report-{i:05d}",
                    "handler": "noop",
                    "reduce": "noop",
                    "sharding": {"strategy": "static", "shards": _groups(10)},
                }
                for i in range(reports)
            ],
            10,
        ),
        "failing": (
            f"{failing} instances of {failing_shards} shards that fail every attempt "
            "(2 attempts, no backoff)",
            [
                {
                    "id": f"pb-fail-{i:05d}",
                    "handler": "noop",
                    "params": {"fail": True},
                    "retry": {"max_attempts": 2, "backoff_s": 0},
                    "sharding": {"strategy": "id_range", "shards": failing_shards},
                }
                for i in range(failing)
            ],
            failing_shards,
        ),
        "capped_backlog": (
            f"the first {capped:,} starts of an instance of {CAPPED_PLAN_SHARDS:,} no-op shards "
            f"(a backlog), its tenant capped at {CAPPED_CAP} in flight",
            [
                {
                    "id": CAPPED_TASK,
                    "tenant": CAPPED_TASK,
                    "handler": "noop",
                    "instance_timeout_s": 86_400,
                    "sharding": {
                        "strategy": "id_range",
                        "shards": CAPPED_PLAN_SHARDS,
                        "id_max": 1_000_000,
                    },
                }
            ],
            capped,
        ),
        "rollout_fast": (
            f"one minute of sends, {rollout:,} starts, of an instance of "
            f"{ROLLOUT_PLAN_SHARDS:,} no-op shards under `rollout: {{max_shards_per_minute: "
            f"{rollout}}}` and `abort: {{failure_percent: {ROLLOUT_ABORT['failure_percent']}, "
            f"min_executed: {ROLLOUT_ABORT['min_executed']}}}`",
            [
                {
                    "id": ROLLOUT_TASK,
                    "handler": "noop",
                    "instance_timeout_s": 86_400,
                    "sharding": {
                        "strategy": "id_range",
                        "shards": ROLLOUT_PLAN_SHARDS,
                        "id_max": 1_000_000,
                    },
                    "rollout": {"max_shards_per_minute": rollout},
                    "abort": ROLLOUT_ABORT,
                }
            ],
            rollout,
        ),
    }


#: The tenants' quotas of a scenario (by scenario, then tenant).
QUOTAS = {"capped_backlog": {CAPPED_TASK: {"max_concurrent_shards": CAPPED_CAP}}}


def run(**sizes: int) -> dict[str, Any]:
    """Every scenario at `sizes` (see `scenarios`); the rows and the platform ceilings."""
    from iotsched.core.instance_record import InstanceStatus

    results: dict[str, Any] = {}
    with emulator() as url:
        harness = Harness(url)
        with virtual_worker_time(harness.clock):
            for name, (what, definitions, shards) in scenarios(sizes).items():
                started = time.perf_counter()
                harness.accountant.reset()
                harness.read_accountant.reset()
                ids = harness.run(
                    definitions, QUOTAS.get(name), deliveries=shards if name in STRETCHES else None
                )
                ledger = harness.accountant.reset()
                found = analyse(ledger, ids, shards, harness.read_accountant.reset())
                statuses: dict[str, int] = {}
                for i in ids:
                    inst = harness.services.instances.get_instance(i)
                    status = inst.status.value if inst else "missing"
                    statuses[status] = statuses.get(status, 0) + 1
                found["what"] = what
                found["statuses"] = statuses
                found["seconds"] = rounded(time.perf_counter() - started, 1)
                # A rollout's instance sent one minute of its shards: it is still sending.
                expected = {
                    "failing": InstanceStatus.FAILED.value,
                    "rollout_fast": InstanceStatus.PLANNING.value,
                    # a capped backlog's first stretch ran: the rest waits, unsent
                    "capped_backlog": InstanceStatus.PLANNING.value,
                }.get(name, InstanceStatus.SUCCEEDED.value)
                if statuses != {expected: len(definitions)}:
                    raise RuntimeError(f"{name}: instances ended {statuses}, not all {expected}")
                results[name] = found
    return capped_hold(summarise(results))


def capped_hold(summary: dict[str, Any]) -> dict[str, Any]:
    """`summary` with the shortest slot hold the capped tenant's keys bear at its cap: a tenant
    capped at C holding each slot H seconds starts C / H shards a second, which the hottest key
    bears while C / H is at most its ceiling."""
    rate = summary.get("capped_backlog_hottest_key_shards_per_s")
    hold = rounded(1000 * CAPPED_CAP / rate, 1) if rate else None
    summary["capped_backlog_cap"] = CAPPED_CAP
    summary["capped_backlog_hold_ms"] = hold
    summary["targets"]["capped_backlog_hold_ms"] = CAPPED_HOLD_TARGET_MS
    summary["met"]["capped_backlog_hold_ms"] = hold is not None and hold <= CAPPED_HOLD_TARGET_MS
    return summary


if __name__ == "__main__":
    import json
    import sys

    quick = {
        "tick_tasks": 20,
        "instances": 2,
        "shards": 10,
        "long_instances": 2,
        "long_shards": 10,
        "reports": 2,
        "failing": 2,
        "failing_shards": 3,
        "capped_shards": 30,
        "rollout_shards": 60,
    }
    sys.stdout.write(json.dumps(run(**quick), indent=2, default=str) + "\n")
