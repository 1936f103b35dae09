"""The client's transport against a tiny HTTP server on 127.0.0.1 (a real socket, so not in
tests/unit): what is retried and after what wait, what is not, typed errors, pages, the local
tenants header, SigV4 signatures."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from iotsched.client import (
    BadRequestError,
    Client,
    ForbiddenError,
    NotFoundError,
    RetryPolicy,
    ServerError,
    SigV4Signer,
    ThrottledError,
    Transport,
    TransportError,
)
from tests.support import free_port


@dataclass
class Seen:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes


#: An answer: status, JSON body (or None), extra headers; or "drop" (close without answering).
Answer = tuple[int, Any, dict[str, str]] | str


@dataclass
class Server:
    """Answers from `script` in order (then from `default`), recording every request."""

    url: str
    seen: list[Seen] = field(default_factory=list)
    script: list[Answer] = field(default_factory=list)
    default: Callable[[Seen], Answer] = lambda s: (200, {}, {})


@pytest.fixture
def server() -> Iterator[Server]:
    state = Server(url="")

    class Handler(BaseHTTPRequestHandler):
        def _any(self) -> None:
            parts = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            seen = Seen(
                self.command,
                parts.path,
                parse_qs(parts.query),
                dict(self.headers.items()),
                self.rfile.read(length),
            )
            state.seen.append(seen)
            answer = state.script.pop(0) if state.script else state.default(seen)
            if answer == "drop":
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            assert not isinstance(answer, str)
            status, body, headers = answer
            payload = b"" if body is None else json.dumps(body).encode()
            self.send_response(status)
            for name, value in {"Content-Type": "application/json", **headers}.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = do_PUT = do_DELETE = _any

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}/api"
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()


def client(url: str, slept: list[float], **kwargs: Any) -> Client:
    """A client whose waits are recorded, not slept, with backoff bounds of 0.1 s doubling."""
    retry = kwargs.pop("retry", RetryPolicy(attempts=4, base_s=0.1, cap_s=1.0, jitter=False))
    return Client(url, transport=Transport(url, retry=retry, sleep=slept.append, **kwargs))


INSTANCE: dict[str, Any] = {
    "instance_id": "scan@2026-11-29T12:00Z",
    "task_id": "scan",
    "tenant": None,
    "slot": "2026-11-29T12:00:00+00:00",
    "trigger_kind": "manual",
    "business_date": "2026-11-29",
    "status": "queued",
    "reason": None,
    "shards": 2,
    "remaining": 2,
    "failed_shards": 0,
    "covers": [],
    "covers_count": 0,
    "created_at": "2026-11-29T12:00:00+00:00",
    "finished_at": None,
    "duration_s": None,
    "task_version": 1,
}
THROTTLED: Answer = (429, {"message": "Too Many Requests"}, {})
UNAVAILABLE: Answer = (503, {"message": "Service Unavailable"}, {})


def test_429_and_503_are_retried_with_growing_waits(server: Server) -> None:
    server.script = [THROTTLED, UNAVAILABLE, THROTTLED, (200, INSTANCE, {})]
    slept: list[float] = []
    found = client(server.url, slept).instance(INSTANCE["instance_id"])
    assert found.status == "queued"
    assert len(server.seen) == 4
    assert slept == [0.1, 0.2, 0.4]


def test_retry_after_is_honoured_up_to_the_cap(server: Server) -> None:
    server.script = [(429, {}, {"Retry-After": "0.7"}), (429, {}, {"Retry-After": "60"})]
    server.default = lambda s: (200, INSTANCE, {})
    slept: list[float] = []
    client(server.url, slept).instance("scan@2026-11-29T12:00Z")
    assert slept == [0.7, 1.0]


def test_jittered_waits_stay_under_the_doubling_bound() -> None:
    policy = RetryPolicy(base_s=0.1, cap_s=1.0)
    assert [policy.delay(n, None, lambda: 0.5) for n in (1, 2, 3, 4, 5)] == [
        0.05,
        0.1,
        0.2,
        0.4,
        0.5,
    ]


def test_retries_run_out_with_the_last_answer(server: Server) -> None:
    server.default = lambda s: THROTTLED
    slept: list[float] = []
    with pytest.raises(ThrottledError) as caught:
        client(server.url, slept).instance("scan@2026-11-29T12:00Z")
    assert caught.value.status == 429
    assert caught.value.message == "Too Many Requests"
    assert len(server.seen) == 4 and len(slept) == 3


def test_a_400_is_not_retried_and_names_each_field(server: Server) -> None:
    problems = [{"field": "body.request_id", "message": "String should match pattern"}]
    server.script = [(400, {"error": "bad_request", "message": "m", "problems": problems}, {})]
    slept: list[float] = []
    with pytest.raises(BadRequestError) as caught:
        client(server.url, slept).run("scan", request_id="no spaces")
    assert len(server.seen) == 1 and slept == []
    error = caught.value
    assert (error.status, error.error, error.message) == (400, "bad_request", "m")
    assert [(p.field, p.message) for p in error.problems] == [
        ("body.request_id", "String should match pattern")
    ]


def test_404_and_a_gateway_403_are_typed(server: Server) -> None:
    server.script = [
        (404, {"error": "not_found", "message": "no task 'x'", "problems": []}, {}),
        (403, {"message": "The security token included in the request is invalid."}, {}),
    ]
    api = client(server.url, [])
    with pytest.raises(NotFoundError, match="no task 'x'"):
        api.task("x")
    with pytest.raises(ForbiddenError) as caught:
        api.task("x")
    assert caught.value.error == "forbidden"
    assert "security token" in caught.value.message


def test_a_run_without_request_id_is_not_retried_on_a_5xx(server: Server) -> None:
    server.default = lambda s: UNAVAILABLE
    slept: list[float] = []
    with pytest.raises(ServerError):
        client(server.url, slept).run("scan")
    assert [s.method for s in server.seen] == ["POST"] and slept == []


def test_a_run_with_a_request_id_is_retried_with_the_same_body(server: Server) -> None:
    server.script = [UNAVAILABLE, (200, {"outcome": "claimed", "instance": INSTANCE}, {})]
    slept: list[float] = []
    result = client(server.url, slept).run("scan", request_id="r-1", priority="high")
    assert result.outcome == "claimed"
    assert [json.loads(s.body) for s in server.seen] == [
        {"request_id": "r-1", "priority": "high"}
    ] * 2
    assert server.seen[0].path == "/api/tasks/scan/runs"
    assert slept == [0.1]


def test_a_throttled_rerun_is_retried_but_a_broken_one_is_not(server: Server) -> None:
    # 429: API Gateway refused it before anything ran; a dropped connection: it may have run
    server.script = [THROTTLED, (200, INSTANCE, {})]
    client(server.url, []).rerun("scan@2026-11-29T12:00Z", failed_only=True)
    assert len(server.seen) == 2
    server.seen.clear()
    server.script = ["drop"]
    with pytest.raises(TransportError):
        client(server.url, []).rerun("scan@2026-11-29T12:00Z")
    assert len(server.seen) == 1


def test_a_dropped_connection_is_retried_for_a_read(server: Server) -> None:
    server.script = ["drop", (200, INSTANCE, {})]
    slept: list[float] = []
    assert client(server.url, slept).instance("scan@2026-11-29T12:00Z").task_id == "scan"
    assert len(server.seen) == 2 and slept == [0.1]


def test_a_refused_connection_is_retried_for_any_request() -> None:
    url = f"http://127.0.0.1:{free_port()}/api"  # nothing listens there
    slept: list[float] = []
    with pytest.raises(TransportError, match="refused"):
        client(url, slept).rerun("scan@2026-11-29T12:00Z")
    assert slept == [0.1, 0.2, 0.4]


def test_instance_ids_are_escaped_in_the_path(server: Server) -> None:
    server.default = lambda s: (200, INSTANCE, {})
    client(server.url, []).instance("scan@2026-11-29T12:00Z~manual-r.1")
    assert server.seen[0].path == "/api/instances/scan%402026-11-29T12%3A00Z~manual-r.1"


def _task(task_id: str) -> dict[str, Any]:
    return {
        "id": task_id,
        "tenant": None,
        "handler": "noop",
        "trigger": {"rate": "1h"},
        "timezone": "UTC",
        "enabled": True,
        "paused": False,
        "sharding": "single",
        "version": 1,
        "next_fire": None,
        "last_slot": None,
    }


def test_tasks_are_paged_after_the_last_id(server: Server) -> None:
    ids = [f"t{n:02d}" for n in range(7)]

    def page(seen: Seen) -> Answer:
        after = seen.query.get("after", [""])[0]
        limit = int(seen.query["limit"][0])
        return (200, [_task(i) for i in ids if i > after][:limit], {})

    server.default = page
    listed = client(server.url, []).tasks(page_size=3, tenant="acme")
    assert next(listed).id == "t00"
    assert len(server.seen) == 1  # lazily: one page fetched so far
    assert [t.id for t in listed] == ids[1:]
    assert [s.query.get("after") for s in server.seen] == [None, ["t02"], ["t05"]]
    assert all(s.query["tenant"] == ["acme"] for s in server.seen)


def test_instances_are_paged_before_the_last_id(server: Server) -> None:
    ids = [f"scan@2026-11-29T{h:02d}:00Z" for h in range(5, 0, -1)]

    def page(seen: Seen) -> Answer:
        before = seen.query.get("before", [None])[0]
        rest = ids[ids.index(before) + 1 :] if before else ids
        limit = int(seen.query["limit"][0])
        return (200, [{**INSTANCE, "instance_id": i} for i in rest[:limit]], {})

    server.default = page
    found = list(client(server.url, []).instances("scan", status="failed", page_size=2))
    assert [i.instance_id for i in found] == ids
    assert [s.query.get("before") for s in server.seen] == [None, [ids[1]], [ids[3]]]
    assert server.seen[0].query["status"] == ["failed"]
    assert server.seen[0].query["task_id"] == ["scan"]


def test_shards_are_paged_by_next_start(server: Server) -> None:
    total = 5

    def page(seen: Seen) -> Answer:
        start, limit = int(seen.query["start"][0]), int(seen.query["limit"][0])
        shards: list[dict[str, Any]] = [
            {
                "index": n,
                "bounds": {"n": n},
                "status": "succeeded",
                "attempt": 1,
                "owner": None,
                "error": None,
                "keys_written": [],
                "keys_count": 0,
                "attempts": [],
            }
            for n in range(start, min(total, start + limit))
        ]
        following = start + len(shards)
        return (
            200,
            {
                "instance": INSTANCE,
                "total": total,
                "start": start,
                "next_start": following if following < total else None,
                "shards": shards,
            },
            {},
        )

    server.default = page
    found = list(client(server.url, []).shards(INSTANCE["instance_id"], page_size=2))
    assert [s.index for s in found] == [0, 1, 2, 3, 4]
    assert [s.query["start"] for s in server.seen] == [["0"], ["2"], ["4"]]


def test_the_local_client_names_its_tenants_in_the_local_header(server: Server) -> None:
    server.default = lambda s: (200, [], {})
    assert Client.local(server.url, tenants=["acme", "globex"]).tenants() == []
    assert Client.local(server.url).tenants() == []
    assert server.seen[0].headers["X-Iotsched-Local-Tenants"] == "acme globex"
    assert "X-Iotsched-Local-Tenants" not in server.seen[1].headers


CREDENTIALS = Credentials(
    "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "session-token"
)
FIXED = datetime(2026, 11, 29, 12, 0, 5, tzinfo=UTC)


def _expected_authorization(seen: Seen, host: str, secret: str) -> str:
    """The Authorization header botocore computes for the request as the server received it:
    its signed headers only (the server's own view, as API Gateway checks it), at FIXED."""
    authorization = seen.headers["Authorization"]
    signed = authorization.split("SignedHeaders=")[1].split(",")[0].split(";")
    received = {k.lower(): v for k, v in seen.headers.items()}
    query = "&".join(f"{k}={v}" for k, values in sorted(seen.query.items()) for v in values)
    request = AWSRequest(
        method=seen.method,
        url=f"http://{host}{seen.path}" + (f"?{query}" if query else ""),
        data=seen.body,
        headers={name: received[name] for name in signed if name != "host"},
    )
    credentials = Credentials(CREDENTIALS.access_key, secret, CREDENTIALS.token)
    SigV4Auth(credentials, "execute-api", "eu-west-1").add_auth(request)
    return str(request.headers["Authorization"])


def test_requests_are_signed_with_sigv4_for_execute_api(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("botocore.auth.get_current_datetime", lambda: FIXED.replace(tzinfo=None))
    server.default = lambda s: (
        (200, {"outcome": "claimed", "instance": INSTANCE}, {})
        if s.method == "POST"
        else (200, [INSTANCE], {})
    )
    signer = SigV4Signer(CREDENTIALS, "eu-west-1")
    api = Client(server.url, transport=Transport(server.url, signer=signer, sleep=lambda s: None))
    api.run("scan", request_id="r-1")
    list(api.instances("scan", status="succeeded"))
    host = urlsplit(server.url).netloc
    for seen in server.seen:
        headers = seen.headers
        assert headers["X-Amz-Date"] == "20261129T120005Z"
        assert headers["X-Amz-Security-Token"] == "session-token"
        assert headers["Authorization"].startswith(
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261129/eu-west-1/execute-api/aws4_request, "
        )
        assert headers["Authorization"] == _expected_authorization(
            seen, host, CREDENTIALS.secret_key
        )
        # the check can fail: another secret gives another signature
        assert headers["Authorization"] != _expected_authorization(seen, host, "another-secret")
    assert "content-type" in server.seen[0].headers["Authorization"]


def test_the_client_loads_no_server_side_code() -> None:
    """A handler package may use the client: importing it loads no resolver, use-case,
    adapter, local runtime or CLI."""
    never = (
        "iotsched.services",
        "iotsched.adapters",
        "iotsched.local",
        "iotsched.cli",
        "iotsched.api.app",
        "iotsched.api.routing",
        "iotsched.bootstrap",
        "aws_lambda_powertools.event_handler",
        "werkzeug",
        "click",
        "rich",
        "yaml",
    )
    code = (
        f"import sys, iotsched.client; never = {never!r}; "
        "print(sorted(m for m in sys.modules for p in never if m == p or m.startswith(p + '.')))"
    )
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "[]"


def test_the_overview_views_cap_is_the_use_cases() -> None:
    from iotsched.api.overview_views import MAX_INSTANCES
    from iotsched.services.operations.overview import MAX_INSTANCES as USED

    assert MAX_INSTANCES == USED


class _Stack:
    """A boto3 session's stand-in: fixed credentials, one stack with the API's URL."""

    region_name = "eu-central-1"

    def __init__(self, url: str) -> None:
        self.url = url

    def get_credentials(self) -> Credentials:
        return CREDENTIALS

    def client(self, service: str) -> Any:
        assert service == "cloudformation"
        outputs = [{"OutputKey": "ManagementApiUrl", "OutputValue": self.url}]
        stacks = {"Stacks": [{"Outputs": outputs}]}

        class CloudFormation:
            def describe_stacks(self, StackName: str) -> dict[str, Any]:
                assert StackName == "sched"
                return stacks

        return CloudFormation()


def test_a_stack_client_signs_for_the_region_of_its_url_or_session(server: Server) -> None:
    server.default = lambda s: (200, [], {})
    Client.from_stack("sched", session=_Stack(server.url)).tenants()
    assert "/eu-central-1/execute-api/" in server.seen[0].headers["Authorization"]
    gateway = "https://abc123.execute-api.eu-west-1.amazonaws.com/prod"
    signer = Client.aws(gateway, session=_Stack(gateway)).transport.signer
    assert isinstance(signer, SigV4Signer) and signer.region == "eu-west-1"
    chosen = Client.aws(gateway, session=_Stack(gateway), region="us-east-2").transport.signer
    assert isinstance(chosen, SigV4Signer) and chosen.region == "us-east-2"
    with pytest.raises(ValueError, match="http"):
        Client("ftp://example.com/api")
