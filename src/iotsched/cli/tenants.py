"""`iotsched tenants`: the tenants the tasks name, with their quotas (a task file's
`tenants: [{name, quotas}]` sets them)."""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table

from iotsched.cli.output import emit, fail_cleanly, json_option, no_such, out, stores
from iotsched.services.tenancy.quotas import tenant_views

_QUOTAS = ("max_concurrent_shards", "max_instances_per_minute", "max_tasks")


@click.command()
@click.argument("name", required=False)
@json_option
@click.pass_context
@fail_cleanly
def tenants(ctx: click.Context, name: str | None, as_json: bool) -> None:
    """The tenants and their quotas (NAME: that one alone), with their tasks."""
    views = [v.as_json() for v in tenant_views(stores(ctx).tasks, tenant=name)]
    if name is not None and not views:
        raise no_such("tenant", name)

    def table(rows: list[dict[str, Any]]) -> None:
        shown = Table("tenant", *_QUOTAS, "tasks")
        for row in rows:
            quotas = row["quotas"]
            count = row["task_count"]
            tasks = f"{len(row['tasks'])}" + (f" (counted {count})" if count is not None else "")
            shown.add_row(row["name"], *(str(quotas.get(q, "-")) for q in _QUOTAS), tasks)
        out.print(shown if rows else "no tenants (tasks name them with `tenant:`)")

    emit(views, as_json, table)
