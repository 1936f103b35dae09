"""The local runtime's HTTP port on 127.0.0.1: the web console, the management API, control.

- `/` the web console's static files (`iotsched.console`), and `/config.json` pointing it at
  `/api` on the same origin;
- `/api/...` the management API (`iotsched.api`), answered in-process on the runtime's table,
  queue and topic, with the runtime's emulated clock (so a run-now at `--speed 60` takes the
  emulated minute, as the tick does);
- `/_local/...` control: `iotsched local tick` and `iotsched local sweep` post here to deliver
  the tick or the sweep rule's event at chosen instants when the runtime runs with
  `--manual-clock` (replaying duplicate deliveries, an outage or a DST night
  deterministically); each request is an invocation of its own, concurrent with the others;
  `/_local/status` lists the function processes (name, pid, state).
"""

from __future__ import annotations

import io
import json
import mimetypes
import threading
from collections.abc import Callable, Iterable
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import unquote, urlsplit

from iotsched.core.timeutil import parse_iso
from iotsched.local.runtime import LocalRuntime, RuntimeError_

PREFIX = "/_local"
API_PREFIX = "/api"

Wsgi = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class RuntimeClock:
    """The runtime's emulated clock as a `Clock` port."""

    def __init__(self, runtime: LocalRuntime) -> None:
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
    from iotsched.api import create_app
    from iotsched.api.proxy import wsgi_app
    from iotsched.bootstrap import build

    services = build(runtime.settings(), clock=RuntimeClock(runtime))
    app = wsgi_app(create_app(lambda: services, strip_prefixes=[API_PREFIX]))
    # The resolver keeps the current event and route on itself (a Lambda container serves one
    # request at a time), so concurrent requests (the console fetches in parallel) would answer
    # each other's: one at a time, as the emulator behind it serves them anyway.
    lock = threading.Lock()

    def one_at_a_time(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        with lock:
            return list(app(environ, start_response))

    return one_at_a_time


class _Server(ThreadingHTTPServer):
    # Many `local tick` calls may connect at once: a backlog of 5 would drop their SYNs.
    request_queue_size = 128
    daemon_threads = True


class ControlServer:
    """Serves `/_local/status`, `/_local/tick` and `/_local/sweep` for one runtime."""

    def __init__(self, runtime: LocalRuntime, port: int) -> None:
        self.runtime = runtime
        handler = _handler_for(runtime, management_api(runtime), console_files())
        self._httpd = _Server(("127.0.0.1", port), handler)
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def start(self) -> None:
        """Serve in a background thread."""
        self._thread.start()

    def stop(self) -> None:
        """Stop serving."""
        self._httpd.shutdown()
        self._httpd.server_close()


def _handler_for(
    runtime: LocalRuntime, api: Wsgi, files: dict[str, bytes]
) -> type[BaseHTTPRequestHandler]:
    config = json.dumps({"api": API_PREFIX, "local": True}).encode()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the runtime prints its own output."""

        def _send(self, status: str, headers: list[tuple[str, str]], body: bytes) -> None:
            code, _, reason = status.partition(" ")
            self.send_response(int(code), reason or None)
            names = {name.lower() for name, _ in headers}
            for name, value in headers:
                if name.lower() not in ("content-length", "connection"):
                    self.send_header(name, value)
            if "cache-control" not in names:
                self.send_header("Cache-Control", "no-store")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _static(self) -> bool:
            """Serve a console file for GET/HEAD of `/`, `/<name>` or `/config.json`."""
            path = urlsplit(self.path).path
            name = "index.html" if path == "/" else path.removeprefix("/")
            if name == "config.json":
                body, kind = config, "application/json"
            elif name in files:
                body = files[name]
                kind = mimetypes.guess_type(name)[0] or "application/octet-stream"
                if kind.startswith("text/") or kind.endswith("javascript"):
                    kind += "; charset=utf-8"
            else:
                return False
            self._send(
                "200 OK",
                [("Content-Type", kind), ("X-Content-Type-Options", "nosniff")],
                body,
            )
            return True

        def _api(self) -> None:
            """Hand the request to the management API (WSGI), as a WSGI server would."""
            parts = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            data = self.rfile.read(length) if length > 0 else b""
            environ: dict[str, Any] = {
                "REQUEST_METHOD": self.command,
                "PATH_INFO": unquote(parts.path, encoding="latin-1"),
                "QUERY_STRING": parts.query,
                "CONTENT_LENGTH": str(len(data)),
                "CONTENT_TYPE": self.headers.get("Content-Type", ""),
                "wsgi.input": io.BytesIO(data),
            }
            for name, value in self.headers.items():
                key = "HTTP_" + name.upper().replace("-", "_")
                if key not in ("HTTP_CONTENT_TYPE", "HTTP_CONTENT_LENGTH"):
                    environ[key] = value
            answer: dict[str, Any] = {}

            def start_response(status: str, headers: list[tuple[str, str]]) -> None:
                answer.update(status=status, headers=headers)

            body = b"".join(api(environ, start_response))
            self._send(answer["status"], answer["headers"], body)

        def _routed_to_api(self) -> bool:
            path = urlsplit(self.path).path
            if path == API_PREFIX or path.startswith(API_PREFIX + "/"):
                self._api()
                return True
            return False

        def do_PUT(self) -> None:
            if not self._routed_to_api():
                self._reply(405, {"error": f"PUT is not allowed on {self.path}"})

        def do_DELETE(self) -> None:
            if not self._routed_to_api():
                self._reply(405, {"error": f"DELETE is not allowed on {self.path}"})

        def do_HEAD(self) -> None:
            if not self._static():
                self._reply(404, {"error": f"no such path {self.path}"})

        def _reply(self, status: int, body: Any) -> None:
            data = json.dumps(body, default=str).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self._routed_to_api() or self._static():
                return
            if self.path == f"{PREFIX}/status":
                self._reply(
                    200,
                    {
                        "endpoint_url": runtime.endpoint_url,
                        "now": runtime.now().isoformat(),
                        "manual_clock": runtime.manual_clock,
                        "ticks_delivered": len(runtime.ticks),
                        "processes": runtime.processes(),
                    },
                )
            else:
                self._reply(404, {"error": f"no such path {self.path}"})

        def do_POST(self) -> None:
            if self._routed_to_api():
                return
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
                at = parse_iso(body["at"]) if body.get("at") else runtime.now()
                repeat = int(body.get("repeat", 1))
                if not 1 <= repeat <= 100:
                    raise ValueError("repeat must be between 1 and 100")
            except (ValueError, KeyError, TypeError) as exc:
                self._reply(400, {"error": str(exc)})
                return
            try:
                if self.path == f"{PREFIX}/tick":
                    results = runtime.tick(at, repeat=repeat)
                    self._reply(
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
                elif self.path == f"{PREFIX}/sweep":
                    # An instant chosen on a manual clock is the sweep's now (a replay).
                    replay = bool(body.get("at")) and runtime.manual_clock
                    self._reply(200, runtime.sweep(at, replay=replay))
                else:
                    self._reply(404, {"error": f"no such path {self.path}"})
            except RuntimeError_ as exc:
                self._reply(502, {"error": str(exc)})

    return Handler
