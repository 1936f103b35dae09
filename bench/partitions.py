"""Write units by DynamoDB partition (table or index, partition key value), and the ceilings.

Each scenario runs on `bench.harness.Harness`: the real services on the emulator at a small
scale, the way the functions run them: the bucket dispatchers of the buckets holding the due tasks for the tick
(`bench.common.tick_as_deployed`), then the shard queue drained as the Lambda event source
mapping does (receive up to 10, the worker's `ShardBatch`, delete what it acknowledges). Every
DynamoDB write is charged by `bench.indexwrites` (table and global secondary indexes, from the
items before and after each write); nothing here knows the product's key names.

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

Partition classes, told apart by whose items a partition took (an item belongs to the instance
or task whose id appears in it; the ids are the benchmark's own):

* shared: items of more than one task, or of no task (a constant key, or a bucket of a sharded
  prefix): every instance writes there, so they bound the platform;
* per-task: items of one task (its instances and its definition): they bound one task's rate;
* per-instance: items of one instance: they bound one instance's speed.

Every DynamoDB read is charged too (`bench.indexreads`), to the same partitions, in read units.

Ceiling at 1,000 WCU/s per partition: for a partition that took U units while a scenario ran S
shards of I instances, the rate at which it reaches 1,000 WCU/s is 1,000 × S / U shards/s
(1,000 × I / U instances/s). The platform ceilings take the hottest *shared* partition:
`ceiling_shards_per_s` over the many-shard scenarios (`instances_100_shards`,
`heartbeat_30s`), `ceiling_instances_per_s` over the tick of one-shard instances. Reads have
the same rule at 3,000 RCU/s: a partition that took R read units reaches it at 3,000 × S / R
shards/s (`read_ceilings_by_scenario`).

One instance's own partitions (per-instance and per-task, written or read) bound how fast that
instance's shards may start: each reaches 1,000 WCU/s at 1,000 × S / U shards/s and 3,000
RCU/s at 3,000 × S / R (`own_partitions`); `own_keys` names, for each unit, the one that
reaches its limit at the lowest rate. `rollout_hottest_key_shards_per_s` is the lower of the
two for `rollout_fast`, against a target of `ROLLOUT_TARGET_SHARDS_PER_S`;
`capped_backlog_hottest_key_shards_per_s` the same for the capped tenant's instance.
"""

# ruff: noqa: RUF001, RUF002  (multiplication signs)

from __future__ import annotations

import re
import time
from typing import Any

from bench.common import emulator, rounded
from bench.harness import HEARTBEAT_S, LONG_SHARD_S, Harness
from bench.indexreads import READS, ReadLedger
from bench.indexwrites import DELETE, NONE, PUT, UPDATE, Ledger
from bench.virtual_time import virtual_worker_time

PARTITION_WCU = 1000  # one partition's write limit, WCU per second
PARTITION_RCU = 3000  # one partition's read limit, RCU per second
#: Each unit: its limit per partition per second, and the key of its units in a row.
UNITS = {"WCU": (PARTITION_WCU, "wcu"), "RCU": (PARTITION_RCU, "rcu")}
SHARD_SCENARIOS = ("instances_100_shards", "heartbeat_30s")
INSTANCE_SCENARIOS = ("tick",)
OWN_CLASSES = ("per-task", "per-instance")
SHARED_READS_LISTED = 5
CAPPED_CAP = 10
CAPPED_TASK = "pb-capped-00000"
ROLLOUT_TASK = "pb-rollout-00000"
ROLLOUT_TARGET_SHARDS_PER_S = 10_000
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


def _classify(partition: str, instance_ids: list[str], task_ids: set[str]) -> str:
    """A partition named after one instance or one task is theirs; any other is shared."""
    if any(i in partition for i in instance_ids):
        return "per-instance"
    if any(t in partition for t in task_ids):
        return "per-task"
    return "shared"


_BUCKET = re.compile(r"^(.*)#(\d+)$")


def _families(rows: list[dict[str, Any]], unit: str) -> dict[tuple[str, str], dict[str, Any]]:
    """Shared partitions grouped by family: `<prefix>#<k>` values of one index with the same
    prefix are buckets of one family (as `iotsched.core.buckets.partition` names them), its
    bucket count the largest k seen plus one; any other value is a family of one. `unit`: the
    rows' key of the units summed (`wcu`, `rcu`)."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for r in rows:
        if r["class"] != "shared":
            continue
        m = _BUCKET.match(r["partition"])
        prefix, k = (m.group(1), int(m.group(2))) if m else (r["partition"], 0)
        fam = out.setdefault(
            (r["target"], prefix), {"target": r["target"], "family": prefix, unit: 0, "buckets": 1}
        )
        fam[unit] += r[unit]
        fam["buckets"] = max(fam["buckets"], k + 1) if m else fam["buckets"]
        if m:
            fam["family"] = f"{prefix}#<0..{fam['buckets'] - 1}>"
    for fam in out.values():
        fam[f"{unit}_per_bucket"] = fam[unit] / fam["buckets"]
    return out


def _classes(
    rows: list[dict[str, Any]], unit: str, limit: int, *, shards: int, instances: int, tasks: int
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """By class: its partitions and units, its hottest partition and the rates at which that
    one reaches `limit` units/s; the shared class also with its hottest family's buckets even
    (`at_scale`). And the shared families, hottest bucket first. `rows`: hottest first."""
    total = sum(r[unit] for r in rows)

    def ceiling(units: float, per: int) -> float | None:
        return rounded(limit * per / units, 1) if units else None

    classes: dict[str, Any] = {}
    for cls in ("shared", *OWN_CLASSES):
        members = [r for r in rows if r["class"] == cls]
        if not members:
            continue
        hot = members[0]
        per_shards = {
            "shared": shards,
            "per-task": shards / tasks,
            "per-instance": shards / instances,
        }[cls]
        per_instances = {"shared": instances, "per-task": instances / tasks, "per-instance": 1}[cls]
        classes[cls] = {
            "partitions": len(members),
            unit: sum(r[unit] for r in members),
            "hottest": {k: hot[k] for k in ("target", "partition", unit)},
            "hottest_share": rounded(hot[unit] / total, 3) if total else None,
            "ceiling_shards_per_s": ceiling(hot[unit], int(per_shards)),
            "ceiling_instances_per_s": ceiling(hot[unit], int(per_instances)),
        }
    per_bucket = f"{unit}_per_bucket"
    families = sorted(_families(rows, unit).values(), key=lambda f: -f[per_bucket])
    if families and "shared" in classes:
        hot = families[0]
        classes["shared"]["at_scale"] = {
            "family": f"{hot['target']} {hot['family']}",
            per_bucket: rounded(hot[per_bucket], 2),
            "ceiling_shards_per_s": ceiling(hot[per_bucket], shards),
            "ceiling_instances_per_s": ceiling(hot[per_bucket], instances),
        }
    return classes, [{**f, per_bucket: rounded(f[per_bucket], 2)} for f in families]


def _own_partitions(
    rows: list[dict[str, Any]], read_rows: list[dict[str, Any]], *, shards: int, per: dict[str, int]
) -> list[dict[str, Any]]:
    """Each own partition (per-task and per-instance) written or read, with the shard rates at
    which it reaches 1,000 WCU/s and 3,000 RCU/s, the lower first. `per`: by class, the
    instances (per-instance) or tasks (per-task) the scenario's `shards` are shared by."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for unit_rows, unit in ((rows, "wcu"), (read_rows, "rcu")):
        for r in unit_rows:
            if r["class"] in OWN_CLASSES:
                row = found.setdefault(
                    (r["target"], r["partition"]),
                    {k: r[k] for k in ("target", "partition", "class")} | {"wcu": 0, "rcu": 0.0},
                )
                row[unit] = r[unit]
    out = []
    for row in found.values():
        share = shards / per[row["class"]]
        rates = {
            name: rounded(limit * share / row[key], 1)
            for name, (limit, key) in UNITS.items()
            if row[key]
        }
        if not rates:
            continue
        binds = min(rates, key=lambda name: rates[name])
        out.append(
            {
                **row,
                "shards_per_s_at_wcu_limit": rates.get("WCU"),
                "shards_per_s_at_rcu_limit": rates.get("RCU"),
                "shards_per_s": rates[binds],
                "binds": binds,
            }
        )
    return sorted(out, key=lambda r: r["shards_per_s"])


def _own_items(
    ledger: Ledger,
    reads: ReadLedger | None,
    classes: dict[tuple[str, str], str],
    *,
    shards: int,
    per: dict[str, int],
) -> list[dict[str, Any]]:
    """Each item of the own partitions (a query's range as one), with the shard rates at which
    it reaches 1,000 WCU/s and 3,000 RCU/s, the lower first: the bound once DynamoDB has split
    a hot partition down to its hottest item (it isolates a hot item; the table has no local
    secondary index, which would keep an item collection on one partition)."""
    found: dict[tuple[str, str, str], dict[str, Any]] = {}
    sources: list[tuple[dict[tuple[str, str, str], Any], str]] = [(ledger.item_units, "wcu")]
    if reads is not None:
        sources.append((reads.item_units, "rcu"))
    for units, unit in sources:
        for (target, part, item), used in units.items():
            cls = classes.get((target, part))
            if cls not in OWN_CLASSES or not used:
                continue
            row = found.setdefault(
                (target, part, item),
                {"target": target, "partition": part, "item": item, "class": cls}
                | {"wcu": 0, "rcu": 0.0},
            )
            row[unit] += used
    out = []
    for row in found.values():
        share = shards / per[row["class"]]
        rates = {
            name: rounded(limit * share / row[key], 1)
            for name, (limit, key) in UNITS.items()
            if row[key]
        }
        binds = min(rates, key=lambda name: rates[name])
        out.append({**row, "shards_per_s": rates[binds], "binds": binds})
    return sorted(out, key=lambda r: r["shards_per_s"])


def _own_keys(own: list[dict[str, Any]]) -> dict[str, Any]:
    """Of the own partitions (`_own_partitions`), the one reaching each unit's limit at the
    lowest shard rate, and (`hottest`) the lower of the two, with the unit that binds."""
    out: dict[str, Any] = {}
    for unit, (_limit, key) in UNITS.items():
        rate = f"shards_per_s_at_{key}_limit"
        candidates = [r for r in own if r[rate] is not None]
        if candidates:
            r = min(candidates, key=lambda r: r[rate])
            out[unit] = {
                "shards_per_s": r[rate],
                "units": r[key],
                **{k: r[k] for k in ("class", "target", "partition")},
            }
    if out:
        binding = min(out, key=lambda unit: out[unit]["shards_per_s"])
        out["hottest"] = {"unit": binding, **out[binding]}
    return out


def analyse(
    ledger: Ledger, instance_ids: list[str], shards: int, reads: ReadLedger | None = None
) -> dict[str, Any]:
    """Rows by partition, classes, the hottest partitions and the ceilings of one scenario,
    for its writes (`ledger`) and its reads (`reads`)."""
    instances = len(instance_ids)
    tasks = len({i.split("@", 1)[0] for i in instance_ids})
    total_shards = instances * shards
    task_ids = {i.split("@", 1)[0] for i in instance_ids}
    rows: list[dict[str, Any]] = []
    for (target, part), row in ledger.partitions().items():
        rows.append(
            {
                "target": target,
                "partition": part,
                "class": _classify(part, instance_ids, task_ids),
                "puts": row[PUT],
                "updates": row[UPDATE],
                "deletes": row[DELETE],
                "unchanged": row[NONE],
                "wcu": row["wcu"],
            }
        )
    rows.sort(key=lambda r: -r["wcu"])
    read_rows: list[dict[str, Any]] = []
    for (target, part), read in (reads or ReadLedger()).partitions().items():
        read_rows.append(
            {
                "target": target,
                "partition": part,
                "class": _classify(part, instance_ids, task_ids),
                "reads": {op: int(read[op]) for op in READS if read[op]},
                "rcu": read["rcu"],
            }
        )
    read_rows.sort(key=lambda r: -r["rcu"])
    total = sum(r["wcu"] for r in rows)
    total_rcu = sum(r["rcu"] for r in read_rows)
    sizes = {"shards": total_shards, "instances": instances, "tasks": tasks}
    classes, families = _classes(rows, "wcu", PARTITION_WCU, **sizes)
    read_classes, _ = _classes(read_rows, "rcu", PARTITION_RCU, **sizes)
    per = {"per-task": tasks, "per-instance": instances}
    own = _own_partitions(rows, read_rows, shards=total_shards, per=per)
    classes_of = {(r["target"], r["partition"]): r["class"] for r in [*rows, *read_rows]}
    own_items = _own_items(ledger, reads, classes_of, shards=total_shards, per=per)
    by_target: dict[str, dict[str, int]] = {}
    for r in rows:
        t = by_target.setdefault(r["target"], {"puts": 0, "updates": 0, "deletes": 0, "wcu": 0})
        for k in ("puts", "updates", "deletes", "wcu"):
            t[k] += r[k]
    read_by_target: dict[str, float] = {}
    for r in read_rows:
        read_by_target[r["target"]] = read_by_target.get(r["target"], 0.0) + r["rcu"]
    return {
        "instances": instances,
        "tasks": tasks,
        "shards_per_instance": shards,
        "shards": total_shards,
        "wcu": total,
        "wcu_per_instance": rounded(total / instances, 2) if instances else None,
        "wcu_per_shard": rounded(total / total_shards, 3) if total_shards else None,
        "by_target": {
            t: {
                **v,
                "wcu_per_instance": rounded(v["wcu"] / instances, 3),
                "wcu_per_shard": rounded(v["wcu"] / total_shards, 3),
            }
            for t, v in sorted(by_target.items())
        },
        "hottest": {k: rows[0][k] for k in ("target", "partition", "class", "wcu")}
        if rows
        else None,
        "hottest_share": rounded(rows[0]["wcu"] / total, 3) if rows and total else None,
        "classes": classes,
        # every shared partition; of the others, the hottest few of each target
        "partitions": [r for r in rows if r["class"] == "shared"]
        + _hottest_others(rows, per_target=2),
        "partition_count": len(rows),
        "shared_families": families,
        "rcu": total_rcu,
        "rcu_per_shard": rounded(total_rcu / total_shards, 3) if total_shards else None,
        "read_by_target": {
            t: {"rcu": v, "rcu_per_shard": rounded(v / total_shards, 3)}
            for t, v in sorted(read_by_target.items())
        },
        "read_classes": read_classes,
        # the hottest few shared partitions (a tick queries every bucket of its index); of
        # the others, the hottest few of each target
        "read_partitions": [r for r in read_rows if r["class"] == "shared"][:SHARED_READS_LISTED]
        + _hottest_others(read_rows, per_target=2),
        "read_partition_count": len(read_rows),
        "own_keys": _own_keys(own),
        # the items that bind first, and the hottest of them
        "own_items": own_items[:10],
        "own_item_hottest": own_items[0] if own_items else None,
        # the ten that bind first (all of them for one instance of one task)
        "own_partitions": own[:10],
    }


def _hottest_others(rows: list[dict[str, Any]], *, per_target: int) -> list[dict[str, Any]]:
    seen: dict[tuple[str, str], int] = {}
    out = []
    for r in rows:
        if r["class"] == "shared":
            continue
        k = (r["target"], r["class"])
        if seen.get(k, 0) < per_target:
            seen[k] = seen.get(k, 0) + 1
            out.append(r)
    return out


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
    return summarise(results)


def summarise(results: dict[str, Any]) -> dict[str, Any]:
    """The platform ceilings from the shared partitions, and the binding partition."""

    def worst(
        names: tuple[str, ...], figure: str, *, at_scale: bool
    ) -> tuple[float | None, dict[str, Any] | None]:
        best: tuple[float | None, dict[str, Any] | None] = (None, None)
        for name in names:
            shared = results.get(name, {}).get("classes", {}).get("shared")
            if not shared:
                continue
            found = shared["at_scale"] if at_scale else shared
            where = (
                {"partition": found["family"], "wcu_per_bucket": found["wcu_per_bucket"]}
                if at_scale
                else shared["hottest"]
            )
            if found[figure] is not None and (best[0] is None or found[figure] < best[0]):
                best = (found[figure], {"scenario": name, **where})
        return best

    shards_ceiling, shards_binding = worst(SHARD_SCENARIOS, "ceiling_shards_per_s", at_scale=True)
    inst_ceiling, inst_binding = worst(INSTANCE_SCENARIOS, "ceiling_instances_per_s", at_scale=True)
    shards_hot, shards_hot_at = worst(SHARD_SCENARIOS, "ceiling_shards_per_s", at_scale=False)
    inst_hot, inst_hot_at = worst(INSTANCE_SCENARIOS, "ceiling_instances_per_s", at_scale=False)

    def by_scenario(classes: str) -> dict[str, Any]:
        return {
            name: {
                cls: {
                    "shards_per_s": c["ceiling_shards_per_s"],
                    "instances_per_s": c["ceiling_instances_per_s"],
                    "partition": f"{c['hottest']['target']} {c['hottest']['partition']}",
                }
                for cls, c in r[classes].items()
            }
            for name, r in results.items()
        }

    def own_hottest(name: str) -> dict[str, Any] | None:
        found: dict[str, Any] | None = results.get(name, {}).get("own_keys", {}).get("hottest")
        return found

    rollout, capped = own_hottest("rollout_fast"), own_hottest("capped_backlog")
    rollout_shards_per_s = rollout["shards_per_s"] if rollout else None
    rollout_item = results.get("rollout_fast", {}).get("own_item_hottest")
    capped_item = results.get("capped_backlog", {}).get("own_item_hottest")
    rollout_item_per_s = rollout_item["shards_per_s"] if rollout_item else None
    binding = min(
        (b for b in ((shards_ceiling, shards_binding), (inst_ceiling, inst_binding)) if b[1]),
        key=lambda b: (
            (b[0] or 0) / (20_000 if b[1] and b[1]["scenario"] in SHARD_SCENARIOS else 2_000)
        ),
        default=(None, None),
    )
    return {
        "scenarios": results,
        "ceiling_shards_per_s": shards_ceiling,
        "ceiling_shards_binding": shards_binding,
        "ceiling_instances_per_s": inst_ceiling,
        "ceiling_instances_binding": inst_binding,
        "ceiling_shards_per_s_hottest_measured": shards_hot,
        "ceiling_shards_hottest_measured": shards_hot_at,
        "ceiling_instances_per_s_hottest_measured": inst_hot,
        "ceiling_instances_hottest_measured": inst_hot_at,
        "ceilings_by_scenario": by_scenario("classes"),
        "read_ceilings_by_scenario": by_scenario("read_classes"),
        "rollout_hottest_key_shards_per_s": rollout_shards_per_s,
        "rollout_hottest_key": rollout,
        "capped_backlog_hottest_key_shards_per_s": capped["shards_per_s"] if capped else None,
        "capped_backlog_hottest_key": capped,
        "rollout_hottest_item_shards_per_s": rollout_item_per_s,
        "rollout_hottest_item": rollout_item,
        "capped_backlog_hottest_item_shards_per_s": (
            capped_item["shards_per_s"] if capped_item else None
        ),
        "capped_backlog_hottest_item": capped_item,
        "binding": binding[1],
        "rule": (
            f"a partition takes {PARTITION_WCU:,} WCU/s; one that took U units while a scenario "
            "ran S shards (I instances) reaches it at 1,000 × S / U shards/s (1,000 × I / U "
            "instances/s). Shared partitions: those whose key names no instance and no task "
            "(a constant, or a bucket `<prefix>#<k>`); the buckets of one family are taken "
            "with their load spread evenly over the family's buckets, as a hash spreads it at "
            "scale (the hottest bucket measured at this small scale is beside it, "
            "`*_hottest_measured`). ceiling_shards_per_s: the hottest shared partition of the "
            "many-shard scenarios ("
            + ", ".join(SHARD_SCENARIOS)
            + "); ceiling_instances_per_s: that of the tick of one-shard instances. Per-task "
            "and per-instance partitions bound one task's or one instance's rate and scale "
            "out with them (ceilings_by_scenario)."
        ),
        "read_rule": (
            f"a partition takes {PARTITION_RCU:,} RCU/s; one that took R read units while a "
            "scenario ran S shards (I instances) reaches it at 3,000 × S / R shards/s (3,000 × "
            "I / R instances/s), by class as for writes (read_ceilings_by_scenario). A read "
            "costs what DynamoDB charges: a GetItem one unit per started 4 KB of the whole item "
            "(a missing one too), half if eventually consistent; a Query its items read, summed, "
            "per started 4 KB, charged to the partition its key condition names; a BatchGetItem "
            "each key as a GetItem; a TransactGetItems item twice a consistent GetItem."
        ),
        "own_rule": (
            "an instance's own partitions (per-instance and per-task, written or read) bound "
            "how fast its shards may start: each reaches 1,000 WCU/s at 1,000 × S / U shards/s "
            "and 3,000 RCU/s at 3,000 × S / R shards/s; `*_hottest_key_shards_per_s` is the "
            "lowest of those rates in the scenario, its `*_hottest_key` the partition, its "
            "class and the unit that binds. The same per item (a query's range as one), "
            "`*_hottest_item_shards_per_s`: the bound once DynamoDB has split a hot partition "
            "by its sort keys down to its hottest item, which it isolates (this table has no "
            "local secondary index); the partition's figure is the bound before it splits."
        ),
        "targets": {
            "ceiling_shards_per_s": 20_000,
            "ceiling_instances_per_s": 2_000,
            "rollout_hottest_key_shards_per_s": ROLLOUT_TARGET_SHARDS_PER_S,
            "rollout_hottest_item_shards_per_s": ROLLOUT_TARGET_SHARDS_PER_S,
        },
        "met": {
            "ceiling_shards_per_s": shards_ceiling is not None and shards_ceiling >= 20_000,
            "ceiling_instances_per_s": inst_ceiling is not None and inst_ceiling >= 2_000,
            "rollout_hottest_key_shards_per_s": rollout_shards_per_s is not None
            and rollout_shards_per_s >= ROLLOUT_TARGET_SHARDS_PER_S,
            "rollout_hottest_item_shards_per_s": rollout_item_per_s is not None
            and rollout_item_per_s >= ROLLOUT_TARGET_SHARDS_PER_S,
        },
    }


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
