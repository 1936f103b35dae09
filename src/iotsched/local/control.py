"""The local runtime's control endpoint on 127.0.0.1 (the console's port).

`iotsched local tick` posts here to deliver ticks at chosen instants when the runtime runs with
`--manual-clock`: replaying duplicate deliveries, an outage or a DST night deterministically.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from iotsched.core.timeutil import parse_iso
from iotsched.local.runtime import LocalRuntime, RuntimeError_

PREFIX = "/_local"


class ControlServer:
    """Serves `/_local/status`, `/_local/tick` and `/_local/sweep` for one runtime."""

    def __init__(self, runtime: LocalRuntime, port: int) -> None:
        self.runtime = runtime
        handler = _handler_for(runtime)
        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def start(self) -> None:
        """Serve in a background thread."""
        self._thread.start()

    def stop(self) -> None:
        """Stop serving."""
        self._httpd.shutdown()
        self._httpd.server_close()


def _handler_for(runtime: LocalRuntime) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the runtime prints its own output."""

        def _reply(self, status: int, body: Any) -> None:
            data = json.dumps(body, default=str).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == f"{PREFIX}/status":
                self._reply(
                    200,
                    {
                        "endpoint_url": runtime.endpoint_url,
                        "now": runtime.now().isoformat(),
                        "manual_clock": runtime.manual_clock,
                        "ticks_delivered": len(runtime.ticks),
                    },
                )
            else:
                self._reply(404, {"error": f"no such path {self.path}"})

        def do_POST(self) -> None:
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
                        200, [{"at": r.at.isoformat(), "report": r.report} for r in results]
                    )
                elif self.path == f"{PREFIX}/sweep":
                    self._reply(200, runtime.sweep(at))
                else:
                    self._reply(404, {"error": f"no such path {self.path}"})
            except RuntimeError_ as exc:
                self._reply(502, {"error": str(exc)})

    return Handler
