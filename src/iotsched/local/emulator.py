"""The embedded emulator: moto in server mode on 127.0.0.1, serving one request at a time.

Every user (the local runtime, the tests, the benchmarks, the chaos run) starts moto through
`EmulatorServer`, so all run on the same emulator. Always on: one request at a time (DynamoDB
applies each atomically; moto's threaded server does not), moto's patches
(`local.moto_patches`: speed-ups that return exactly what moto returns, and SQS's fair queuing),
and a port that serves this machine's programs only (`local.loopback`: moto would answer every
web page).
Options, never on by default as they change what a client observes:
`adversary=AdversaryConfig(...)` (the adversarial DynamoDB before moto) and
`moto_patches.idempotent_transactions()` (TransactWriteItems idempotent by ClientRequestToken,
as on AWS). docs/design.md, section 18, says why.
"""

from __future__ import annotations

import io
import json
import logging
import socket
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from typing import Any, cast
from urllib.parse import parse_qs

from werkzeug.serving import BaseWSGIServer, make_server

from iotsched.adversary.middleware import Adversary
from iotsched.adversary.schedule import AdversaryConfig
from iotsched.local.loopback import LoopbackGuard, listen
from iotsched.local.moto_patches import install_fair_queues, install_speed_ups

ACCOUNT = "123456789012"  # moto's default account
REGION = "us-east-1"


class EmulatorServer:
    """A started moto server. `url` is its endpoint; `stop()` ends it.

    Its port is bound before anything else is done (`loopback.listen`: a port another program
    holds is a `PortInUseError` at once), and serves this machine's programs only
    (`loopback.LoopbackGuard`: no page of another origin or site, no other host name).

    With `adversary` set, DynamoDB requests go through an `Adversary` (`self.adversary`) that
    injects the faults DynamoDB has and moto lacks; its counts are at `GET /adversary/stats`.
    """

    def __init__(self, port: int = 0, *, adversary: AdversaryConfig | None = None) -> None:
        from moto.moto_server.werkzeug_app import (
            DomainDispatcherApplication,
            MotoRequestHandler,
            create_backend_app,
        )

        self._socket = listen(port)
        try:
            install_speed_ups()
            install_fair_queues()
            # moto's werkzeug server logs every request; the runtime's output is its own.
            logging.getLogger("werkzeug").setLevel(logging.CRITICAL)
            bound = int(self._socket.getsockname()[1])
            # moto's own server (`moto.server`), on the socket bound above: its starter binds
            # in a thread of its own and waits forever for a bind that failed.
            self._server = make_server(
                "127.0.0.1",
                bound,
                DomainDispatcherApplication(create_backend_app),
                threaded=True,
                request_handler=MotoRequestHandler,
                fd=self._socket.fileno(),
            )
        except BaseException:
            self._socket.close()
            raise
        self.adversary = serialize_requests(self._server, adversary=adversary)
        self._polls = cast("LongPolls", self._server.app)  # as serialize_requests set it
        self._server.app = LoopbackGuard(self._server.app, bound, json_writes=False, emulator=True)
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="emulator", daemon=True
        )
        self._thread.start()
        self.url = f"http://127.0.0.1:{bound}"

    def reset(self) -> None:
        """Drop every resource the emulator holds.

        moto keeps its state per process, shared by every server and mock in it: a runtime
        that starts after another in the same process (tests) begins from a clean slate.
        """
        request = urllib.request.Request(f"{self.url}/moto-api/reset", method="POST")  # noqa: S310
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - loopback
            response.read()

    def stop(self) -> None:
        """Stop serving (the long polls under way answer empty at once)."""
        self._polls.close()
        self._server.shutdown()
        self._thread.join()
        self._server.server_close()
        self._socket.close()


def serialize_requests(
    server: BaseWSGIServer, *, adversary: AdversaryConfig | None = None
) -> Adversary | None:
    """Make moto's werkzeug `server` handle one request at a time.

    With `adversary`, an `Adversary` stands before moto (it takes moto's lock itself, so that a
    transaction's in-flight hold runs outside it); it is returned.
    """
    app = server.app
    lock = threading.Lock()
    if adversary is not None:
        front = Adversary(app, lock, adversary)
        server.app = LongPolls(front)
        return front

    def one_at_a_time(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        with lock:
            return list(app(environ, start_response))

    server.app = LongPolls(one_at_a_time)
    return None


class LongPolls:
    """SQS long polling (`WaitTimeSeconds` > 0) on a server that serves one request at a time.

    moto waits for messages inside the request, which would hold every other client up for the
    whole wait. Here the receive runs without a wait and, while it finds nothing, is tried again
    outside the lock: when a request that can make a message of its queue visible has been
    served (SendMessage[Batch], ChangeMessageVisibility[Batch] on that queue, or an SNS Publish,
    which delivers to subscribed queues), else when the first of its messages' delays or
    visibility timeouts ends (no later than `RECHECK_S` after, where that cannot be read). It
    answers as SQS does: as soon as a message is there, or empty when the wait has passed. A wait
    ends empty, taking nothing, once its client has gone or the server stops (`close`): moto's
    state is per process, and a receive run for nobody would hide a message for its visibility
    timeout (from the next emulator of the process, too).
    """

    RECHECK_S = 0.5
    #: Past the moment a message's delay or visibility ends: moto tests `now > visible_at`.
    _VISIBLE_MARGIN_S = 0.005
    _RECEIVE = "AmazonSQS.ReceiveMessage"
    _QUEUE_WRITES = frozenset(
        f"AmazonSQS.{action}"
        for action in (
            "SendMessage",
            "SendMessageBatch",
            "ChangeMessageVisibility",
            "ChangeMessageVisibilityBatch",
        )
    )
    _PUBLISH = (["Publish"], ["PublishBatch"])

    def __init__(self, app: Callable[[dict[str, Any], Any], Any]) -> None:
        self._app = app
        self._changed = threading.Condition()
        #: Writes served so far, per queue name and to every queue (a publish): a receive that
        #: found nothing waits until its queue's count moved.
        self._writes: Counter[str] = Counter()
        self._closed = False

    def close(self) -> None:
        """End every wait under way, each answering empty; none waits from now on."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def __call__(self, environ: dict[str, Any], start_response: Any) -> list[bytes]:
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        if target == self._RECEIVE:
            return self._receive(environ, start_response)
        if target in self._QUEUE_WRITES:
            raw = _body(environ)
            body = list(self._app(environ, start_response))
            self._wake(_queue_name(raw))
            return body
        if not target and environ.get("REQUEST_METHOD") == "POST":
            raw = _body(environ)
            body = list(self._app(environ, start_response))
            if parse_qs(raw.decode(errors="replace")).get("Action") in self._PUBLISH:
                self._wake("*")
            return body
        return list(self._app(environ, start_response))

    def _wake(self, queue: str) -> None:
        with self._changed:
            self._writes[queue] += 1
            self._changed.notify_all()

    def _stamp(self, queue: str) -> tuple[int, int]:
        return self._writes[queue], self._writes["*"]

    def _receive(self, environ: dict[str, Any], start_response: Any) -> list[bytes]:
        raw = _body(environ)
        try:
            request = json.loads(raw)
            wait_s = float(request.get("WaitTimeSeconds") or 0)
            queue = _queue_of(request)
        except (ValueError, TypeError, AttributeError):
            request, wait_s, queue = None, 0.0, ""  # moto answers what it makes of it
        if request is not None and wait_s > 0:
            raw = json.dumps({**request, "WaitTimeSeconds": 0}).encode()
        deadline = time.monotonic() + wait_s
        answer: list[Any] = []
        while True:
            answer.clear()
            with self._changed:
                # Read before the receive: a write served after it moves the stamp, so no
                # message sent between the receive and the wait is missed.
                stamp = self._stamp(queue)
            inner = dict(environ, **{"wsgi.input": io.BytesIO(raw)})
            inner["CONTENT_LENGTH"] = str(len(raw))
            body = list(self._app(inner, lambda *a: answer.append(a)))
            left = deadline - time.monotonic()
            if left <= 0 or not _empty_receive(answer[0][0], body):
                start_response(*answer[0])
                return body
            self._wait_past(queue, stamp, min(left, self._until_receivable(queue)))
            if self._closed or _client_gone(environ):
                start_response(*answer[0])
                return body  # the last receive's empty answer

    def _until_receivable(self, queue: str) -> float:
        """Seconds until the first message of `queue` now delayed or in flight may be received
        (infinite if it has none), read from moto's queue; `RECHECK_S` where it cannot be."""
        from moto.sqs.models import sqs_backends

        try:
            backends: list[Any] = [backend for _, _, backend in sqs_backends.iter_backends()]
            found = [backend.queues[queue] for backend in backends if queue in backend.queues]
        except RuntimeError:  # a request in another thread made a region's backend meanwhile
            return self.RECHECK_S
        if len(found) != 1:
            return self.RECHECK_S  # no such queue, or one name in several regions
        now_ms = time.time() * 1000
        ends = [
            max(message.visible_at, message.delayed_until)
            for message in list(found[0]._messages)  # a copy: served requests change it
        ]
        later = [end for end in ends if end >= now_ms]
        if not ends:
            return float("inf")
        if len(later) < len(ends):
            return self.RECHECK_S  # one receivable, yet none received (a FIFO group, a race)
        return float(min(later) - now_ms) / 1000 + self._VISIBLE_MARGIN_S

    def _wait_past(self, queue: str, stamp: tuple[int, int], timeout: float) -> None:
        """Until a write to `queue` (or a publish) is served after `stamp`, the server closes,
        or `timeout`."""
        with self._changed:
            self._changed.wait_for(lambda: self._closed or self._stamp(queue) != stamp, timeout)


def _client_gone(environ: dict[str, Any]) -> bool:
    """Whether the request's client closed its connection (a poller stopped or killed)."""
    connection = environ.get("werkzeug.socket")
    if connection is None:
        return False
    try:
        return bool(connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b"")
    except BlockingIOError:
        return False  # open, nothing sent: still waiting for its answer
    except OSError:
        return True


def _body(environ: dict[str, Any]) -> bytes:
    """The request's body, read once and put back for the app."""
    raw: bytes = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
    environ["wsgi.input"] = io.BytesIO(raw)
    environ["CONTENT_LENGTH"] = str(len(raw))
    return raw


def _queue_name(raw: bytes) -> str:
    """The queue an SQS JSON request body names; "" if none."""
    try:
        return _queue_of(json.loads(raw))
    except (ValueError, AttributeError):
        return ""


def _queue_of(request: dict[str, Any]) -> str:
    """The queue an SQS JSON request names (the last part of its QueueUrl); "" if none."""
    return str(request.get("QueueUrl") or "").rstrip("/").rsplit("/", 1)[-1]


def _empty_receive(status: str, body: list[bytes]) -> bool:
    """Whether a ReceiveMessage answer is a success that carries no message."""
    if not status.startswith("200"):
        return False
    try:
        return not json.loads(b"".join(body) or b"{}").get("Messages")
    except ValueError:
        return False


# -- state ------------------------------------------------------------------------------------


def reset_state() -> None:
    """Forget every resource of earlier emulators in this process (moto's state is global)."""
    from moto.moto_api._internal.models import moto_api_backend

    moto_api_backend.reset()


def empty_table(table: str) -> None:
    """Drop every item of `table` in the in-process emulator. Only while nothing is in flight."""
    from moto.backends import get_backend

    get_backend("dynamodb")[ACCOUNT][REGION].tables[table].items.clear()
