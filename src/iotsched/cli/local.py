"""`iotsched demo` and `iotsched local up|tick|sweep`: the embedded emulator and the local
runtime (moto server, tick emulator, worker processes, console and control port)."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from iotsched.cli.output import BadInputError, emit, json_option, out, styled


@click.command()
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
    worker kill and duplicated, late and raced ticks; it counts the claims the store refused,
    the copies absorbed and effects_applied_twice (0 when nothing was done twice)."""
    from iotsched.demo.run import (
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
    emit(summary, as_json, lambda _: None)  # without --json the run narrated itself
    # The emulator's state (the whole simulated fleet) lives in this process; tearing its
    # objects down one by one at interpreter exit takes tens of seconds on 100,000 devices.
    # Everything is printed and the runtime is stopped: leave without that teardown.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0 if summary["all_final"] else 1)


@click.group()
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
    "--traces", is_flag=True, help="Record every function's spans (`iotsched local traces`)."
)
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
    traces: bool,
    params: tuple[str, ...],
) -> None:
    """Start the local runtime; Ctrl-C stops everything cleanly."""
    from iotsched.local.control import ControlServer
    from iotsched.local.loopback import PortInUseError, listen
    from iotsched.local.processes import RuntimeError_
    from iotsched.local.runtime import LocalRuntime
    from iotsched.local.template import TemplateNotFound, find_template

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
    except TemplateNotFound as exc:
        raise BadInputError(str(exc)) from None
    # Both ports are bound before anything starts (the emulator's first thing in the start):
    # a busy one is an error now, not once every function's environment is up.
    try:
        listener = listen(port)
    except PortInUseError as exc:
        raise BadInputError(
            f"--port {port}: {exc.strerror}; stop it, or choose another port"
        ) from None
    runtime = LocalRuntime(
        template_path,
        aws_port=aws_port,
        speed=speed,
        workers=workers,
        manual_clock=manual_clock,
        parameter_overrides=overrides,
        on_event=click.echo,  # a function process replaced (killed, timed out)
        traces=traces,
    )
    stop = threading.Event()
    starting = True

    def on_signal(signum: int, frame: Any) -> None:
        nonlocal starting
        stop.set()
        if starting:
            # The start waits for the emulator, the resources and every function's first
            # environment: it is cut short where it is (and stops what it started). Once only:
            # a second signal does not cut that stop short.
            starting = False
            raise KeyboardInterrupt

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    try:
        runtime.start()
    except PortInUseError as exc:  # the emulator's port: nothing was started
        listener.close()
        raise BadInputError(
            f"--aws-port {aws_port}: {exc.strerror}; stop it, or choose another port"
        ) from None
    except KeyboardInterrupt:
        listener.close()
        out.print("stopped before the runtime was up")
        return
    except RuntimeError_ as exc:  # what it started is stopped
        listener.close()
        raise click.ClickException(str(exc)) from None
    control: ControlServer | None = None
    try:
        control = ControlServer(runtime, listener)
        control.start()
        starting = False
        out.print(
            styled("iotsched local runtime up", "bold green"), f"(moto at {runtime.endpoint_url})"
        )
        out.print(f"  export AWS_ENDPOINT_URL={runtime.endpoint_url}")
        out.print(f"  worker logs: {runtime.log_dir}")
        if traces:
            out.print(f"  spans: {runtime.span_dir} (iotsched local traces INSTANCE)")
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
    except KeyboardInterrupt:
        pass  # a signal between the start and the banner: stopped below
    finally:
        out.print("stopping ...")
        if control is not None:
            control.stop()
        else:
            listener.close()
        runtime.stop()
        out.print("stopped")


def _tick_lines(results: list[dict[str, Any]]) -> None:
    for result in results:
        report = result["report"]
        out.print(
            f"tick {result['at']}: claimed {len(report['claimed'])}, duplicate claims "
            f"{report['duplicate_claims']}, resumed {len(report['resumed'])}, skipped "
            f"{len(report['skipped'])}, messages {report['messages_sent']}"
        )


@local.command("tick")
@click.option(
    "--at", "at", help="The tick's instant (ISO, with offset); default the runtime's now."
)
@click.option("--repeat", default=1, show_default=True, help="Deliver it N times (duplicates).")
@click.option("--port", default=8000, show_default=True, help="The runtime's control port.")
@json_option
def local_tick(at: str | None, repeat: int, port: int, as_json: bool) -> None:
    """Deliver a tick to a runtime started with `local up --manual-clock`."""
    emit(_control(port, "tick", {"at": at, "repeat": repeat}), as_json, _tick_lines)


def _sweep_line(report: dict[str, Any]) -> None:
    click.echo(
        f"sweep {report['now']}: timed out {len(report['timed_out_instances'])} instance(s) "
        f"and {len(report['timed_out_shards'])} shard(s), re-sent "
        f"{len(report['requeued_shards'])} shard(s), resumed {len(report['resumed'])}, "
        f"finalized {len(report['finalized'])}"
    )


@local.command("sweep")
@click.option(
    "--at",
    "at",
    help="Sweep as of this instant (ISO, with offset; a --manual-clock runtime's timeline).",
)
@click.option("--port", default=8000, show_default=True, help="The runtime's control port.")
@json_option
def local_sweep(at: str | None, port: int, as_json: bool) -> None:
    """Run the sweeper once (expired leases, instances past their deadline, stuck dispatches)."""
    emit(_control(port, "sweep", {"at": at}), as_json, _sweep_line)


def _trace_lines(found: dict[str, Any]) -> None:
    traces = found["traces"]
    if not traces:
        out.print(f"no span names {found['instance_id']} (yet)")
    for trace in traces:
        spans = {s["span_id"]: s for s in trace}
        children: dict[str | None, list[dict[str, Any]]] = {}
        for span in trace:  # a parent in another trace's file not read: shown at the top
            parent = span["parent_id"] if span["parent_id"] in spans else None
            children.setdefault(parent, []).append(span)
        click.echo(f"trace {trace[0]['trace_id']}")
        _show_spans(children, None, 1)


def _show_spans(
    children: dict[str | None, list[dict[str, Any]]], parent: str | None, depth: int
) -> None:
    for span in children.get(parent, []):
        notes = " ".join(f"{k}={v}" for k, v in span["annotations"].items())
        error = f"  error: {span['error']}" if span.get("error") else ""
        click.echo(f"{'  ' * depth}{span['name']}  {notes}{error}")
        _show_spans(children, span["span_id"], depth + 1)


@local.command("traces")
@click.argument("instance_id")
@click.option("--port", default=8000, show_default=True, help="The runtime's control port.")
@json_option
def local_traces(instance_id: str, port: int, as_json: bool) -> None:
    """Show the traces of an instance's firing (a runtime started with `local up --traces`):
    each as a tree of spans with their annotations; --json gives the spans."""
    query = urllib.parse.urlencode({"instance": instance_id})
    emit(_control(port, f"traces?{query}", None), as_json, _trace_lines)


def _control(port: int, action: str, body: dict[str, Any] | None) -> Any:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/_local/{action}",
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Content-Type": "application/json"},
        method="POST" if body is not None else "GET",
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
