"""moto as the embedded emulator runs it: speed-ups that return exactly what moto returns,
always installed; the fair queuing of SQS's standard queues, always installed (moto serves a
standard queue in arrival order); and options that change what a client observes, never on
by default. docs/design.md, section 18, says why each exists.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

#: The patches installed in this process so far (see `install_speed_ups`).
_installed: set[str] = set()
_install_lock = threading.Lock()


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


def _module_list_once() -> None:
    """The server names moto's service modules once, not at every request.

    moto's server asks, for every request, whether the host names one of its service modules,
    by listing its package directory and testing each entry for a directory: some 150 file
    system calls a request, a third of an idle runtime's emulator time. The directory does not
    change while the process runs; the list is read once.
    """
    backends: Any = importlib.import_module("moto.backends")
    modules = tuple(backends.list_of_moto_modules())
    backends.list_of_moto_modules = lambda: modules


def _action_lookup_once() -> None:
    """Each response class's method names, and each action's method name, are found once.

    For every request moto turns the action's name into a method name and lists the response
    class's methods (`inspect.getmembers`) to see whether it has one: pure functions of the
    name and of the class, which never change while the process runs.
    """
    responses: Any = importlib.import_module("moto.core.responses")
    method_name = functools.lru_cache(maxsize=1024)(responses.camelcase_to_underscores)
    names_of = responses.method_names_from_class
    found: dict[type, frozenset[str]] = {}

    def method_names(clazz: type) -> frozenset[str]:
        names = found.get(clazz)
        if names is None:
            names = found[clazz] = frozenset(names_of(clazz))
        return names

    responses.camelcase_to_underscores = method_name
    responses.method_names_from_class = method_names


SPEED_UPS: dict[str, Callable[[], None]] = {
    "moto module list once": _module_list_once,
    "moto action lookup once": _action_lookup_once,
    "transaction item rollback": _item_level_rollback,
    "partition query": _partition_query,
    "sqs without queue walks": _sqs_without_queue_walks,
}


# -- SQS fair queues (always on) ----------------------------------------------------------------

#: A tenant (a MessageGroupId) holding more than this share of a standard queue's messages in
#: flight is a noisy neighbour: the quiet tenants' messages are received before its own.
NOISY_SHARE = 0.1
_fair = threading.Event()
_fair.set()
_fair_lock = threading.Lock()
_fair_installed = False


def install_fair_queues() -> None:
    """Serve standard queues as SQS's fair queues do (once per process).

    On AWS a standard queue whose messages carry a MessageGroupId detects noisy neighbours (a
    tenant with a large share of the messages in flight, or of the consumers' recent time) and
    returns the other tenants' messages first, then the noisy tenants' with the fewest in
    flight first; a message without a group is a tenant of its own. moto serves a standard
    queue in arrival order. Here a receive takes the queue's visible messages in this order:
    those of tenants holding at most `NOISY_SHARE` of the messages in flight (quiet) in arrival
    order, then the noisy ones' by their tenant's count in flight, each tenant's in arrival
    order. AWS's detection also asks a noisy tenant for at least 30 messages of its own in
    flight, or weighs the consumers' time: the local runtime's few workers never hold 30, and
    a share of the messages in flight is what its workers' time is spent on.
    """
    global _fair_installed
    with _fair_lock:
        if _fair_installed:
            return
        sqs: Any = importlib.import_module("moto.sqs.models")
        inside = threading.local()
        visible_of = sqs.Queue.messages.fget

        def messages(self: Any) -> list[Any]:
            visible: list[Any] = visible_of(self)
            if not getattr(inside, "receiving", 0) or self.fifo_queue or not _fair.is_set():
                return visible
            flying = [
                m for m in list(self._pending_messages) if not m.visible
            ]  # a copy: others receive
            counts = Counter(m.group_id for m in flying if m.group_id is not None)
            if not counts:
                return visible
            noisy = NOISY_SHARE * len(flying)

            def rank(message: Any) -> int:
                held = counts.get(message.group_id, 0) if message.group_id is not None else 0
                return held if held > noisy else 0

            return sorted(visible, key=rank)  # stable: arrival order within a rank

        receive = sqs.SQSBackend.receive_message

        def receive_message(self: Any, *args: Any, **kwargs: Any) -> Any:
            inside.receiving = getattr(inside, "receiving", 0) + 1
            try:
                return receive(self, *args, **kwargs)
            finally:
                inside.receiving -= 1

        sqs.Queue.messages = property(messages)
        sqs.SQSBackend.receive_message = receive_message
        _fair_installed = True


@contextlib.contextmanager
def arrival_order() -> Iterator[None]:
    """While active, standard queues are served in arrival order, as moto serves them (a
    benchmark's baseline without fair queuing). Process-wide."""
    _fair.clear()
    try:
        yield
    finally:
        _fair.set()


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
    install_fair_queues()
    with idempotent_transactions() as stats:
        yield stats
