"""What every verb shares: the target's ports, the one way to print a result, and errors.

A verb builds only the ports its capability needs, once per command: `stores(ctx)` the table's
stores and the clock (the definitions verbs, the audit, the read-only views), `services(ctx)`
the whole `Wiring` (verbs that fire, end or log instances). Either is taken from `ctx.obj` when
already there (a test's in-memory `Wiring` serves both).

A verb prints its result once, through `emit(data, as_json, human)`: with `--json` the data
itself as JSON on stdout, else `human(data)`, a table or a line drawn from the same result (from
the records behind it where the JSON lacks a detail the table shows, such as a zone's
abbreviation), so the two forms never say different things. The `--json` shapes:

- a list verb (`tasks list`, `instances`, `alerts`, `times`) prints a JSON array of objects;
- a verb about one thing (`tasks show`, `run`, `submit`, `rerun`, `cancel`, `tasks pause`,
  `tasks resume`) prints that thing as one object (an instance as `instances` lists it, a
  task as `tasks list` does, `tasks show` with its definition and next fires);
- a verb that acts on several things or reports a run prints one summary object (`tasks apply`,
  `tasks delete`, `shards`, `backfill`, `local sweep`, `demo`), and `local tick`, which may
  deliver the tick more than once, an array with one object per delivery.

An error is never JSON: with or without `--json` it is one line on stderr (`Error: ...`, and
one `error: FILE: ...` line per problem of a task file before it) and the exit status says
which kind: 1 a failed operation, 2 bad input (file, flag, unknown id). Stdout then holds no
result, so a script reading `--json` output never parses an error as one.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import wraps
from typing import TYPE_CHECKING, ParamSpec, TypeVar

import click
from botocore.exceptions import BotoCoreError, ClientError
from rich.console import Console
from rich.text import Text

from iotsched.api.identity import local_principal
from iotsched.cli.target import Target, TargetError
from iotsched.client.errors import ApiError, BadRequestError, NotFoundError
from iotsched.client.errors import ClientError as ApiClientError
from iotsched.core.value_types import NO_TENANT, TENANT_PATTERN, is_tenant_name
from iotsched.ports.store_errors import UnreadableRecordError

if TYPE_CHECKING:
    from iotsched.bootstrap import Stores
    from iotsched.services.wiring import Wiring

P = ParamSpec("P")
R = TypeVar("R")
D = TypeVar("D")
# Everything printed is text, never rich markup: task ids, crons, patterns, reasons and errors
# hold brackets (`[a-z0-9]`, `[x] * * * *`) that markup would swallow. Styles go on `Text`.
out = Console(soft_wrap=True, markup=False, highlight=False)
# Errors are one line each, never wrapped at the terminal width (scripts grep them).
err = Console(stderr=True, soft_wrap=True, markup=False, highlight=False)

STATUS_STYLE = {
    "succeeded": "green",
    "failed": "red",
    "timed_out": "red",
    "aborted": "red",
    "running": "yellow",
    "planning": "yellow",
    "pending": "dim",
    "skipped": "dim",
    "cancelled": "magenta",
}

#: The `--json` flag every verb but `local up` takes.
json_option = click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the result as JSON: an array for a list, else one object.",
)


def _tenant_filter(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is None or value == NO_TENANT or is_tenant_name(value):
        return value
    raise click.BadParameter(
        f"{value!r} is neither a tenant name ({TENANT_PATTERN}) nor {NO_TENANT!r} (no tenant)"
    )


def tenant_option(records: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """`--tenant`: only the records (`records`, for the help) of the tenant named, or of none
    with `-`; any other value exits 2, as the API's `?tenant=` answers 400."""
    return click.option(
        "--tenant",
        callback=_tenant_filter,
        help=f"Only this tenant's {records} ('{NO_TENANT}': those without a tenant).",
    )


def styled(text: str, style: str) -> Text:
    """`text` in `style`, as text: `Text + str` stays text, whatever brackets the str holds."""
    return Text(text, style=style)


def emit(data: D, as_json: bool, human: Callable[[D], object]) -> None:
    """Print a verb's result: `data` as JSON with `--json`, else what `human(data)` prints."""
    if as_json:
        click.echo(json.dumps(data, indent=2, default=str))
    else:
        human(data)


class BadInputError(click.ClickException):
    """Bad input: exit 2."""

    exit_code = 2


#: What to do about a task record this version cannot read.
UNREADABLE_HINT = "apply the task again, or delete it with force (`tasks delete ID --force`)"


def no_such(kind: str, name: str, hint: str = "") -> BadInputError:
    """`no task 'x'`, `no instance 'y'`: an unknown id is bad input."""
    return BadInputError(f"no {kind} {name!r}{hint}")


def fail_cleanly(fn: Callable[P, R]) -> Callable[P, R]:
    """Turn expected failures into one clear line and an exit status, never a traceback."""

    @wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except TargetError as exc:
            raise click.ClickException(str(exc)) from None
        except (ClientError, BotoCoreError) as exc:
            raise click.ClickException(f"AWS request failed: {exc}") from None
        except ApiClientError as exc:
            raise api_failure(exc) from None
        except UnreadableRecordError as exc:
            raise click.ClickException(f"{exc}: {UNREADABLE_HINT}") from None

    return wrapper


def api_failure(exc: ApiClientError) -> click.ClickException:
    """An error of the management API (`--api-url`) as the direct path reports its kind: a 400
    or 404 is bad input (exit 2, each field at fault on its own line), anything else a failed
    operation (exit 1)."""
    if isinstance(exc, BadRequestError | NotFoundError):
        if len(exc.problems) > 1:
            for problem in exc.problems:
                err.print(styled("error", "red") + f": {problem.field}: {problem.message}")
        return BadInputError(exc.message)
    if isinstance(exc, ApiError):
        return click.ClickException(f"the API answered {exc.status} {exc.error}: {exc.message}")
    return click.ClickException(f"the API could not be reached: {exc}")


def services(ctx: click.Context) -> Wiring:
    """Wiring for the target selected by the global options (built once per command)."""
    built: Wiring | None = ctx.obj.get("services")
    if built is None:
        from iotsched.bootstrap import build  # the adapters of every capability

        target: Target = ctx.obj["target"]
        settings, clients = target.connect()
        built = ctx.obj["services"] = build(settings, clients=clients)
    return built


def stores(ctx: click.Context) -> Stores | Wiring:
    """The target's stores and clock alone (built once per command): no queue, topic, device
    directory or their clients. A `Wiring` already in `ctx.obj` is used instead."""
    built: Stores | Wiring | None = ctx.obj.get("services") or ctx.obj.get("stores")
    if built is None:
        from iotsched.bootstrap import build_stores  # the table's adapters only

        target: Target = ctx.obj["target"]
        table, clients = target.connect_table()
        built = ctx.obj["stores"] = build_stores(table, clients=clients)
    return built


def actor(ctx: click.Context) -> str:
    """Who the CLI's caller is, for the audit record of a change: the AWS caller identity's ARN
    (STS), or `local:<user>` on an emulator (which checks no identity). Asked once a command."""
    found: str | None = ctx.obj.get("actor")
    if found is None:
        target: Target = ctx.obj["target"]
        if target.emulated:
            found = local_principal()
        else:
            found = str(target.session().client("sts").get_caller_identity()["Arn"])
        ctx.obj["actor"] = found
    return found
