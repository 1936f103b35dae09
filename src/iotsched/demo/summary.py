"""The demo's summary as the console shows it: tables per task, totals, the guarantee."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.table import Table

from iotsched.demo.fleet_phase import fleet_lines
from iotsched.demo.ticks import MEANINGS

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
