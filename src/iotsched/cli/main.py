"""`iotsched`: operate the scheduler from a terminal.

Exit status: 0 success, 1 a failed operation, 2 bad input (file, flag, unknown id).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable
from datetime import date, timedelta
from functools import wraps
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import click
import yaml
from botocore.exceptions import BotoCoreError, ClientError
from rich.console import Console
from rich.progress import Progress
from rich.table import Table
from rich.text import Text

from iotsched.bootstrap import build
from iotsched.cli.target import Target, TargetError
from iotsched.clock import SystemClock
from iotsched.core.model import AfterTrigger
from iotsched.core.records import InstanceStatus, TaskRecord
from iotsched.services import Services
from iotsched.services.admin import (
    InstanceConflictError,
    InstanceNotFoundError,
    TaskNotFoundError,
    cancel_instance,
    pause_task,
    resume_task,
)
from iotsched.services.queries import instance_view, shard_views, task_view
from iotsched.services.tasks import (
    TaskFileError,
    apply_tasks,
    check_dependencies,
    parse_task_file,
)
from iotsched.settings import endpoint_from_env, stack_from_env
from iotsched.tasklib import registry

P = ParamSpec("P")
R = TypeVar("R")
# Everything printed is text, never rich markup: task ids, crons, patterns, reasons and errors
# hold brackets (`[a-z0-9]`, `[x] * * * *`) that markup would swallow. Styles go on `Text`.
out = Console(soft_wrap=True, markup=False, highlight=False)
# Errors are one line each, never wrapped at the terminal width (scripts grep them).
err = Console(stderr=True, soft_wrap=True, markup=False, highlight=False)


def styled(text: str, style: str) -> Text:
    """`text` in `style`, as text: `Text + str` stays text, whatever brackets the str holds."""
    return Text(text, style=style)


class BadInputError(click.ClickException):
    """Bad input: exit 2."""

    exit_code = 2


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

    return wrapper


def services(ctx: click.Context) -> Services:
    """Services for the target selected by the global options."""
    target: Target = ctx.obj["target"]
    settings, clients = target.connect()
    return build(settings, clients=clients)


def emit_json(data: Any) -> None:
    """Machine-readable output on stdout."""
    click.echo(json.dumps(data, indent=2, default=str))


class OperatorOrder(click.Group):
    """Lists the verbs in the order an operator needs them, not alphabetically."""

    ORDER = (
        "demo",
        "local",
        "tasks",
        "times",
        "instances",
        "shards",
        "run",
        "submit",
        "backfill",
        "cancel",
    )

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Known verbs first, in ORDER; anything newer after them."""
        known = [name for name in self.ORDER if name in self.commands]
        return known + sorted(set(self.commands) - set(known))


@click.group(cls=OperatorOrder, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--endpoint-url",
    envvar="AWS_ENDPOINT_URL",
    help="Emulator endpoint (local up, LocalStack); env AWS_ENDPOINT_URL.",
)
@click.option(
    "--localstack",
    is_flag=True,
    help="LocalStack's endpoint, as localstack-client finds it (env LOCALSTACK_HOST, "
    "default localhost:4566).",
)
@click.option("--region", envvar="AWS_REGION", help="AWS region; env AWS_REGION.")
@click.option("--stack", envvar="IOTSCHED_STACK", help="Stack name (default iotsched).")
@click.pass_context
def cli(
    ctx: click.Context,
    endpoint_url: str | None,
    localstack: bool,
    region: str | None,
    stack: str | None,
) -> None:
    """iotsched: a serverless distributed task scheduler for IoT platforms.

    \b
    Start here:   demo, local up|tick|sweep
    Tasks:        tasks apply|list|show|pause|resume|delete, times
    What ran:     instances, shards
    Run by hand:  run, submit, backfill
    Intervene:    rerun, cancel, alerts
    """
    ctx.ensure_object(dict)
    if localstack:
        if endpoint_url:
            raise click.UsageError("give --localstack or --endpoint-url, not both")
        endpoint_url = localstack_endpoint()
    ctx.obj["target"] = Target(
        endpoint_url=endpoint_url or endpoint_from_env(),
        region=region or None,  # else the AWS configuration's (Target.session)
        stack=stack or stack_from_env(),
    )


def localstack_endpoint() -> str:
    """LocalStack's edge endpoint, from localstack-client (LOCALSTACK_HOST, USE_SSL)."""
    from localstack_client.config import get_service_endpoint  # only with --localstack

    endpoint: str | None = get_service_endpoint("dynamodb")
    if not endpoint:  # pragma: no cover - the library knows DynamoDB
        raise click.UsageError("localstack-client names no DynamoDB endpoint")
    return endpoint


# -- demo and local runtime ------------------------------------------------------------------


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON summary object.")
@click.option("--template", type=click.Path(path_type=Path), default=None, help="template.yaml")
@click.option(
    "--devices",
    type=int,
    default=None,
    help="Simulated devices, split over three tenants (default 100,000).",
)
@click.option("--days", type=int, default=None, help="Simulated days (default 3).")
def demo(as_json: bool, template: Path | None, devices: int | None, days: int | None) -> None:
    """Run the IoT task library on simulated devices on the embedded emulator, with a real
    worker kill; --json adds effects_applied_twice (0 when nothing was done twice)."""
    from iotsched.local.demo import (
        DEFAULT_DAYS,
        DEFAULT_DEVICES,
        DemoError,
        run_demo,
        stderr_console,
    )

    narration = Console(soft_wrap=True)  # the demo's own lines are markup, with no user data
    try:
        summary = run_demo(
            template=template,
            console=None if as_json else narration,
            progress_console=stderr_console() if as_json else narration,
            devices=DEFAULT_DEVICES if devices is None else devices,
            days=DEFAULT_DAYS if days is None else days,
        )
    except DemoError as exc:
        raise BadInputError(str(exc)) from None
    if as_json:
        emit_json(summary)
    # The emulator's state (the whole simulated fleet) lives in this process; tearing its
    # objects down one by one at interpreter exit takes tens of seconds on 100,000 devices.
    # Everything is printed and the runtime is stopped: leave without that teardown.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0 if summary["all_final"] else 1)


@cli.group()
def local() -> None:
    """The local runtime (moto server + tick emulator + worker processes)."""


@local.command("up")
@click.option("--port", default=8000, show_default=True, help="Control (and console) port.")
@click.option("--manual-clock", is_flag=True, help="No tick emulation: use `iotsched local tick`.")
@click.option("--aws-port", default=5000, show_default=True, help="Emulator port on 127.0.0.1.")
@click.option("--speed", default=1.0, show_default=True, help="Clock speed (60: a minute/second).")
@click.option("--workers", default=2, show_default=True, help="Shard worker processes.")
@click.option("--template", type=click.Path(path_type=Path), default=None, help="template.yaml")
@click.option(
    "--param",
    "params",
    multiple=True,
    metavar="NAME=VALUE",
    help="Template parameter override (repeatable).",
)
def local_up(
    port: int,
    manual_clock: bool,
    aws_port: int,
    speed: float,
    workers: int,
    template: Path | None,
    params: tuple[str, ...],
) -> None:
    """Start the local runtime; Ctrl-C stops everything cleanly."""
    from iotsched.local.control import ControlServer
    from iotsched.local.demo import DemoError, find_template
    from iotsched.local.runtime import LocalRuntime

    overrides = {}
    for item in params:
        name, sep, value = item.partition("=")
        if not sep:
            raise BadInputError(f"--param {item!r}: expected NAME=VALUE")
        overrides[name] = value
    if speed <= 0:
        raise BadInputError("--speed must be positive")
    try:
        template_path = find_template(template)
    except DemoError as exc:
        raise BadInputError(str(exc)) from None
    runtime = LocalRuntime(
        template_path,
        aws_port=aws_port,
        speed=speed,
        workers=workers,
        manual_clock=manual_clock,
        parameter_overrides=overrides,
        on_event=click.echo,  # a function process replaced (killed, timed out)
    )
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    runtime.start()
    control: ControlServer | None = None
    try:
        control = ControlServer(runtime, port)
        control.start()
        out.print(
            styled("iotsched local runtime up", "bold green"), f"(moto at {runtime.endpoint_url})"
        )
        out.print(f"  export AWS_ENDPOINT_URL={runtime.endpoint_url}")
        out.print(f"  worker logs: {runtime.log_dir}")
        clock = "manual: iotsched local tick|sweep [--at ISO]" if manual_clock else f"{speed}x"
        out.print(f"  console: http://127.0.0.1:{control.port}/ (management API under /api)")
        out.print(f"  clock: {clock}; control on http://127.0.0.1:{control.port}/_local/")
        for process in runtime.processes():
            click.echo(f"  process {process['name']}: pid {process['pid']}")
        out.print("  Ctrl-C to stop")
        # Never an unbounded wait: the OS may deliver the signal to one of the runtime's
        # threads, which does not interrupt the main thread's wait; Python runs the handler
        # only once the main thread is back in the interpreter.
        while not stop.wait(0.5):
            pass
    except OSError as exc:
        raise click.ClickException(f"cannot serve on port {port}: {exc.strerror}") from None
    finally:
        out.print("stopping ...")
        if control is not None:
            control.stop()
        runtime.stop()
        out.print("stopped")


@local.command("tick")
@click.option(
    "--at", "at", help="The tick's instant (ISO, with offset); default the runtime's now."
)
@click.option("--repeat", default=1, show_default=True, help="Deliver it N times (duplicates).")
@click.option("--port", default=8000, show_default=True, help="The runtime's control port.")
@click.option("--json", "as_json", is_flag=True)
def local_tick(at: str | None, repeat: int, port: int, as_json: bool) -> None:
    """Deliver a tick to a runtime started with `local up --manual-clock`."""
    results = _control(port, "tick", {"at": at, "repeat": repeat})
    if as_json:
        emit_json(results)
        return
    for result in results:
        report = result["report"]
        out.print(
            f"tick {result['at']}: claimed {len(report['claimed'])}, duplicate claims "
            f"{report['duplicate_claims']}, resumed {len(report['resumed'])}, skipped "
            f"{len(report['skipped'])}, messages {report['messages_sent']}"
        )


@local.command("sweep")
@click.option(
    "--at",
    "at",
    help="Sweep as of this instant (ISO, with offset; a --manual-clock runtime's timeline).",
)
@click.option("--port", default=8000, show_default=True, help="The runtime's control port.")
@click.option("--json", "as_json", is_flag=True)
def local_sweep(at: str | None, port: int, as_json: bool) -> None:
    """Run the sweeper once (expired leases, instances past their deadline, stuck dispatches)."""
    report = _control(port, "sweep", {"at": at})
    if as_json:
        emit_json(report)
        return
    click.echo(
        f"sweep {report['now']}: timed out {len(report['timed_out_instances'])} instance(s) "
        f"and {len(report['timed_out_shards'])} shard(s), re-sent "
        f"{len(report['requeued_shards'])} shard(s), resumed {len(report['resumed'])}, "
        f"finalized {len(report['finalized'])}"
    )


def _control(port: int, action: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/_local/{action}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as response:  # noqa: S310 - loopback
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        message = json.loads(exc.read() or b"{}").get("error", exc.reason)
        if exc.code == 400:
            raise BadInputError(message) from None
        raise click.ClickException(message) from None
    except urllib.error.URLError as exc:
        raise click.ClickException(
            f"no local runtime on port {port} ({exc.reason}); start `iotsched local up`"
        ) from None


# -- tasks -----------------------------------------------------------------------------------


@cli.group()
def tasks() -> None:
    """Task definitions (YAML files, validated before anything is written)."""


def _has_parents(definition: Any) -> bool:
    return isinstance(definition.trigger, AfterTrigger)


def yaml_problem(path: Path, text: str, exc: yaml.YAMLError) -> str:
    """PyYAML's error as one line: `tasks.yaml:3:5: not valid YAML: problem (context at 2:3)`."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}"
        problem = exc.problem or "unexpected content"
        if exc.context and exc.context_mark is not None:
            context = exc.context_mark
            problem += f" ({exc.context} at {context.line + 1}:{context.column + 1})"
        return f"{where}: not valid YAML: {problem}"
    if isinstance(exc, yaml.reader.ReaderError):  # a control character: no mark, an offset
        line = text.count("\n", 0, exc.position) + 1
        column = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
        character = exc.character if isinstance(exc.character, int) else ord(exc.character)
        return f"{path}:{line}:{column}: not valid YAML: {exc.reason} (#x{character:04x})"
    return f"{path}: not valid YAML: {' '.join(str(exc).split())}"


def read_task_file(path: Path) -> list[Any]:
    """Parse and validate a task file; every problem exits 2 and nothing is written."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise BadInputError(f"{path}: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise BadInputError(
            f"{path}: not UTF-8: byte 0x{raw[exc.start]:02x} at byte offset {exc.start} "
            f"(line {line}); save the file as UTF-8"
        ) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise BadInputError(yaml_problem(path, text, exc)) from None
    try:
        return parse_task_file(data, handlers=registry())
    except TaskFileError as exc:
        for problem in exc.problems:
            err.print(styled("error", "red") + f": {path}: {problem}")
        raise BadInputError(
            f"{path}: {len(exc.problems)} problem(s); nothing was written"
        ) from None


@tasks.command("apply")
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--dry-run", is_flag=True, help="Validate only.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
@fail_cleanly
def tasks_apply(ctx: click.Context, file: Path, dry_run: bool, as_json: bool) -> None:
    """Validate FILE, then create or update all of its tasks (or none)."""
    definitions = read_task_file(file)
    svc = None if dry_run and not any(_has_parents(d) for d in definitions) else services(ctx)
    if svc is not None:
        try:
            check_dependencies(definitions, [t.definition for t in svc.tasks.list_tasks()])
        except TaskFileError as exc:
            for problem in exc.problems:
                err.print(styled("error", "red") + f": {file}: {problem}")
            raise BadInputError(
                f"{file}: {len(exc.problems)} problem(s); nothing was written"
            ) from None
    if dry_run or svc is None:
        result = {"valid": [d.id for d in definitions]}
    else:
        applied = apply_tasks(definitions, svc.tasks, now=SystemClock().now())
        result = {
            "created": applied.created,
            "updated": applied.updated,
            "unchanged": applied.unchanged,
        }
    if as_json:
        emit_json(result)
        return
    for key, ids in result.items():
        if ids:
            out.print(f"{key}: {', '.join(ids)}")


@tasks.command("list")
@click.option("--after", metavar="TASK", help="Only the tasks whose id sorts after TASK.")
@click.option("--limit", type=click.IntRange(min=1), help="At most this many (default: all).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
@fail_cleanly
def tasks_list(ctx: click.Context, after: str | None, limit: int | None, as_json: bool) -> None:
    """Tasks with their trigger, next fire time and state, in id order."""
    found = services(ctx).tasks.list_tasks(after=after, limit=limit)
    views = [task_view(t) for t in found]
    if as_json:
        emit_json(views)
        return
    table = Table("task", "tenant", "handler", "trigger", "tz", "sharding", "next fire (UTC)", "on")
    for v in views:
        trigger = ", ".join(f"{k}={val}" for k, val in v["trigger"].items())
        table.add_row(
            v["id"],
            v["tenant"] or "-",
            v["handler"],
            trigger,
            v["timezone"],
            v["sharding"],
            v["next_fire"] or "-",
            "paused" if v["paused"] or not v["enabled"] else "yes",
        )
    out.print(table)


@tasks.command("show")
@click.argument("task_id")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
@fail_cleanly
def tasks_show(ctx: click.Context, task_id: str, as_json: bool) -> None:
    """TASK_ID's definition, state and next 5 fire times in its timezone and in UTC."""
    from itertools import islice

    from iotsched.core.triggers import load_zone

    task = services(ctx).tasks.get_task(task_id)
    if task is None:
        raise BadInputError(f"no task {task_id!r}")
    zone = load_zone(task.definition.timezone)
    start = task.next_fire - timedelta(minutes=1) if task.next_fire else None
    upcoming = list(islice(task.definition.trigger.slots_after(start), 5)) if start else []
    view = {
        **task_view(task),
        "definition": task.definition.model_dump(mode="json", exclude_defaults=True),
        "next_fires": [
            {"local": slot.astimezone(zone).isoformat(), "utc": slot.isoformat()}
            for slot in upcoming
        ],
    }
    if as_json:
        emit_json(view)
        return
    state = "paused" if task.paused else "active"
    out.print(
        styled(task_id, "bold")
        + f" (version {task.version}, {state}): {task.definition.description}"
    )
    out.print(yaml.safe_dump(view["definition"], sort_keys=False).rstrip())
    table = Table(f"next fires ({task.definition.timezone})", "UTC")
    for slot in upcoming:
        table.add_row(
            slot.astimezone(zone).strftime("%Y-%m-%d %H:%M %Z"), slot.strftime("%Y-%m-%d %H:%M")
        )
    out.print(
        table if upcoming else "no further fire time (paused, one-time done, or after-trigger)"
    )


@tasks.command("pause")
@click.argument("task_id")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
@fail_cleanly
def tasks_pause(ctx: click.Context, task_id: str, as_json: bool) -> None:
    """Pause TASK_ID: it fires nothing until resumed."""
    _pause_or_resume(ctx, task_id, pause_task, "paused", as_json)


@tasks.command("resume")
@click.argument("task_id")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
@fail_cleanly
def tasks_resume(ctx: click.Context, task_id: str, as_json: bool) -> None:
    """Resume TASK_ID; missed slots follow its misfire policy (misfire.on_resume)."""
    _pause_or_resume(ctx, task_id, resume_task, "resumed", as_json)


@tasks.command("delete")
@click.argument("task_id")
@click.option(
    "--force", is_flag=True, help="Cancel the task's open instances first, then delete it."
)
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
@fail_cleanly
def tasks_delete(ctx: click.Context, task_id: str, force: bool, as_json: bool) -> None:
    """Delete TASK_ID (its instances stay as history); refused while instances are open."""
    from iotsched.services.admin import TaskInUseError, delete_task

    try:
        deleted = delete_task(task_id, services(ctx), force=force)
    except TaskNotFoundError:
        raise BadInputError(f"no task {task_id!r}") from None
    except TaskInUseError as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        emit_json({"task_id": task_id, "version": deleted.version, "cancelled": deleted.cancelled})
        return
    cancelled = f"; cancelled {', '.join(deleted.cancelled)}" if deleted.cancelled else ""
    out.print(f"{task_id}: deleted (version {deleted.version}){cancelled}")


def _pause_or_resume(
    ctx: click.Context,
    task_id: str,
    action: Callable[[str, Services], TaskRecord],
    verb: str,
    as_json: bool,
) -> None:
    try:
        task = action(task_id, services(ctx))
    except TaskNotFoundError:
        raise BadInputError(f"no task {task_id!r}") from None
    view = task_view(task)
    if as_json:
        emit_json(view)
        return
    out.print(f"{task_id}: {verb}; next fire {view['next_fire'] or '-'}")


# -- what ran --------------------------------------------------------------------------------

STATUS_STYLE = {
    "succeeded": "green",
    "failed": "red",
    "timed_out": "red",
    "running": "yellow",
    "planning": "yellow",
    "pending": "dim",
    "skipped": "dim",
    "cancelled": "magenta",
}


@cli.command()
@click.argument("task", required=False)
@click.option(
    "--status", type=click.Choice([s.value for s in InstanceStatus]), help="Only this status."
)
@click.option("--limit", default=50, show_default=True)
@click.option(
    "--before", metavar="INSTANCE", help="The next page: the instances listed after INSTANCE."
)
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
@fail_cleanly
def instances(
    ctx: click.Context,
    task: str | None,
    status: str | None,
    limit: int,
    before: str | None,
    as_json: bool,
) -> None:
    """Instances, newest first (of one TASK if given)."""
    found = services(ctx).instances.list_instances(
        task_id=task,
        status=InstanceStatus(status) if status else None,
        limit=limit,
        before=before,
    )
    views = [instance_view(i) for i in found]
    if as_json:
        emit_json(views)
        return
    table = Table(
        "instance", "run", "kind", "business date", "status", "shards", "failed", "duration"
    )
    for v in views:
        style = STATUS_STYLE.get(v["status"], "")
        rerun = f" (shards {v['rerun_shards']})" if v["rerun_shards"] is not None else ""
        table.add_row(
            v["instance_id"],
            f"{v['run']}{rerun}",
            v["trigger_kind"],
            v["business_date"],
            styled(v["status"], style) + (f" ({v['reason']})" if v["reason"] else ""),
            str(v["shards"]),
            str(v["failed_shards"]),
            f"{v['duration_s']:.1f}s" if v["duration_s"] is not None else "-",
        )
    out.print(table)
    counts = Counter(v["status"] for v in views)
    out.print(", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no instances")


@cli.command()
@click.argument("instance_id")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
@fail_cleanly
def shards(ctx: click.Context, instance_id: str, as_json: bool) -> None:
    """The shards of INSTANCE_ID: bounds, status, attempts, errors, keys written."""
    svc = services(ctx)
    inst = svc.instances.get_instance(instance_id)
    if inst is None:
        raise BadInputError(f"no instance {instance_id!r} (ids look like task@2026-11-29T12:00Z)")
    views = shard_views(inst, svc.instances.list_shards(instance_id))
    if as_json:
        emit_json({"instance": instance_view(inst), "shards": views})
        return
    out.print(
        Text.assemble(
            f"{inst.instance_id}: ",
            styled(inst.status.value, "bold"),
            f" business date {inst.business_date}",
        )
    )
    table = Table("shard", "bounds", "status", "attempts (worker, ms, outcome)", "error", "keys")
    for v in views:
        bounds = v["bounds"]
        text = (
            f"[{bounds['first_id']}, {bounds['end_id']})"
            if "first_id" in bounds
            else json.dumps(bounds, separators=(",", ":"))
        )
        attempts = "; ".join(
            f"#{n} {a['worker']} {a.get('duration_ms') or '-'}ms {a.get('outcome') or 'died?'}"
            for n, a in enumerate(v["attempts"], 1)
        )
        style = STATUS_STYLE.get(v["status"], "")
        table.add_row(
            str(v["index"]),
            text,
            styled(v["status"], style),
            attempts or "-",
            (v["error"] or "")[:80],
            _keys_cell(v["keys_written"], v.get("keys_count", 0)),
        )
    out.print(table)


def _keys_cell(keys: list[str], count: int) -> str:
    """The keys a shard lists, and how many more it claimed (each attempt lists its first 20)."""
    more = count - len(keys)
    return (", ".join(keys) or "-") + (f" (+{more} more)" if more > 0 else "")


def _params_option(raw: str | None) -> dict[str, Any] | None:
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise BadInputError(f"--params is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise BadInputError("--params must be a JSON object")
    return value


def _date_option(raw: str | None, name: str) -> date | None:
    if raw is None:
        return None
    try:
        return date.fromisoformat(raw)
    except ValueError:
        raise BadInputError(f"{name} {raw!r}: expected a date like 2026-11-28") from None


@cli.command()
@click.argument("task_id")
@click.option("--business-date", help="The business date to run for (default: from now).")
@click.option("--params", "params_json", help="JSON object merged over the task's params.")
@click.option("--request-id", help="Client request id: running twice with it creates one instance.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
@fail_cleanly
def run(
    ctx: click.Context,
    task_id: str,
    business_date: str | None,
    params_json: str | None,
    request_id: str | None,
    as_json: bool,
) -> None:
    """Run TASK_ID now (trigger kind manual), through its blocking policy."""
    from iotsched.services.manual import ManualRunError, run_now

    try:
        instance, _ = run_now(
            task_id,
            services(ctx),
            business_date=_date_option(business_date, "--business-date"),
            params=_params_option(params_json),
            request_id=request_id,
        )
    except TaskNotFoundError:
        raise BadInputError(f"no task {task_id!r}") from None
    except ManualRunError as exc:
        raise BadInputError(str(exc)) from None
    if as_json:
        emit_json(instance_view(instance))
        return
    out.print(
        f"{instance.instance_id}: {instance.status.value} (business date {instance.business_date})"
    )


@cli.command()
@click.argument("task_id")
@click.option("--delay", help="Fire after this long: 30m, 2h, 1d.")
@click.option("--at", "at_text", help="Fire at this ISO instant (with offset).")
@click.option("--business-date", help="The business date to run for.")
@click.option("--params", "params_json", help="JSON object merged over the task's params.")
@click.option("--request-id", help="Client request id: submitting twice with it creates one.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
@fail_cleanly
def submit(
    ctx: click.Context,
    task_id: str,
    delay: str | None,
    at_text: str | None,
    business_date: str | None,
    params_json: str | None,
    request_id: str | None,
    as_json: bool,
) -> None:
    """Submit a one-time instance of TASK_ID that the tick fires when due (stored, not in memory)."""
    from iotsched.core.timeutil import parse_iso
    from iotsched.core.triggers import TriggerError, parse_rate
    from iotsched.services.manual import ManualRunError
    from iotsched.services.manual import submit as submit_instance

    if (delay is None) == (at_text is None):
        raise BadInputError("give exactly one of --delay and --at")
    svc = services(ctx)
    try:
        at = parse_iso(at_text) if at_text else svc.clock.now() + parse_rate(delay or "")
    except (ValueError, TriggerError) as exc:
        raise BadInputError(str(exc)) from None
    try:
        instance = submit_instance(
            task_id,
            svc,
            at=at,
            business_date=_date_option(business_date, "--business-date"),
            params=_params_option(params_json),
            request_id=request_id,
        )
    except TaskNotFoundError:
        raise BadInputError(f"no task {task_id!r}") from None
    except ManualRunError as exc:
        raise BadInputError(str(exc)) from None
    if as_json:
        emit_json(instance_view(instance))
        return
    out.print(f"{instance.instance_id}: {instance.status.value}, fires at {instance.fire_at}")


@cli.command()
@click.argument("task_id")
@click.option(
    "--from", "start", required=True, help="First business date, YYYY-MM-DD (task timezone)."
)
@click.option("--to", "end", required=True, help="Last business date, inclusive.")
@click.option("--max-concurrent", default=1, show_default=True, help="Instances open at once.")
@click.option(
    "--dry-run",
    is_flag=True,
    help="List each slot with its business date and data interval, and the estimated "
    "requests; write nothing.",
)
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
@fail_cleanly
def backfill(
    ctx: click.Context,
    task_id: str,
    start: str,
    end: str,
    max_concurrent: int,
    dry_run: bool,
    as_json: bool,
) -> None:
    """One instance per slot of TASK_ID whose business date lies in --from..--to.

    Every slot whose business date (the day its instance works on, per the task's
    business_date rule) is in the range, both ends included: for a daily 00:05 task with
    business_date previous_day, --from 2026-11-30 --to 2026-12-02 makes the reports of
    11-30, 12-01 and 12-02 (trigger kind backfill).
    """
    import time

    from iotsched.core.timeutil import iso
    from iotsched.services.manual import ManualRunError, backfill_slots, plan_backfill

    if max_concurrent < 1:
        raise BadInputError("--max-concurrent must be at least 1")
    svc = services(ctx)
    first = _date_option(start, "--from")
    last = _date_option(end, "--to")
    assert first is not None and last is not None
    try:
        plan = plan_backfill(task_id, svc, start=first, end=last)
    except TaskNotFoundError:
        raise BadInputError(f"no task {task_id!r}") from None
    except ManualRunError as exc:
        raise BadInputError(str(exc)) from None
    summary: dict[str, Any] = {
        "task_id": task_id,
        "slots": [
            {
                "slot": iso(d.slot),
                "business_date": d.business_date.isoformat(),
                "data_interval_start": iso(d.data_interval_start),
                "data_interval_end": iso(d.data_interval_end),
            }
            for d in plan.slots
        ],
        "shards_per_instance": plan.shards_per_instance,
        "estimated_requests": plan.estimated_requests,
    }
    if dry_run:
        if as_json:
            emit_json(summary)
            return
        table = Table("slot (UTC)", "business date", "data interval (UTC)")
        for d in plan.slots:
            table.add_row(
                iso(d.slot),
                d.business_date.isoformat(),
                f"{iso(d.data_interval_start)} .. {iso(d.data_interval_end)}",
            )
        out.print(table)
        out.print(
            f"{len(plan.slots)} slot(s) for business dates {first} to {last}, "
            f"{plan.shards_per_instance} shard(s) each; estimated requests "
            f"{plan.estimated_requests}; nothing written (--dry-run)",
            markup=False,
        )
        return
    results: dict[str, str] = {}
    opened: list[str] = []
    with Progress(console=err, disable=as_json, transient=True) as progress:
        bar = progress.add_task(f"backfill {task_id}", total=len(plan.slots))
        for slot, what in backfill_slots(plan, svc):
            instance_id = f"{task_id}@{slot:%Y-%m-%dT%H:%MZ}"
            results[instance_id] = what
            progress.advance(bar)
            if what in ("claimed", "queued"):
                opened.append(instance_id)
            # pace the next claim; after the last one there is nothing left to pace
            while len(opened) >= max_concurrent and len(results) < len(plan.slots):
                opened = [
                    i
                    for i in opened
                    if not (inst := svc.instances.get_instance(i)) or not inst.status.final
                ]
                if len(opened) >= max_concurrent:
                    time.sleep(1)
    summary["results"] = results
    if as_json:
        emit_json(summary)
        return
    counts = Counter(results.values())
    out.print(f"backfill {task_id}: " + ", ".join(f"{n} {w}" for w, n in sorted(counts.items())))


@cli.command()
@click.argument("instance_id")
@click.option("--shard", type=int, help="Re-run this shard only.")
@click.option(
    "--failed", "failed_only", is_flag=True, help="Re-run the shards that did not succeed."
)
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
@fail_cleanly
def rerun(
    ctx: click.Context, instance_id: str, shard: int | None, failed_only: bool, as_json: bool
) -> None:
    """Run an ended instance again with its stored bounds, params and business date."""
    from iotsched.services.admin import NothingToRerunError, rerun_instance

    if shard is not None and failed_only:
        raise BadInputError("give --shard or --failed, not both")
    try:
        started = rerun_instance(instance_id, services(ctx), shard=shard, failed_only=failed_only)
    except InstanceNotFoundError:
        raise BadInputError(f"no instance {instance_id!r}") from None
    except NothingToRerunError as exc:
        raise BadInputError(str(exc)) from None
    except InstanceConflictError as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        emit_json(instance_view(started))
        return
    which = "all shards" if started.only is None else f"shard(s) {started.only}"
    out.print(f"{started.instance_id}: run {started.run} of {started.rerun_of} started ({which})")


def _alert_state(pending: bool) -> str:
    return "pending" if pending else "published"


@cli.command()
@click.option("--limit", default=20, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
@fail_cleanly
def alerts(ctx: click.Context, limit: int, as_json: bool) -> None:
    """Recent alerts, newest first: published to the alert topic, or still pending publication
    (recorded, the topic's answer not yet confirmed: a retry or the sweeper publishes it). The
    state column (`state` with --json) says which."""
    entries = services(ctx).alert_log.entries(limit=limit)
    if as_json:
        emit_json(
            [
                {**entry.alert.model_dump(mode="json"), "state": _alert_state(entry.pending)}
                for entry in entries
            ]
        )
        return
    table = Table(
        "raised (UTC)", "state", "type", "severity", "task", "instance", "reason / failed shards"
    )
    for entry in entries:
        a = entry.alert
        detail = a.reason or ", ".join(
            f"#{s.get('shard')} {s.get('error') or s.get('status')}" for s in a.failed_shards
        )
        table.add_row(
            a.raised_at.strftime("%Y-%m-%d %H:%M:%S") if a.raised_at else "-",
            _alert_state(entry.pending),
            a.type,
            a.severity,
            a.task_id,
            a.instance_id,
            (detail or "")[:80],
        )
    out.print(table if entries else "no alerts")


@cli.command()
@click.argument("instance_id")
@click.option("--reason", default="cancelled by operator", show_default=True)
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
@fail_cleanly
def cancel(ctx: click.Context, instance_id: str, reason: str, as_json: bool) -> None:
    """Cancel INSTANCE_ID: shards not started never run, running ones stop at their next check."""
    try:
        ended = cancel_instance(instance_id, services(ctx), reason=reason)
    except InstanceNotFoundError:
        raise BadInputError(f"no instance {instance_id!r}") from None
    except InstanceConflictError as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        emit_json(instance_view(ended))
        return
    out.print(Text.assemble(f"{instance_id}: ", styled("cancelled", "magenta"), f" ({reason})"))


@cli.command()
@click.argument("cron", required=False)
@click.option("--timezone", "zone", default="UTC", show_default=True, help="IANA timezone.")
@click.option("--task", "task_id", help="Use this task's trigger (from --file, or the deployment).")
@click.option("--file", "task_file", type=click.Path(path_type=Path), help="Task file for --task.")
@click.option("--from", "start", required=True, help="ISO instant (with offset), exclusive.")
@click.option("--to", "end", required=True, help="ISO instant (with offset), inclusive.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
@fail_cleanly
def times(
    ctx: click.Context,
    cron: str | None,
    zone: str,
    task_id: str | None,
    task_file: Path | None,
    start: str,
    end: str,
    as_json: bool,
) -> None:
    """Fire instants of CRON (or of --task) in local time and UTC, with DST moves marked."""
    from iotsched.core.model import CronTrigger
    from iotsched.core.timeline import explain_cron
    from iotsched.core.timeutil import parse_iso
    from iotsched.core.triggers import TriggerError

    if task_id:
        if task_file is not None:
            found = [d for d in read_task_file(task_file) if d.id == task_id]
            definition = found[0] if found else None
        else:
            record = services(ctx).tasks.get_task(task_id)
            definition = record.definition if record else None
        if definition is None:
            raise BadInputError(f"no task {task_id!r}")
        if not isinstance(definition.trigger, CronTrigger):
            raise BadInputError(f"task {task_id!r} has no cron trigger")
        cron, zone = definition.trigger.cron, definition.trigger.timezone
    if not cron:
        raise BadInputError("give a CRON expression or --task")
    try:
        lines = explain_cron(cron, zone, parse_iso(start), parse_iso(end))
    except (TriggerError, ValueError) as exc:
        raise BadInputError(str(exc)) from None
    if as_json:
        emit_json(
            [
                {
                    "utc": line.utc.isoformat() if line.utc else None,
                    "local": line.local.isoformat(),
                    "note": line.note,
                }
                for line in lines
            ]
        )
        return
    table = Table(f"local ({zone})", "UTC", "note", title=f"{cron}")
    for line in lines:
        table.add_row(
            line.local.strftime("%Y-%m-%d %H:%M %Z"),
            line.utc.strftime("%Y-%m-%d %H:%M") if line.utc else styled("- (does not fire)", "dim"),
            line.note,
        )
    out.print(table)


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="iotsched")
