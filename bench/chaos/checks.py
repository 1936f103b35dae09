"""The chaos run's invariants, read from the records through the product's own services.

1. every instance is final (succeeded / failed / timed_out / cancelled), each within
   `final_within_s` of its claim;
2. no shard is lost (every planned shard has a final record) and none has two successful
   attempts;
3. every effect key of every succeeded shard was applied exactly once (its `APPLIED#` counter
   is 1), no key was applied twice, and each applied key is a ledger entry listed in the
   execution record of the attempt that claimed it;
4. a dead worker's shard resumed (its next attempt started) within the goal: median and maximum;
5. with batches of several records, the records a dead invocation had not started were held by
   another invocation within the goal;

and that the chaos happened: enough attempts were killed, the dispatcher was killed between
claim and enqueue, every tick was delivered twice.
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from bench.chaos.config import CHAOS_TASK, FINAL, RESUME_SLACK_S, ChaosConfig
from bench.markdown import fmt_counter
from iotsched.adapters.aws import AwsClients
from iotsched.core.instance_record import InstanceRecord
from iotsched.core.shard_record import ShardRecord
from iotsched.local.runtime import LocalRuntime
from iotsched.services.wiring import Wiring
from iotsched.tasklib.chaos import APPLIED_PREFIX, effect_key


@dataclass
class Observed:
    """What the driver observed while the run went on (the records tell the rest)."""

    death_log: Path
    ticks: list[datetime] = field(default_factory=list)
    open_slots: list[datetime] = field(default_factory=list)
    tick_calls: int = 0
    deliveries: int = 0
    dispatcher_kills: int = 0
    tick_reports: list[dict[str, Any]] = field(default_factory=list)
    sweeps: int = 0
    sweep_errors: int = 0
    sweep_totals: Counter[str] = field(default_factory=Counter)
    requeues: list[tuple[float, str]] = field(default_factory=list)  # (when, instance#shard)
    last_sweep: float = float("-inf")
    fire_s: float = 0.0
    final_after_s: float | None = None


def chaos_instances(services: Wiring) -> list[InstanceRecord]:
    return services.instances.list_instances(task_id=CHAOS_TASK, limit=100_000)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def _scan_effects(runtime: LocalRuntime) -> Iterator[dict[str, Any]]:
    """The effect counters (`APPLIED#`) and ledger entries (`EFFECT#`) in the table."""
    ddb = AwsClients(region="us-east-1", endpoint_url=runtime.endpoint_url).dynamodb()
    pages = ddb.get_paginator("scan").paginate(
        TableName=runtime.settings().table,
        FilterExpression="begins_with(pk, :applied) OR begins_with(pk, :effect)",
        ExpressionAttributeValues={":applied": {"S": APPLIED_PREFIX}, ":effect": {"S": "EFFECT#"}},
        ConsistentRead=True,
    )
    for page in pages:
        yield from page.get("Items", [])


def check_invariants(
    runtime: LocalRuntime, services: Wiring, config: ChaosConfig, run: Observed, death_log: Path
) -> dict[str, Any]:
    # The effects first: a key applied later than this scan cannot then be missing from the
    # shard records read next (the key and the attempt's key list commit together).
    effect_items = list(_scan_effects(runtime))
    instances = {i.instance_id: i for i in chaos_instances(services)}
    by_slot = {i.slot: i for i in instances.values()}
    shards: dict[tuple[str, int], ShardRecord] = {}
    for instance_id in instances:
        for record in services.instances.list_shards(instance_id):
            shards[(instance_id, record.index)] = record
    invariants: list[dict[str, Any]] = []

    def check(name: str, ok: bool, detail: str) -> None:
        invariants.append({"name": name, "ok": bool(ok), "detail": detail})

    # 1. every instance final, each within the bound of its claim
    missing_slots = [s for s in run.ticks if s not in by_slot]
    not_final = [i.instance_id for i in instances.values() if i.status not in FINAL]
    instance_status = Counter(i.status.value for i in instances.values())
    durations = [
        (i.finished_at - i.created_at).total_seconds()
        for i in instances.values()
        if i.finished_at is not None
    ]
    slowest = max(durations, default=0.0)
    check(
        "every instance final within the bound",
        not missing_slots
        and not not_final
        and run.final_after_s is not None
        and slowest <= config.final_within_s,
        f"{len(instances) - len(not_final)}/{len(run.ticks)} final ({fmt_counter(instance_status)}); "
        f"claim -> final median {median(durations)} s, max {rounded(slowest)} s "
        f"(bound {config.final_within_s:g} s)"
        + (
            f"; the last {run.final_after_s} s after the last tick"
            if run.final_after_s is not None
            else f"; open {config.final_within_s:g} s after the last tick"
        )
        + (f"; never claimed: {len(missing_slots)}" if missing_slots else ""),
    )

    # 2. no shard lost, none succeeded twice
    planned = [(i.instance_id, n) for i in instances.values() for n in range(i.plan.count)]
    lost = [p for p in planned if p not in shards or not shards[p].status.final]
    shard_status = Counter(shards[p].status.value if p in shards else "missing" for p in planned)
    twice = [
        f"{iid}#{n}"
        for (iid, n), s in shards.items()
        if sum(1 for a in s.attempts if a.outcome == "succeeded") > 1
    ]
    check(
        "no shard lost",
        not lost,
        f"{len(planned) - len(lost)}/{len(planned)} planned shards have a final record; "
        f"{fmt_counter(shard_status)}",
    )
    check(
        "no shard with two successful attempts",
        not twice,
        f"{len(twice)} shards succeeded twice" + (f": {twice[:5]}" if twice else ""),
    )

    # 3. every effect key applied exactly once
    effects = _effects_check(effect_items, instances, shards, config)
    check("every effect key applied exactly once", effects["ok"], effects["detail"])

    # 4. resumption after a worker death
    deaths = read_jsonl(death_log)
    resumption = _resumption(deaths, shards, run.requeues)
    goal = config.resume_goal_s
    median_goal = config.resume_median_goal_s
    if config.resume_max_goal_s > 0:
        # a max alone (no median goal) is named as such, not as a median of 0 s
        with_median = median_goal > 0
        median_part = f"{median_goal:g} s (median), " if with_median else ""
        name = f"dead worker's shard resumed within {median_part}{goal:g} s (max)"
        goal_text = (
            (f"goals: median {median_goal:g} s, " if with_median else "goal: ")
            + f"max {goal:g} s; lease {config.lease_s} s, "
            f"a sweep every {config.sweep_every_s:g} s, visibility timeout "
            f"{config.visibility_timeout_s} s"
        )
    else:
        name = f"dead worker's shard resumed within timeout + {RESUME_SLACK_S} s"
        goal_text = (
            f"goal {goal:g} s = visibility timeout {config.visibility_timeout_s} s + "
            f"{RESUME_SLACK_S} s"
        )
    check(
        name,
        resumption["count"] > 0
        and resumption["max_s"] is not None
        and resumption["max_s"] <= goal
        and (median_goal <= 0 or resumption["median_s"] <= median_goal)
        and not resumption["unresumed_open"],
        f"median {resumption['median_s']} s, max {resumption['max_s']} s over "
        f"{resumption['count']} deaths ({goal_text})"
        + (
            f"; {resumption['unresumed_ended']} ended without a next attempt"
            if resumption["unresumed_ended"]
            else ""
        ),
    )

    # 5. the records a dead worker's batch had not started (WorkerBatchSize above 1)
    stranded = stranded_records(deaths, shards, read_jsonl(starts_log(death_log)))
    if config.batch_size > 1:
        check(
            f"records waiting in a dead worker's batch held again within {goal:g} s",
            stranded["waiting"] > 0
            and stranded["held_again"] == stranded["waiting"]
            and stranded["held_again_max_s"] is not None
            and stranded["held_again_max_s"] <= goal
            and not stranded["never_started_open"],
            f"{stranded['held_again']} of {stranded['waiting']} records waiting at a death were "
            f"held by another invocation: median {stranded['held_again_median_s']} s, max "
            f"{stranded['held_again_max_s']} s after the death (visibility hold "
            f"{config.shard_lease_s} s, visibility timeout {config.visibility_timeout_s} s); "
            f"their first attempt started: median {stranded['median_s']} s, max "
            f"{stranded['max_s']} s (behind the records ahead of them in that batch); started "
            f"before the death (a copy ran) {stranded['started_before']}, never started "
            f"{stranded['never_started_open']} open + {stranded['never_started_ended']} in "
            "ended instances",
        )

    # the chaos itself
    attempts = sum(len(s.attempts) for s in shards.values())
    kill_fraction = len(deaths) / attempts if attempts else 0.0
    check(
        f"worker SIGKILLed on >= {config.min_kill_fraction:.0%} of attempts",
        kill_fraction >= config.min_kill_fraction,
        f"{len(deaths)} of {attempts} attempts ({kill_fraction:.1%})",
    )
    resumed_dispatches = _resumed_dispatches(instances.values(), config)
    check(
        "dispatcher killed between claim and enqueue",
        run.dispatcher_kills >= config.min_dispatcher_kills,
        f"{run.dispatcher_kills} dispatcher deaths; {len(resumed_dispatches)} claims resumed "
        f"after their dispatch lease (median {median(resumed_dispatches)} s after the claim)",
    )
    check(
        "every tick delivered twice",
        run.deliveries == 2 * run.tick_calls,
        f"{run.tick_calls} ticks, {run.deliveries} deliveries",
    )

    failovers = sum(1 for s in shards.values() for a in s.attempts[:-1] if a.outcome == "lost")
    dead_lettered = sum(1 for s in shards.values() if s.error == "dead_lettered")
    return {
        "ok": all(i["ok"] for i in invariants),
        "command": config.command(),
        "config": asdict(config),
        "instances": len(instances),
        "shards": len(planned),
        "instances_by_status": dict(instance_status),
        "shards_by_status": dict(shard_status),
        "attempts": attempts,
        "worker_kills": len(deaths),
        "kill_fraction": round(kill_fraction, 4),
        "failovers": failovers,
        "dispatcher_kills": run.dispatcher_kills,
        "dispatches_resumed": len(resumed_dispatches),
        "ticks": run.tick_calls,
        "tick_deliveries": run.deliveries,
        "duplicate_claims_rejected": sum(
            int(r.get("duplicate_claims", 0)) for r in run.tick_reports
        ),
        "sweeps": run.sweeps,
        "sweep_errors": run.sweep_errors,
        "sweeper": dict(run.sweep_totals),
        "dead_lettered_shards": dead_lettered,
        "function_timeouts": runtime.timeouts,
        "worker_respawns": runtime.respawns,
        "fire_s": run.fire_s,
        "final_after_s": run.final_after_s,
        "instance_duration_s": {
            "median": median(durations),
            "max": rounded(max(durations)) if durations else None,
        },
        "effects": effects["figures"],
        "resumption": resumption,
        "stranded": stranded,
        "invariants": invariants,
    }


def _effects_check(
    effect_items: list[dict[str, Any]],
    instances: dict[str, InstanceRecord],
    shards: dict[tuple[str, int], ShardRecord],
    config: ChaosConfig,
) -> dict[str, Any]:
    applied: dict[str, int] = {}
    ledger: dict[str, dict[str, Any]] = {}
    for item in effect_items:
        pk = item["pk"]["S"]
        if pk.startswith(APPLIED_PREFIX):
            applied[pk.removeprefix(APPLIED_PREFIX)] = int(item.get("applied", {"N": "0"})["N"])
        else:
            ledger[pk.removeprefix("EFFECT#")] = item
    possible: set[str] = set()
    required: set[str] = set()  # the keys of succeeded shards
    for (iid, n), record in shards.items():
        keys = {
            effect_key(CHAOS_TASK, instances[iid].business_date, n, k)
            for k in range(config.effects)
        }
        possible |= keys
        if record.status.value == "succeeded":
            required |= keys
    missing = sorted(k for k in required if k not in applied)
    duplicated = sorted(k for k, count in applied.items() if count != 1)
    unexpected = sorted(k for k in applied if k not in possible)
    # Each applied key is a ledger entry, listed in the keys of exactly one attempt.
    listed: Counter[str] = Counter(
        key for s in shards.values() for a in s.attempts for key in a.keys
    )
    unledgered = sorted(k for k in applied if k not in ledger)
    not_listed_once = sorted(k for k in applied if listed[k] != 1)
    ok = not (missing or duplicated or unexpected or unledgered or not_listed_once)
    detail = (
        f"{len(required)} keys of succeeded shards: {len(required) - len(missing)} applied, "
        f"{len(missing)} missing; {len(applied)} counters, {len(duplicated)} != 1; "
        f"{len(unexpected)} unexpected; {len(ledger)} ledger entries, "
        f"{len(not_listed_once)} applied keys not in exactly one attempt's record"
    )
    if not ok:
        detail += f"; e.g. {(missing + duplicated + unexpected + unledgered + not_listed_once)[:3]}"
    examples = []
    for key in not_listed_once[:5]:
        entry = ledger.get(key, {})
        iid = entry.get("instance_id", {}).get("S", "")
        idx = int(entry.get("idx", {}).get("N", "-1"))
        owner = shards.get((iid, idx))
        examples.append(
            {
                "key": key,
                "listed": listed[key],
                "ledger_attempt": entry.get("attempt", {}).get("N"),
                "attempts": [
                    {"outcome": a.outcome, "keys": a.keys}
                    for a in (owner.attempts if owner else [])
                ],
            }
        )
    return {
        "ok": ok,
        "detail": detail,
        "figures": {
            "required": len(required),
            "applied_counters": len(applied),
            "applied_once": sum(1 for c in applied.values() if c == 1),
            "missing": len(missing),
            "applied_more_than_once": len(duplicated),
            "unexpected": len(unexpected),
            "ledger_entries": len(ledger),
            "not_in_one_attempt_record": len(not_listed_once),
            "not_in_one_attempt_record_examples": examples,
        },
    }


def _resumption(
    deaths: list[dict[str, Any]],
    shards: dict[tuple[str, int], ShardRecord],
    requeues: list[tuple[float, str]],
) -> dict[str, Any]:
    """Death instant (logged by the handler) to the start of the shard's next attempt.

    A dead worker stops renewing its lease; once the lease has ended, the next sweep sends a
    fresh message and the worker that receives it takes the shard over. `via_sweeper` counts
    the resumptions that followed a sweeper's send (all of them, unless the dead worker's
    own message came back first: its visibility timeout is much longer).
    """
    delays: list[float] = []
    via_sweeper: list[float] = []
    slowest: list[tuple[float, str]] = []
    unresumed_ended = 0
    unresumed_open = 0
    unrecorded = 0
    for death in deaths:
        record = shards.get((death["instance_id"], int(death["shard"])))
        number = int(death["attempt"])
        if record is None or len(record.attempts) < number:
            unrecorded += 1
            continue
        if record.attempts[number - 1].outcome not in (None, "lost"):
            unrecorded += 1  # the dead attempt ends lost (closed by the next), never by itself
        if len(record.attempts) > number:
            nxt = record.attempts[number]
            died, resumed = float(death["time"]), nxt.started_at.timestamp()
            delays.append(resumed - died)
            name = f"{death['instance_id']}#{death['shard']}"
            if any(n == name and died <= t <= resumed for t, n in requeues):
                via_sweeper.append(delays[-1])
            slowest.append((delays[-1], f"{name}/{number}"))
        elif record.status.final:
            unresumed_ended += 1  # ended by the sweeper or the DLQ handler, not resumed
        else:
            unresumed_open += 1
    return {
        "count": len(delays),
        "median_s": rounded(statistics.median(delays)) if delays else None,
        "p90_s": rounded(statistics.quantiles(delays, n=10)[-1]) if len(delays) >= 2 else None,
        "max_s": rounded(max(delays)) if delays else None,
        "via_sweeper": len(via_sweeper),
        "via_sweeper_median_s": median(via_sweeper),
        "unresumed_ended": unresumed_ended,
        "unresumed_open": unresumed_open,
        "deaths_not_on_record": unrecorded,
        "slowest": [
            {"s": rounded(d), "shard_attempt": name} for d, name in sorted(slowest)[-3:][::-1]
        ],
    }


def starts_log(death_log: Path) -> Path:
    return death_log.with_name("starts.jsonl")


def stranded_records(
    deaths: list[dict[str, Any]],
    shards: dict[tuple[str, int], ShardRecord],
    starts: list[dict[str, Any]],
) -> dict[str, Any]:
    """For each record a dead invocation had received and not started (`waiting`, logged by the
    handler as it died): the death to the first time another invocation held it (an attempt
    of that invocation started, logged with the records it had not started: `starts`), and
    to its own first attempt's start (later when it waits behind others in that batch)."""
    delays: list[float] = []
    held: list[float] = []
    before = never_open = never_ended = waiting = 0
    for death in deaths:
        died = float(death["time"])
        for instance_id, index in death.get("waiting", []):
            waiting += 1
            record_id = [instance_id, int(index)]
            again = [
                float(s["time"]) - died
                for s in starts
                if float(s["time"]) > died
                and s.get("pid") != death.get("pid")
                and (
                    [s["instance_id"], int(s["shard"])] == record_id
                    or record_id in [[i, int(n)] for i, n in s.get("waiting", [])]
                )
            ]
            if again:
                held.append(min(again))
            record = shards.get((instance_id, int(index)))
            if record is None or not record.attempts:
                if record is not None and record.status.final:
                    never_ended += 1
                else:
                    never_open += 1
                continue
            started = record.attempts[0].started_at.timestamp()
            if started < died:
                before += 1  # a copy of it (a resend, a copy given back) ran elsewhere first
                continue
            delays.append(started - died)
    return {
        "waiting": waiting,
        "held_again": len(held),
        "held_again_median_s": median(held),
        "held_again_max_s": rounded(max(held)) if held else None,
        "count": len(delays),
        "median_s": median(delays),
        "max_s": rounded(max(delays)) if delays else None,
        "started_before": before,
        "never_started_open": never_open,
        "never_started_ended": never_ended,
    }


def _resumed_dispatches(instances: Any, config: ChaosConfig) -> list[float]:
    """Seconds from claim to resumed send, for claims whose dispatch lease was taken again."""
    delays = []
    for inst in instances:
        if inst.dispatch_lease_until is None:
            continue
        resumed_at = inst.dispatch_lease_until - timedelta(seconds=config.dispatch_lease_s)
        delay = (resumed_at - inst.created_at).total_seconds()
        if delay > 0.5:  # the lease was taken again after the claim's own
            delays.append(delay)
    return delays


def median(values: list[float]) -> float | None:
    return rounded(statistics.median(values)) if values else None


def rounded(value: float) -> float:
    return round(value, 2)
