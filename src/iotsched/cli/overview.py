"""`iotsched overview`: the console's overview in a terminal (design.md, section 17)."""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table

from iotsched.cli.output import (
    BadInputError,
    emit,
    fail_cleanly,
    json_option,
    out,
    services,
    tenant_option,
)
from iotsched.core.value_types import passes_tenant_filter
from iotsched.services.operations.overview import overview as overview_figures


def _hours_line(data: dict[str, Any]) -> str:
    """Instances per hour, oldest first: `12:00 3 (2 succeeded, 1 failed)` for busy hours."""
    busy = [h for h in data["hourly"] if h["total"]]
    if not busy:
        return "no instance in the window"
    parts = [
        f"{h['hour'][:13].replace('T', ' ')}:00  {h['total']:>5}  "
        + ", ".join(f"{n} {s.replace('_', ' ')}" for s, n in h["counts"].items())
        for h in busy
    ]
    return "\n".join(parts)


def _print(data: dict[str, Any]) -> None:
    out.print(
        f"[bold]last {data['hours']} h[/bold] ({data['start']} to {data['end']}): "
        f"{data['instances']} instances"
    )
    if data["capped"]:
        out.print(
            f"[yellow]read the newest {data['read']} instances only: hours before "
            f"{data['complete_from']} may be incomplete[/yellow]"
        )
    out.print(_hours_line(data))
    if data["durations"]:
        table = Table("task", "tenant", "ended", "p50 s", "p95 s", "max s")
        for d in data["durations"]:
            table.add_row(
                d["task_id"],
                d["tenant"] or "-",
                str(d["count"]),
                f"{d['p50_s']:.1f}",
                f"{d['p95_s']:.1f}",
                f"{d['max_s']:.1f}",
            )
        out.print(table)
    failing = data["failing"]
    if failing:
        table = Table("failing now", "tenant", "latest", "in a row", "ended", "instance")
        for f in failing:
            table.add_row(
                f["task_id"],
                f["tenant"] or "-",
                f["status"],
                str(f["failures"]),
                f["finished_at"],
                f["instance_id"],
            )
        out.print(table)
    else:
        out.print("no task failing")
    missed = data["missed_runs"]
    out.print(
        f"missed runs: {missed['count']}{' (at least)' if missed['capped'] else ''}"
        + "".join(f"\n  {a['instance_id']}  raised {a['raised_at']}" for a in missed["alerts"])
    )
    if data["queues"] is not None:
        table = Table("queue", "waiting", "in flight", "delayed")
        for q in data["queues"]:
            table.add_row(q["queue"], str(q["visible"]), str(q["in_flight"]), str(q["delayed"]))
        out.print(table)


@click.command()
@click.option(
    "--hours", default=24, show_default=True, help="The window: whole hours up to now (1-168)."
)
@tenant_option("figures")
@json_option
@click.pass_context
@fail_cleanly
def overview(ctx: click.Context, hours: int, tenant: str | None, as_json: bool) -> None:
    """Instances per hour by status, duration p50/p95 per task, the tasks failing now, missed
    runs and queue depths over the last hours (the console's overview; `GET /overview`)."""
    if not 1 <= hours <= 168:
        raise BadInputError(f"--hours must be between 1 and 168, not {hours}")
    data = overview_figures(
        services(ctx),
        hours=hours,
        keep=lambda t: passes_tenant_filter(t, tenant),
        operator=True,
    )
    emit(data, as_json, _print)
