"""`iotsched calendars`: the named calendars tasks exclude by name (a task file's
`calendars:` writes them)."""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table

from iotsched.cli.output import emit, fail_cleanly, json_option, no_such, out, stores


@click.command()
@click.argument("name", required=False)
@json_option
@click.pass_context
@fail_cleanly
def calendars(ctx: click.Context, name: str | None, as_json: bool) -> None:
    """The named calendars and their dates (NAME: that one alone), and the tasks naming each."""
    store = stores(ctx).tasks
    found = store.list_calendars()
    if name is not None:
        found = [c for c in found if c.name == name]
        if not found:
            raise no_such("calendar", name)
    naming: dict[str, list[str]] = {c.name: [] for c in found}
    for task in store.list_tasks():
        for calendar in task.definition.exclude.calendars:
            if calendar in naming:
                naming[calendar].append(task.task_id)
    views = [
        {
            "name": c.name,
            "description": c.description,
            "dates": [d.isoformat() for d in c.dates],
            "tasks": naming[c.name],
        }
        for c in found
    ]

    def table(rows: list[dict[str, Any]]) -> None:
        shown = Table("calendar", "dates", "tasks", "description")
        for row in rows:
            shown.add_row(
                row["name"],
                ", ".join(row["dates"]),
                ", ".join(row["tasks"]) or "-",
                row["description"],
            )
        out.print(shown if rows else "no calendars (a task file's `calendars:` adds them)")

    emit(views, as_json, table)
