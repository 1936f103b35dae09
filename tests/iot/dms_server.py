"""A small Device Management System REST server for tests: serves a `MemoryDeviceDirectory`
with cursor pagination (the contract in `iotsched.adapters.dms_http`), and can be told to fail
a given request (an HTTP status, or a delay longer than the client's timeout) a number of times.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from iotsched.adapters.memory.devices import MemoryDeviceDirectory


@dataclass
class Fault:
    """Fail requests whose path (and query) contains `match`: `times` times, with HTTP
    `status`, or by answering only after `delay_s`."""

    match: str
    times: int = 1
    status: int | None = 503
    delay_s: float = 0.0
    retry_after: str | None = None  # the Retry-After header sent with `status`


@dataclass
class DmsServer:
    """The running server: `url`, the requests it saw, and faults to inject."""

    url: str
    directory: MemoryDeviceDirectory
    requests: list[str] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    connections: int = 0  # TCP connections accepted (HTTP/1.1 keep-alive reuses them)
    stuck_cursor: str | None = None  # a broken server: every page names this cursor as next

    def fail(self, fault: Fault) -> None:
        """Inject `fault`."""
        self.faults.append(fault)


def _handler(state: DmsServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as a real server

        def setup(self) -> None:
            super().setup()
            state.connections += 1

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _fault(self) -> bool:
            state.requests.append(f"{self.command} {self.path}")
            self.body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            for fault in state.faults:
                if fault.match in self.path and fault.times > 0:
                    fault.times -= 1
                    if fault.delay_s:
                        time.sleep(fault.delay_s)
                    if fault.status:
                        extra = {"Retry-After": fault.retry_after} if fault.retry_after else {}
                        self._send(fault.status, {"error": "injected"}, extra)
                        return True
            return False

        def _send(
            self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None
        ) -> None:
            data = json.dumps(body).encode()
            try:
                self.send_response(status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a timeout test)

        def do_GET(self) -> None:
            if self._fault():
                return
            url = urllib.parse.urlsplit(self.path)
            query = dict(urllib.parse.parse_qsl(url.query))
            path = url.path.removeprefix("/v1")
            parts = [urllib.parse.unquote(p) for p in path.strip("/").split("/")]
            directory = state.directory
            if parts == ["tenants"]:
                items = [
                    {"tenant_id": t.tenant_id, "timezone": t.timezone, "name": t.name}
                    for t in directory.tenants()
                ]
            elif len(parts) == 3 and parts[0] == "tenants" and parts[2] == "groups":
                items = [
                    {
                        "group": g.group,
                        "first_id": g.first_id,
                        "end_id": g.end_id,
                        "timezone": g.timezone,
                        "attributes": dict(g.attributes),
                    }
                    for g in directory.groups(parts[1])
                ]
            elif len(parts) == 3 and parts[0] == "tenants" and parts[2] == "devices":
                if "from" not in query or "to" not in query:
                    self._send(400, {"error": "from and to are required"})
                    return
                items = [
                    {
                        "device_id": d.device_id,
                        "last_heartbeat": _iso(d.last_heartbeat),
                        "offline_since": _iso(d.offline_since),
                        "plan_expires": d.plan_expires.isoformat() if d.plan_expires else None,
                    }
                    for d in directory.devices(parts[1], query["from"], query["to"])
                ]
            else:
                self._send(404, {"error": "no such resource"})
                return
            start = int(query.get("cursor", "0"))
            limit = int(query.get("limit", "100"))
            page = items[start : start + limit]
            following = start + limit if start + limit < len(items) else None
            cursor = state.stuck_cursor or (str(following) if following else None)
            self._send(200, {"items": page, "next": cursor})

        def do_POST(self) -> None:
            if self._fault():
                return
            path = self.path.removeprefix("/v1")
            parts = [urllib.parse.unquote(p) for p in path.strip("/").split("/")]
            body = json.loads(self.body or b"{}")
            if len(parts) == 5 and parts[0] == "tenants" and parts[4] == "offline":
                tenant, device_id = parts[1], parts[3]
                known = list(state.directory.devices(tenant, device_id, device_id + "\0"))
                if not known:
                    self._send(404, {"error": "no such device"})
                    return
                since = datetime.fromisoformat(body["since"])
                marked = state.directory.mark_offline(tenant, device_id, since=since)
                self._send(200, {"marked": marked})
                return
            self._send(404, {"error": "no such resource"})

    return Handler


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


@contextmanager
def dms_server(directory: MemoryDeviceDirectory) -> Iterator[DmsServer]:
    """Serve `directory` on 127.0.0.1 (a free port) for the duration of the block."""
    state = DmsServer(url="", directory=directory)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    server.daemon_threads = True
    host, port = server.server_address[:2]
    state.url = f"http://{host!s}:{port}/v1"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
