"""The embedded emulator: moto in server mode on 127.0.0.1, serving one request at a time.

Every user (the local runtime, the tests, the benchmarks, the chaos run) starts moto through
`EmulatorServer`, so all run on the same emulator. Always on: one request at a time (DynamoDB
applies each atomically; moto's threaded server does not) and the speed-ups
(`install_speed_ups`), which return exactly what moto returns. Options, never on by default as
they change what a client observes: `adversary=AdversaryConfig(...)` (the adversarial DynamoDB
before moto) and `idempotent_transactions()` (TransactWriteItems idempotent by
ClientRequestToken, as on AWS). docs/design.md, section 18, says why.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import logging
import socket
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import parse_qs

from iotsched.adversary.middleware import Adversary
from iotsched.adversary.schedule import AdversaryConfig

ACCOUNT = "123456789012"  # moto's default account
REGION = "us-east-1"

#: The speed-ups installed in this process so far (see `install_speed_ups`).
_installed: set[str] = set()
_install_lock = threading.Lock()


class EmulatorServer:
    """A started moto server. `url` is its endpoint; `stop()` ends it.

    With `adversary` set, DynamoDB requests go through an `Adversary` (`self.adversary`) that
    injects the faults DynamoDB has and moto lacks; its counts are at `GET /adversary/stats`.
    """

    def __init__(self, port: int = 0, *, adversary: AdversaryConfig | None = None) -> None:
        from moto.server import ThreadedMotoServer

        if port:
            _refuse_taken(port)
        install_speed_ups()
        # moto's werkzeug server logs every request; the runtime's output is its own.
        logging.getLogger("werkzeug").setLevel(logging.CRITICAL)
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        self._server.start()
        self.adversary = serialize_requests(self._server, adversary=adversary)
        host, bound = self._server.get_host_and_port()
        self.url = f"http://{host}:{bound}"

    def reset(self) -> None:
        """Drop every resource the emulator holds.

        moto keeps its state per process, shared by every server and mock in it: a runtime
        that starts after another in the same process (tests) begins from a clean slate.
        """
        request = urllib.request.Request(f"{self.url}/moto-api/reset", method="POST")  # noqa: S310
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - loopback
            response.read()

    def stop(self) -> None:
        """Stop serving."""
        self._server.stop()


class EmulatorPortInUseError(OSError):
    """The emulator's port on 127.0.0.1 is served by another program."""


def _refuse_taken(port: int) -> None:
    """Raise EmulatorPortInUseError if something listens on `port`. moto's server thread exits
    on a taken port without telling its starter, which then waits for it forever. The probe
    binds as the server does (address reuse on), so a port left in TIME_WAIT is free."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as exc:
            raise EmulatorPortInUseError(
                exc.errno, f"port {port} on 127.0.0.1 is in use by another program"
            ) from None


def serialize_requests(
    server: Any, *, adversary: AdversaryConfig | None = None
) -> Adversary | None:
    """Make a started `ThreadedMotoServer` handle one request at a time.

    With `adversary`, an `Adversary` stands before moto (it takes moto's lock itself, so that a
    transaction's in-flight hold runs outside it); it is returned.
    """
    wsgi = server._server  # the werkzeug server that `start()` created
    app = wsgi.app
    lock = threading.Lock()
    if adversary is not None:
        front = Adversary(app, lock, adversary)
        wsgi.app = LongPolls(front)
        return front

    def one_at_a_time(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        with lock:
            return list(app(environ, start_response))

    wsgi.app = LongPolls(one_at_a_time)
    return None


class LongPolls:
    """SQS long polling (`WaitTimeSeconds` > 0) on a server that serves one request at a time.

    moto waits for messages inside the request, which would hold every other client up for the
    whole wait. Here the receive runs without a wait and, while it finds nothing, is tried again
    outside the lock: when a request that can make a message of its queue visible has been
    served (SendMessage[Batch], ChangeMessageVisibility[Batch] on that queue, or an SNS Publish,
    which delivers to subscribed queues), else every `RECHECK_S` for messages whose delay or
    visibility timeout ended. It answers as SQS does: as soon as a message is there, or empty
    when the wait has passed.
    """

    RECHECK_S = 0.5
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
            self._wait_past(queue, stamp, min(left, self.RECHECK_S))

    def _wait_past(self, queue: str, stamp: tuple[int, int], timeout: float) -> None:
        """Until a write to `queue` (or a publish) is served after `stamp`, or `timeout`."""
        with self._changed:
            self._changed.wait_for(lambda: self._stamp(queue) != stamp, timeout)


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


# -- speed-ups (always on) --------------------------------------------------------------------


def install_speed_ups() -> frozenset[str]:
    """Install every speed-up in this process (once); return the names of those installed."""
    with _install_lock:
        for name, install in SPEED_UPS.items():
            if name not in _installed:
                install()
                _installed.add(name)
        return frozenset(_installed)


def installed_speed_ups() -> frozenset[str]:
    """The names of the speed-ups installed in this process so far."""
    return frozenset(_installed)


def _item_level_rollback() -> None:
    """TransactWriteItems backs up the items its entries name, not every table it touches.

    moto deep-copies each table a transaction names, to roll back if it is cancelled: a cost
    proportional to the table's size per transaction. A transaction writes only the items its
    entries name, each at most once, so copying those items before the call and putting them
    back if it raises is the same all-or-nothing.
    """
    ddb: Any = importlib.import_module("moto.dynamodb.models")
    from moto.dynamodb.models.dynamo_type import DynamoType
    from moto.dynamodb.models.table import Table

    original = ddb.DynamoDBBackend.transact_write_items
    real_copy = ddb.copy
    state = threading.local()

    class _Copy:
        """`copy` for moto's DynamoDB backend: a table copied inside a transaction is itself."""

        def __getattr__(self, name: str) -> Any:
            return getattr(real_copy, name)

        def deepcopy(self, value: Any, memo: Any = None) -> Any:
            if getattr(state, "active", False) and isinstance(value, Table):
                return value
            return real_copy.deepcopy(value, memo)

    def current(table: Any, hash_value: Any, range_value: Any) -> Any:
        partition = table.items.get(hash_value)
        if range_value is None or partition is None:
            return partition
        return partition.get(range_value)

    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
        saved: list[tuple[Any, Any, Any, Any]] = []
        for entry in transact_items:
            op: Any = next(iter(entry.values()), None)
            if not isinstance(op, dict) or op.get("TableName") not in self.tables:
                continue
            table = self.tables[op["TableName"]]
            key = op.get("Key") or op.get("Item") or {}
            try:
                hash_value = DynamoType(key[table.hash_key_attr])
                range_value = (
                    DynamoType(key[table.range_key_attr]) if table.range_key_attr else None
                )
            except (KeyError, TypeError):
                continue  # moto rejects the entry before it writes anything
            item = current(table, hash_value, range_value)
            saved.append((table, hash_value, range_value, real_copy.deepcopy(item)))
        state.active = True
        try:
            original(self, transact_items)
        except BaseException:
            for table, hash_value, range_value, item in reversed(saved):
                if item is None:
                    if current(table, hash_value, range_value) is not None:
                        table.delete_item(hash_value, range_value)
                elif range_value is None:
                    table.items[hash_value] = item
                else:
                    table.items[hash_value][range_value] = item
            raise
        finally:
            state.active = False

    ddb.copy = _Copy()
    ddb.DynamoDBBackend.transact_write_items = transact_write_items


def _partition_query() -> None:
    """A Query reads the items of its partition (or, on an index, every item unsorted).

    moto's Query sorts every item of the table (`all_items()`) and then keeps the queried
    partition, or re-sorts the matches by the index keys: O(n log n) in the table per query.
    Its own filtering and ordering run unchanged on the candidates.
    """
    from moto.dynamodb.models.table import Table

    original_query = Table.query
    original_all_items = Table.all_items
    scope = threading.local()  # (table, candidates) of the query running on this thread

    def all_items(self: Any) -> Any:
        current = getattr(scope, "query", None)
        if current is not None and current[0] is self:
            return current[1]
        return original_all_items(self)

    def query(self: Any, hash_key: Any, *args: Any, **kwargs: Any) -> Any:
        index_name = kwargs.get("index_name", args[6] if len(args) > 6 else None)
        if index_name:  # every item is a candidate; the index order is sorted in there
            candidates = [
                item
                for partition in self.items.values()
                for item in (partition.values() if self.range_key_attr else [partition])
            ]
        else:  # only the partition can match (the original filters all items by hash key)
            partition = self.items.get(hash_key)
            if partition is None:
                candidates = []
            else:
                candidates = list(partition.values()) if self.range_key_attr else [partition]
        outer = getattr(scope, "query", None)
        scope.query = (self, candidates)
        try:
            return original_query(self, hash_key, *args, **kwargs)
        finally:
            scope.query = outer

    Table.all_items = all_items  # type: ignore[method-assign]
    Table.query = query  # type: ignore[method-assign]


def _sqs_without_queue_walks() -> None:
    """SendMessage and ReceiveMessage stop walking the whole queue for each message.

    moto's `send_message` reads `queue.attributes` for each message (to learn whether
    content-based deduplication is on), and `receive_message` does so for each message it hands
    out: building that dict counts the queue's visible, delayed and in-flight messages, three
    scans of the queue each time, so sending n messages is quadratic. Neither caller reads those
    counts; while they run, the counts are reported as 0. GetQueueAttributes (and every other
    reader) still gets the real counts. The retention check reads the retention period itself,
    and moto's clock without an argument is `time.time()` (the same value, without datetime
    arithmetic per message).
    """
    sqs: Any = importlib.import_module("moto.sqs.models")
    inside = threading.local()

    def counting(name: str) -> property:
        original = getattr(sqs.Queue, name)

        def count(self: Any) -> int:
            if getattr(inside, "active", 0):
                return 0
            result: int = original.fget(self)
            return result

        return property(count)

    def without_counts(method: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            inside.active = getattr(inside, "active", 0) + 1
            try:
                return method(self, *args, **kwargs)
            finally:
                inside.active -= 1

        return wrapper

    for name in (
        "approximate_number_of_messages",
        "approximate_number_of_messages_delayed",
        "approximate_number_of_messages_not_visible",
    ):
        setattr(sqs.Queue, name, counting(name))
    for name in ("send_message", "receive_message"):
        setattr(sqs.SQSBackend, name, without_counts(getattr(sqs.SQSBackend, name)))

    real_unix_time = sqs.unix_time

    def unix_time(dt: Any = None) -> float:
        return time.time() if dt is None else float(real_unix_time(dt))

    def unix_time_millis(dt: Any = None) -> float:
        return unix_time(dt) * 1000.0

    def is_message_valid_based_on_retention_period(
        self: Any, queue_name: str, message: Any
    ) -> bool:
        retention_s = int(self.get_queue(queue_name).message_retention_period)
        return bool(retention_s + message.sent_timestamp / 1000 > unix_time())

    sqs.unix_time = unix_time
    sqs.unix_time_millis = unix_time_millis
    sqs.SQSBackend.is_message_valid_based_on_retention_period = (
        is_message_valid_based_on_retention_period
    )


SPEED_UPS: dict[str, Callable[[], None]] = {
    "transaction item rollback": _item_level_rollback,
    "partition query": _partition_query,
    "sqs without queue walks": _sqs_without_queue_walks,
}


# -- options ----------------------------------------------------------------------------------


@contextlib.contextmanager
def idempotent_transactions() -> Iterator[Counter[str]]:
    """While active, TransactWriteItems is idempotent by ClientRequestToken (10 minutes, as AWS).

    botocore sets a token per call and resends it when it retries: a retry of a transaction
    that committed, whose response was lost, succeeds without writing again. moto runs it
    again. Replays are counted in the yielded counter (`idempotent_replays`). Process-wide
    (every server and mock in this process); moto's behaviour is restored on exit.
    """
    ddb_responses: Any = importlib.import_module("moto.dynamodb.responses")
    from moto.core.responses import ActionResult

    stats: Counter[str] = Counter()
    committed: dict[str, float] = {}
    original_handler = ddb_responses.DynamoHandler.transact_write_items

    def handle_transact_write_items(self: Any) -> Any:
        token = self.body.get("ClientRequestToken")
        now = time.monotonic()
        if token and now - committed.get(token, float("-inf")) < 600:
            stats["idempotent_replays"] += 1
            return ActionResult({"ConsumedCapacity": [], "ItemCollectionMetrics": {}})
        result = original_handler(self)
        if token:
            committed[token] = now
        return result

    ddb_responses.DynamoHandler.transact_write_items = handle_transact_write_items
    try:
        yield stats
    finally:
        ddb_responses.DynamoHandler.transact_write_items = original_handler


@contextlib.contextmanager
def fast_moto() -> Iterator[Counter[str]]:
    """The chaos run's emulator: the speed-ups, and TransactWriteItems idempotent by token.

    Yields the counter of `idempotent_transactions` (`idempotent_replays`); the idempotency
    ends on exit (the speed-ups stay: they change nothing a client observes).
    """
    install_speed_ups()
    with idempotent_transactions() as stats:
        yield stats
