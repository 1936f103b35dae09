"""The partition benchmark's rules: whose a partition is, and how fast it reaches its limits.

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
from typing import Any

from bench.common import rounded
from bench.indexreads import READS, ReadLedger
from bench.indexwrites import DELETE, NONE, PUT, UPDATE, Ledger

PARTITION_WCU = 1000  # one partition's write limit, WCU per second
PARTITION_RCU = 3000  # one partition's read limit, RCU per second
#: Each unit: its limit per partition per second, and the key of its units in a row.
UNITS = {"WCU": (PARTITION_WCU, "wcu"), "RCU": (PARTITION_RCU, "rcu")}
SHARD_SCENARIOS = ("instances_100_shards", "heartbeat_30s")
INSTANCE_SCENARIOS = ("tick",)
OWN_CLASSES = ("per-task", "per-instance")
SHARED_READS_LISTED = 5
ROLLOUT_TARGET_SHARDS_PER_S = 10_000


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


def _rates(row: dict[str, Any], shards: float) -> dict[str, float]:
    """For each unit the row used, the shard rate at which it reaches that unit's limit, had
    `shards` shards used the row's units."""
    return {
        name: rounded(limit * shards / row[key], 1)
        for name, (limit, key) in UNITS.items()
        if row[key]
    }


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
        rates = _rates(row, shards / per[row["class"]])
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
        rates = _rates(row, shards / per[row["class"]])
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
