"""The demo's summary: counted from the records and the effects (`summarise`), and shown on
the console as tables per task, totals and the guarantee (`print_summary`)."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from rich.console import Console
from rich.table import Table

from iotsched.core.instance_record import InstanceRecord
from iotsched.core.shard_record import ShardStatus
from iotsched.core.task_definition import TaskDefinition
from iotsched.demo.effects import (
    drain_alerts,
    effects_applied_twice,
    objects,
)
from iotsched.demo.fleet_phase import fleet_lines
from iotsched.demo.ticks import MEANINGS
from iotsched.local.runtime import LocalRuntime
from iotsched.services.wiring import Wiring
from iotsched.tasklib.resources import TaskResources

#: Per handler: the figure the summary shows and the shard result field it sums.
FIGURES = {
    "inspect_offline": ("devices marked offline", "marked"),
    "tenant_report": ("reports written", None),
    "archive_cold_data": ("objects archived", "objects"),
    "plan_expiry_reminders": ("notices sent", None),
    "billing_settlement": ("deductions", "deducted"),
}


def print_summary(console: Console, summary: dict[str, Any]) -> None:
    """The summary as tables: per task, the totals, the guarantee, then the fleet phase."""
    table = Table(title="demo summary, per task")
    table.add_column("task", no_wrap=True)
    table.add_column("instances")
    table.add_column("shards", justify="right")
    table.add_column("failovers", justify="right")
    table.add_column("effect")
    for task_id, row in summary["tasks"].items():
        label, _ = FIGURES.get(row["handler"], ("", None))
        value = next(
            (
                row[k]
                for k in (
                    "devices_marked_offline",
                    "reports_written",
                    "objects_archived",
                    "notices_sent",
                    "deductions",
                )
                if k in row
            ),
            "",
        )
        statuses = ", ".join(s for s in sorted(row["instances_by_status"]))
        table.add_row(
            task_id,
            f"{row['instances']} {statuses}",
            str(row["shards"]),
            str(row["failovers"]),
            f"{value} {label}".strip(),
        )
    console.print(table)
    totals = Table("figure", "value", title="totals")
    totals.add_row("instances by status", json.dumps(summary["instances_by_status"]))
    totals.add_row("shards by status", json.dumps(summary["shards_by_status"]))
    totals.add_row("failovers (dead attempt taken over)", str(summary["failovers"]))
    totals.add_row("reports written (objects)", str(summary["reports_written"]))
    totals.add_row("alerts published", str(summary["alerts_published"]))
    totals.add_row("every instance final", "yes" if summary["all_final"] else "[red]NO[/]")
    timings = summary["timings"]
    totals.add_row(
        "wall time",
        f"{summary['duration_s']} s (seeding {timings['seed_s']} s, "
        f"simulated days {timings['simulate_s']} s)",
    )
    console.print(totals)
    print_guarantee(console, summary)
    for line in fleet_lines(summary.get("fleet", {})):
        console.print(f"[bold]fleet[/] {line}")


def print_guarantee(console: Console, summary: dict[str, Any]) -> None:
    """The guarantee, happening: each figure with what it counts, in one line."""
    twice = summary["effects_applied_twice"]
    table = Table(
        "figure",
        "value",
        "what happened",
        title="the guarantee: each (task, fire slot) runs once, however the ticks arrive",
    )
    table.add_row(
        "duplicate claims rejected",
        str(summary["duplicate_claims_rejected"]),
        MEANINGS["duplicate_claims_rejected"],
    )
    table.add_row(
        "duplicate ticks absorbed",
        str(summary["duplicate_ticks_absorbed"]),
        MEANINGS["duplicate_ticks_absorbed"],
    )
    table.add_row(
        "effects applied twice",
        f"{twice} " + ("[green](none)[/]" if twice == 0 else "[red]DOUBLED[/]"),
        MEANINGS["effects_applied_twice"],
    )
    console.print(table)


def summarise(
    runtime: LocalRuntime,
    services: Wiring,
    resources: TaskResources,
    definitions: list[TaskDefinition],
    all_final: bool,
    killed: dict[str, Any] | None,
) -> dict[str, Any]:
    """The run's summary, counted from the records and the effects: per task, the totals,
    the kills and timeouts, and the effects applied twice."""
    per_task: dict[str, dict[str, Any]] = {}
    status_all: Counter[str] = Counter()
    shards_all: Counter[str] = Counter()
    failovers_all = 0
    marked_total = 0
    for definition in definitions:
        instances = services.instances.list_instances(task_id=definition.id, limit=1000)
        row: dict[str, Any] = {
            "handler": definition.handler,
            "instances": len(instances),
            "instances_by_status": dict(Counter(i.status.value for i in instances)),
            "shards": 0,
            "failovers": 0,
        }
        sums: Counter[str] = Counter()
        for instance in instances:
            shards, failovers = _shard_figures(services, instance, sums)
            row["shards"] += sum(shards.values())
            row["failovers"] += failovers
            shards_all.update(shards)
            failovers_all += failovers
        status_all.update(row["instances_by_status"])
        handler = definition.handler
        if handler == "inspect_offline":
            row["devices_marked_offline"] = sums["marked"]
            marked_total += sums["marked"]
        elif handler == "tenant_report":
            row["reports_written"] = sums["written"]
        elif handler == "archive_cold_data":
            row["objects_archived"] = sums["objects"]
            row["rows_archived"] = sums["rows_archived"]
        elif handler == "plan_expiry_reminders":
            row["notices_sent"] = sums["notices"] + sums["resent"]
        elif handler == "billing_settlement":
            row["deductions"] = sums["deducted"]
            row["amount_cents"] = sums["amount"]
        per_task[definition.id] = row

    twice, checks = effects_applied_twice(runtime, resources, marked_total)
    alerts = drain_alerts(runtime)
    reports = objects(resources, "reports/")
    return {
        "all_final": all_final,
        "tasks": per_task,
        "instances": sum(r["instances"] for r in per_task.values()),
        "instances_by_status": dict(status_all),
        "shards_by_status": dict(shards_all),
        "failovers": failovers_all,
        "ticks_delivered": len(runtime.ticks),
        "worker_kills": runtime.kills,
        "function_timeouts": runtime.timeouts,
        "killed": killed,
        "reports_written": len(reports),
        "report_keys": sorted(reports),
        "effects_applied_twice": twice,
        "effect_checks": checks,
        "alerts_published": len(alerts),
        "alerts": [
            {k: a.get(k) for k in ("type", "severity", "task_id", "instance_id")} for a in alerts
        ],
    }


def _shard_figures(
    services: Wiring, instance: InstanceRecord, sums: Counter[str]
) -> tuple[Counter[str], int]:
    """Shard statuses (reduce excluded), failovers, and the handlers' result fields summed."""
    statuses: Counter[str] = Counter()
    failovers = 0
    if instance.status.value == "skipped":
        return statuses, 0
    records = {s.index: s for s in services.instances.list_shards(instance.instance_id)}
    for index in range(instance.plan.count):
        record = records.get(index)
        statuses[record.status.value if record else ShardStatus.PENDING.value] += 1
    for record in records.values():
        # An attempt that never recorded an end, followed by another: its worker died.
        failovers += sum(1 for a in record.attempts[:-1] if a.outcome == "lost")
        for name, value in (record.result or {}).items():
            if isinstance(value, int) and not isinstance(value, bool):
                sums[name] += value
            elif name == "written" and isinstance(value, list):
                sums["written"] += len(value)
    return statuses, failovers
