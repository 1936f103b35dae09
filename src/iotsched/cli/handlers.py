"""`iotsched handlers`: the handlers installed here (entry-point group `iotsched.handlers`),
where each comes from, and its params' JSON Schema; a handler that cannot be loaded is listed
with its error."""

from __future__ import annotations

import json
from typing import Any

import click
from rich.table import Table

from iotsched.cli.output import emit, err, fail_cleanly, json_option, no_such, out, styled
from iotsched.registry import HandlerRegistry, describe


@click.group()
def handlers() -> None:
    """The handlers task files can name, from the installed packages."""


@handlers.command("list")
@json_option
@fail_cleanly
def handlers_list(as_json: bool) -> None:
    """Every handler: name, package and version, module:function, what it does."""
    registry = HandlerRegistry()
    emit([describe(registry, name) for name in registry], as_json, _table)


def _table(views: list[dict[str, Any]]) -> None:
    table = Table("handler", "package", "entry point", "params", "summary")
    for v in views:
        package = f"{v['package']} {v['version']}" if v["package"] else "-"
        summary = styled(f"error: {v['error']}", "red") if v["error"] else v["summary"] or ""
        table.add_row(v["name"], package, v["entry_point"] or "-", v["params"] or "-", summary)
    out.print(table)


@handlers.command("show")
@click.argument("name")
@json_option
@fail_cleanly
def handlers_show(name: str, as_json: bool) -> None:
    """Handler NAME: where it comes from and its params' JSON Schema."""
    registry = HandlerRegistry()
    try:
        view = describe(registry, name, schema=True)
    except KeyError:
        raise no_such("handler", name, f" (installed: {', '.join(registry)})") from None
    emit(view, as_json, _show)


def _show(view: dict[str, Any]) -> None:
    package = f"{view['package']} {view['version']}" if view["package"] else "(in-process)"
    out.print(f"{view['name']}: {package}, {view['entry_point'] or '-'}")
    if view["summary"]:
        out.print(f"  {view['summary']}")
    if view["error"]:
        err.print(styled("error", "red") + f": {view['error']}")
        return
    if view["params_schema"] is None:
        out.print("  params: any (no params model; the handler reads ctx.params)")
    else:
        out.print(f"  params ({view['params']}):")
        out.print(json.dumps(view["params_schema"], indent=2), markup=False)
