"""The local runtime's HTTP port on 127.0.0.1: the web console, the management API, control.

- `/` the web console's static files (`iotsched.console`), and `/config.json` pointing it at
  `/api` on the same origin;
- `/api/...` the management API (`iotsched.api`), answered in-process on the runtime's table,
  queue and topic, with the runtime's emulated clock (so a run-now at `--speed 60` takes the
  emulated minute, as the tick does), one request at a time (`iotsched.api.proxy.wsgi_app`);
- `/_local/...` control: `iotsched local tick` and `iotsched local sweep` post here to deliver
  the tick or the sweep rule's event at chosen instants when the runtime runs with
  `--manual-clock` (replaying duplicate deliveries, an outage or a DST night
  deterministically); each request is an invocation of its own, concurrent with the others;
  `/_local/status` lists the function processes (name, pid, state); `/_local/traces?instance=`
  the traces holding the instance's spans, on a runtime started with traces.

werkzeug's threaded server serves it, a thread per request; every answer says
`Cache-Control: no-store` unless it says otherwise (the console always shows the runtime's now).
It serves this machine's programs and the console's own pages, never another web page
(`iotsched.local.loopback`): a request for another host name is a 421, one from a page of
another origin a 403, and one that changes state without `Content-Type: application/json` a 415.
"""

from __future__ import annotations

import json
import mimetypes
import socket
import threading
from collections.abc import Callable, Iterable
from datetime import datetime
from importlib import resources
from typing import TYPE_CHECKING, Any, Protocol

from werkzeug.datastructures import Headers
from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server
from werkzeug.wrappers import Request, Response

from iotsched.adapters.spans import SpanRecord, traces_of
from iotsched.core.timeutil import parse_iso
from iotsched.local.loopback import LoopbackGuard, listen
from iotsched.local.processes import RuntimeError_

if TYPE_CHECKING:
    from iotsched.local.delivery import TickResult
    from iotsched.local.runtime import LocalRuntime

PREFIX = "/_local"
API_PREFIX = "/api"

StartResponse = Callable[..., Any]
Wsgi = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


class Runtime(Protocol):
    """What the port asks of the runtime (`LocalRuntime`)."""

    endpoint_url: str
    manual_clock: bool
    traces: bool

    @property
    def ticks(self) -> list[TickResult]: ...

    def now(self) -> datetime: ...
    def tick(self, at: datetime, *, repeat: int = 1) -> list[TickResult]: ...
    def sweep(self, at: datetime | None = None, *, replay: bool = False) -> dict[str, Any]: ...
    def processes(self) -> list[dict[str, Any]]: ...
    def spans(self) -> list[SpanRecord]: ...


class RuntimeClock:
    """The runtime's emulated clock as a `Clock` port."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime

    def now(self) -> datetime:
        """The emulated instant."""
        return self._runtime.now()


def console_files() -> dict[str, bytes]:
    """The console's static files by name (package data: they ship in the wheel)."""
    folder = resources.files("iotsched") / "console"
    return {
        entry.name: entry.read_bytes()
        for entry in folder.iterdir()
        if entry.is_file() and not entry.name.startswith((".", "_"))
    }


def management_api(runtime: LocalRuntime) -> Wsgi:
    """The management API on the runtime's resources, as a WSGI app under `/api`."""
    from iotsched.api.app import create_app
    from iotsched.api.identity import local_identity
    from iotsched.api.proxy import wsgi_app
    from iotsched.bootstrap import build
    from iotsched.clock import SystemClock

    # The schedule runs on the runtime's clock (manual under `--manual-clock`); the history's
    # records are stamped by the wall clock, as the CLI stamps them.
    services = build(runtime.settings(), clock=RuntimeClock(runtime), wall_clock=SystemClock())
    # Locally the caller is the operator (a header may narrow it to tenants): no IAM here.
    return wsgi_app(
        create_app(lambda: services, identify=local_identity, strip_prefixes=[API_PREFIX])
    )


def _json(status: int, body: Any) -> Response:
    return Response(json.dumps(body, default=str), status=status, mimetype="application/json")


def local_app(runtime: Runtime, api: Wsgi, files: dict[str, bytes]) -> Wsgi:
    """The port's WSGI app: the API under `/api`, the console's files, and control."""
    config = json.dumps({"api": API_PREFIX, "local": True}).encode()

    def static(request: Request) -> Response | None:
        """A console file for GET or HEAD of `/`, `/<name>` or `/config.json`."""
        name = "index.html" if request.path == "/" else request.path.removeprefix("/")
        if name == "config.json":
            body, kind = config, "application/json"
        elif name in files:
            body = files[name]
            kind = mimetypes.guess_type(name)[0] or "application/octet-stream"
            if kind.startswith("text/") or kind.endswith("javascript"):
                kind += "; charset=utf-8"
        else:
            return None
        return Response(body, headers={"Content-Type": kind, "X-Content-Type-Options": "nosniff"})

    def status() -> Response:
        return _json(
            200,
            {
                "endpoint_url": runtime.endpoint_url,
                "now": runtime.now().isoformat(),
                "manual_clock": runtime.manual_clock,
                "ticks_delivered": len(runtime.ticks),
                "processes": runtime.processes(),
            },
        )

    def traces(request: Request) -> Response:
        instance_id = request.args.get("instance", "")
        if not instance_id:
            return _json(400, {"error": "name the instance: ?instance=<instance id>"})
        if not runtime.traces:
            return _json(
                400, {"error": "this runtime records no traces: start it with `local up --traces`"}
            )
        found = traces_of(runtime.spans(), instance_id)
        return _json(
            200, {"instance_id": instance_id, "traces": [[s.as_dict() for s in t] for t in found]}
        )

    def post(request: Request) -> Response:
        try:
            body = json.loads(request.get_data() or b"{}")
            at = parse_iso(body["at"]) if body.get("at") else runtime.now()
            repeat = int(body.get("repeat", 1))
            if not 1 <= repeat <= 100:
                raise ValueError("repeat must be between 1 and 100")
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            return _json(400, {"error": str(exc)})
        try:
            if request.path == f"{PREFIX}/tick":
                results = runtime.tick(at, repeat=repeat)
                return _json(
                    200,
                    [
                        {
                            "at": r.at.isoformat(),
                            "report": r.report,
                            "invocation": r.invocation.as_dict() if r.invocation else None,
                        }
                        for r in results
                    ],
                )
            if request.path == f"{PREFIX}/sweep":
                # An instant chosen on a manual clock is the sweep's now (a replay).
                replay = bool(body.get("at")) and runtime.manual_clock
                return _json(200, runtime.sweep(at, replay=replay))
        except RuntimeError_ as exc:
            return _json(502, {"error": str(exc)})
        return _json(404, {"error": f"no such path {_shown(request)}"})

    @Request.application
    def local(request: Request) -> Response:
        if request.method in ("GET", "HEAD") and (found := static(request)) is not None:
            return found
        if request.method == "GET" and request.path == f"{PREFIX}/status":
            return status()
        if request.method == "GET" and request.path == f"{PREFIX}/traces":
            return traces(request)
        if request.method == "POST":
            return post(request)
        if request.method in ("GET", "HEAD"):
            return _json(404, {"error": f"no such path {_shown(request)}"})
        return _json(405, {"error": f"{request.method} is not allowed on {_shown(request)}"})

    def application(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        routed = path == API_PREFIX or path.startswith(API_PREFIX + "/")
        handler: Wsgi = api if routed else local

        def no_store(status: str, headers: list[tuple[str, str]], *rest: Any) -> Any:
            if not Headers(headers).get("Cache-Control"):
                headers = [*headers, ("Cache-Control", "no-store")]
            return start_response(status, headers, *rest)

        return handler(environ, no_store)

    return application


def _shown(request: Request) -> str:
    """The request's path and query as the client sent them (`/x?y=1`)."""
    query = request.query_string.decode("latin-1")
    return request.path + (f"?{query}" if query else "")


class _Quiet(WSGIRequestHandler):
    def log(self, type: str, message: str, *args: Any) -> None:
        """Quiet: the runtime prints its own output."""


class ControlServer:
    """Serves the console, the API and control for one runtime on 127.0.0.1, to this machine's
    programs and the console's own pages only (`loopback.LoopbackGuard`).

    Args:
        runtime: the started runtime.
        listener: the port (0: a free one), bound here, or a socket `loopback.listen` bound
            (`local up` binds it before the runtime starts). Either way a port another program
            holds is a `PortInUseError` (werkzeug's own bind would print and exit the process).
        api: the management API (default: on the runtime's resources).
    """

    def __init__(
        self, runtime: LocalRuntime, listener: socket.socket | int, *, api: Wsgi | None = None
    ) -> None:
        self.runtime = runtime
        self._socket = listen(listener) if isinstance(listener, int) else listener
        try:
            app = local_app(runtime, api or management_api(runtime), console_files())
        except BaseException:
            self._socket.close()
            raise
        port = int(self._socket.getsockname()[1])
        self._server: BaseWSGIServer = make_server(
            "127.0.0.1",
            port,
            LoopbackGuard(app, port, json_writes=True, emulator=False),
            threaded=True,
            request_handler=_Quiet,
            fd=self._socket.fileno(),
        )
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def start(self) -> None:
        """Serve in a background thread."""
        self._thread.start()

    def stop(self) -> None:
        """Stop serving."""
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()
        self._socket.close()
