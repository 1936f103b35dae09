"""The local runtime's port (`iotsched.local.control`) on a real socket: the console's files,
the management API under /api (on the in-memory services), control under /_local, concurrent
API requests each answered as if alone, and what other web pages send refused before any of
it is reached (another host name, another origin, a write that is not JSON)."""

from __future__ import annotations

import dataclasses
import json
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any, cast

import pytest

from iotsched.api.app import create_app
from iotsched.api.proxy import wsgi_app
from iotsched.core.task_record import TaskRecord
from iotsched.local.control import API_PREFIX, ControlServer
from iotsched.local.delivery import TickResult
from iotsched.local.loopback import PortInUseError
from iotsched.local.processes import RuntimeError_
from iotsched.local.runtime import LocalRuntime
from iotsched.services.wiring import Wiring
from tests.api.conftest import DEVICE_SCAN

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


class FakeRuntime:
    """What the port asks of a runtime, recording the ticks and sweeps it is asked for."""

    endpoint_url = "http://127.0.0.1:5000"
    manual_clock = True

    def __init__(self) -> None:
        self.ticks: list[TickResult] = []
        self.sweeps: list[tuple[datetime | None, bool]] = []
        self.sweeper_down = False

    def now(self) -> datetime:
        return NOW

    def tick(self, at: datetime, *, repeat: int = 1) -> list[TickResult]:
        results = [TickResult(at=at, report={"claimed": [n]}) for n in range(repeat)]
        self.ticks += results
        return results

    def sweep(self, at: datetime | None = None, *, replay: bool = False) -> dict[str, Any]:
        if self.sweeper_down:
            raise RuntimeError_("the sweeper did not answer")
        self.sweeps.append((at, replay))
        return {"now": at.isoformat() if at else None}

    def processes(self) -> list[dict[str, Any]]:
        return [{"name": "worker-1", "pid": 4242, "state": "running"}]


class SlowTasks:
    """A task store whose reads take a while (requests answered together would interleave),
    counting how many overlap."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self._lock = threading.Lock()
        self.in_flight = self.most_in_flight = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def get_task(self, task_id: str) -> TaskRecord | None:
        with self._lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            time.sleep(0.02)
            found: TaskRecord | None = self._store.get_task(task_id)
            return found
        finally:
            with self._lock:
                self.in_flight -= 1


@dataclasses.dataclass
class Port:
    url: str
    runtime: FakeRuntime
    tasks: SlowTasks

    def fetch(
        self,
        path: str,
        method: str = "GET",
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, str], bytes]:
        request = urllib.request.Request(self.url + path, data=body, method=method)
        if body is not None:
            request.add_header("Content-Type", "application/json")
        for name, value in (headers or {}).items():
            request.add_header(name, value)
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                return answer.status, dict(answer.headers), answer.read()
        except urllib.error.HTTPError as exc:
            return exc.code, dict(exc.headers), exc.read()


@pytest.fixture
def port(memory_services: Wiring) -> Iterator[Port]:
    tasks = SlowTasks(memory_services.tasks)
    svc = dataclasses.replace(memory_services, tasks=cast("Any", tasks))
    runtime = FakeRuntime()
    api = wsgi_app(create_app(lambda: svc, strip_prefixes=[API_PREFIX]))
    server = ControlServer(cast("LocalRuntime", runtime), 0, api=api)
    server.start()
    try:
        yield Port(f"http://127.0.0.1:{server.port}/", runtime, tasks)
    finally:
        server.stop()


def test_concurrent_api_requests_of_different_routes_each_get_their_own_answer(port: Port) -> None:
    ids = [f"scan-{n}" for n in range(4)]
    body = json.dumps({"tasks": [{**DEVICE_SCAN, "id": i} for i in ids]}).encode()
    assert port.fetch("api/tasks", "POST", body)[0] == 200
    # requests of different routes (a resolver answering two at once mixes their routes)
    paths = [
        *[f"api/tasks/{task_id}" for task_id in ids] * 10,
        *["api/instances?task_id=scan-1"] * 20,
        *["api/tasks/nope"] * 5,
    ]

    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(port.fetch, paths))

    for path, (status, headers, data) in zip(paths, answers, strict=True):
        if path.endswith("nope"):
            assert status == 404, data
            assert json.loads(data)["message"] == "no task 'nope'"
        elif "instances" in path:
            assert (status, json.loads(data)) == (200, []), data
        else:
            assert status == 200, (path, data)
            assert json.loads(data)["id"] == path.rsplit("/", 1)[1]
        assert headers["Cache-Control"] == "no-store"
        assert int(headers["Content-Length"]) == len(data)


def test_concurrent_requests_each_read_their_own_query_string(port: Port) -> None:
    # The resolver reads a request's query string (and headers: the caller) while it answers;
    # two requests answered together must never read each other's.
    ids = [f"scan-{n}" for n in range(4)]
    body = json.dumps({"tasks": [{**DEVICE_SCAN, "id": i} for i in ids]}).encode()
    assert port.fetch("api/tasks", "POST", body)[0] == 200
    limits = [1 + n % 4 for n in range(60)]

    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(lambda n: port.fetch(f"api/tasks?limit={n}"), limits))

    for limit, (status, _, data) in zip(limits, answers, strict=True):
        assert status == 200, data
        assert [t["id"] for t in json.loads(data)] == ids[:limit]


def test_the_console_files_and_nothing_else(port: Port) -> None:
    status, headers, page = port.fetch("")
    assert (status, headers["Content-Type"]) == (200, "text/html; charset=utf-8")
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert headers["Cache-Control"] == "no-store"
    assert b'<script type="module" src="console.js">' in page
    assert json.loads(port.fetch("config.json")[2]) == {"api": "/api", "local": True}
    head = port.fetch("console.js", "HEAD")
    assert head[0] == 200 and "javascript" in head[1]["Content-Type"] and head[2] == b""
    assert port.fetch("..%2Fpyproject.toml")[0] == 404
    assert port.fetch("nothing.js", "HEAD")[0] == 404
    status, _, data = port.fetch("index.html", "PUT", b"{}")
    assert status == 405
    assert json.loads(data) == {"error": "PUT is not allowed on /index.html"}


def test_control_ticks_sweeps_and_status(port: Port) -> None:
    status, _, data = port.fetch(
        "_local/tick", "POST", json.dumps({"at": "2026-11-29T13:00:00+00:00", "repeat": 2}).encode()
    )
    assert status == 200, data
    ticks = json.loads(data)
    assert [t["report"]["claimed"] for t in ticks] == [[0], [1]]
    assert {t["at"] for t in ticks} == {"2026-11-29T13:00:00+00:00"}
    assert port.fetch("_local/tick", "POST", b'{"repeat": 0}')[0] == 400
    assert port.fetch("_local/tick", "POST", b'{"at": "not an instant"}')[0] == 400

    assert port.fetch("_local/sweep", "POST", b"{}")[0] == 200
    assert port.runtime.sweeps == [(NOW, False)]  # no instant given: the runtime's now
    port.runtime.sweeper_down = True
    status, _, data = port.fetch("_local/sweep", "POST", b"{}")
    assert (status, json.loads(data)) == (502, {"error": "the sweeper did not answer"})
    assert port.fetch("_local/nothing", "POST", b"{}")[0] == 404

    status, _, data = port.fetch("_local/status")
    assert status == 200
    assert json.loads(data) == {
        "endpoint_url": "http://127.0.0.1:5000",
        "now": NOW.isoformat(),
        "manual_clock": True,
        "ticks_delivered": 2,
        "processes": [{"name": "worker-1", "pid": 4242, "state": "running"}],
    }


def test_a_port_in_use_is_a_port_in_use_error(port: Port) -> None:
    taken = int(port.url.rsplit(":", 1)[1].strip("/"))
    with pytest.raises(PortInUseError) as raised:
        ControlServer(cast("LocalRuntime", FakeRuntime()), taken, api=lambda e, s: [])
    assert raised.value.strerror == f"port {taken} on 127.0.0.1 is in use by another program"
    with socket.create_connection(("127.0.0.1", taken), timeout=5):
        pass  # the server that holds it still serves


def _refused(answer: tuple[int, dict[str, str], bytes]) -> tuple[int, str]:
    """(status, error code) of a refusal, which says why in JSON."""
    status, headers, data = answer
    body = json.loads(data)
    assert headers["Content-Type"] == "application/json"
    assert set(body) == {"error", "message", "problems"} and body["message"], body
    return status, body["error"]


def test_another_host_name_is_refused_whatever_it_asks(port: Port) -> None:
    number = port.url.rsplit(":", 1)[1].strip("/")
    for path in ("", "api/tasks", "_local/status"):  # DNS rebinding: the page would read these
        answer = port.fetch(path, headers={"Host": f"rebind.example:{number}"})
        assert _refused(answer) == (421, "wrong_host"), path
    assert _refused(port.fetch("", headers={"Host": "127.0.0.1:1"})) == (421, "wrong_host")
    assert port.fetch("", headers={"Host": f"localhost:{number}"})[0] == 200
    assert port.fetch("", headers={"Host": f"LOCALHOST:{number}"})[0] == 200


def test_pages_of_other_origins_are_refused_and_the_consoles_own_served(port: Port) -> None:
    number = port.url.rsplit(":", 1)[1].strip("/")
    tick = json.dumps({"at": "2031-01-01T00:00:00+00:00"}).encode()
    for origin in ("http://evil.example", f"http://127.0.0.1:{int(number) + 1}", "null"):
        for path, method, body in (
            ("_local/tick", "POST", tick),
            ("api/tasks", "GET", None),
            ("api/tasks/device-scan/pause", "POST", b"{}"),
        ):
            answer = port.fetch(path, method, body, headers={"Origin": origin})
            assert _refused(answer) == (403, "foreign_origin"), (origin, path)
    for own in (f"http://127.0.0.1:{number}", f"http://localhost:{number}"):
        assert port.fetch("api/tasks", headers={"Origin": own})[0] == 200
        assert port.fetch("_local/sweep", "POST", b"{}", headers={"Origin": own})[0] == 200
    assert port.runtime.ticks == []


def test_a_write_without_a_json_content_type_is_refused_before_it_is_served(port: Port) -> None:
    body = json.dumps({"tasks": [DEVICE_SCAN]}).encode()
    assert port.fetch("api/tasks", "POST", body)[0] == 200
    tick = json.dumps({"at": "2031-01-01T00:00:00+00:00"}).encode()
    forms = [
        ("_local/tick", "POST", tick, "text/plain"),
        ("_local/sweep", "POST", b"{}", "text/plain;charset=UTF-8"),
        ("api/tasks/device-scan/pause", "POST", None, None),  # a body-less form
        ("api/tasks/device-scan/pause", "POST", None, "application/x-www-form-urlencoded"),
        ("api/tasks/device-scan/runs", "POST", b"x=1", "multipart/form-data; boundary=x"),
        ("api/tasks/device-scan", "DELETE", None, None),
    ]
    for path, method, data, kind in forms:
        request = urllib.request.Request(port.url + path, data=data, method=method)
        if kind is not None:
            request.add_header("Content-Type", kind)
        try:
            urllib.request.urlopen(request, timeout=10)
        except urllib.error.HTTPError as exc:
            answer = (exc.code, dict(exc.headers), exc.read())
        else:
            pytest.fail(f"{method} {path} ({kind}) was served")
        assert _refused(answer) == (415, "unsupported_media_type"), (path, kind)
        assert "Content-Type: application/json" in json.loads(answer[2])["message"]
    assert (port.runtime.ticks, port.runtime.sweeps) == ([], [])
    assert port.fetch("api/tasks/device-scan")[0] == 200  # neither paused nor deleted
    assert json.loads(port.fetch("api/tasks/device-scan")[2])["paused"] is False
    # JSON with no body is a write the console and the client make: served
    json_only = {"Content-Type": "application/json; charset=utf-8"}
    assert port.fetch("api/tasks/device-scan/pause", "POST", headers=json_only)[0] == 200
    assert port.fetch("api/tasks/device-scan/resume", "POST", headers=json_only)[0] == 200
