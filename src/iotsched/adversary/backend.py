"""An adversarial DynamoDB: a WSGI middleware in front of moto that behaves as DynamoDB does.

moto serves one request at a time and is kinder than DynamoDB: it never cancels a transaction for
a conflict or for throttling, never throttles a write, never loses a response, and counts item
sizes its own way. `Adversary` sits between the clients and moto's app and adds, for DynamoDB
requests (`X-Amz-Target: DynamoDB_20120810.<Op>`):

* transactions cancelled with `TransactionCanceledException` and one `CancellationReasons` entry
  per action (the injected code at its index; `ConditionalCheckFailed` where moto finds the
  condition really fails; `None` elsewhere), on a seeded schedule or by an explicit `Fault`;
* single writes throttled (`ProvisionedThroughputExceededException`, which botocore retries),
  sometimes the same request several times in a row;
* responses of writes that landed lost: the write is applied, the client gets HTTP 500
  (`InternalServerError`) and botocore retries the same request;
* DynamoDB's limits: 400 KB items by DynamoDB's size rules (an update's post-image is measured
  under moto's lock and reverted when too large), 100 actions and 4 MB per transaction, one
  item at most once per transaction; a retried transaction with the same `ClientRequestToken`
  is answered idempotently;
* concurrency between processes: a transaction holds its items in flight for a short random
  time before it commits, outside moto's lock; another transaction touching one of them is
  cancelled with `TransactionConflict` at that index, a single write to one gets
  `TransactionConflictException`.
* update expressions DynamoDB refuses and moto lets through: two actions on overlapping
  document paths (`a` and `a[0].b`, `#n` and `#n.x`, names resolved) or conflicting ones
  (`a[0]` and `a.b`), refused with DynamoDB's `ValidationException` before moto sees them.

Every injected fault is counted per kind (`stats()`, or `GET /adversary/stats` on the server).
Decisions come from one `random.Random(seed)` drawn in request order: given the seed and the
order of requests, the schedule is the same.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import math
import random
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

#: DynamoDB's limits.
MAX_ITEM_BYTES = 400 * 1024
MAX_TRANSACTION_ACTIONS = 100
MAX_TRANSACTION_BYTES = 4 * 1024 * 1024

TARGET_PREFIX = "DynamoDB_20120810."
ERROR_PREFIX = "com.amazonaws.dynamodb.v20120810#"
SINGLE_WRITES = ("PutItem", "UpdateItem", "DeleteItem")
WRITES = (*SINGLE_WRITES, "TransactWriteItems", "BatchWriteItem")

#: The messages DynamoDB puts on each cancellation reason code.
REASON_MESSAGES = {
    "ConditionalCheckFailed": "The conditional request failed",
    "TransactionConflict": "Transaction is ongoing for the item",
    "ThrottlingError": "Throughput exceeds the current capacity for one or more global "
    "secondary indexes. DynamoDB is automatically scaling your index so please try again "
    "shortly.",
    "ProvisionedThroughputExceeded": "The level of configured provisioned throughput for the "
    "table was exceeded. Consider increasing your provisioning level with the UpdateTable API.",
    "ValidationError": "Item size to update has exceeded the maximum allowed size",
}
#: The codes the random schedule draws from (ValidationError only by script or by the limits:
#: a random one would fail a valid request for good, which DynamoDB never does).
RANDOM_CANCEL_CODES = ("TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded")

ItemId = tuple[str, str]  # (table, canonical key JSON)
StartResponse = Callable[..., Any]


@dataclass(frozen=True)
class AdversaryConfig:
    """Rates of the seeded schedule (probabilities per request) and the in-flight hold.

    Attributes:
        seed: the schedule's seed.
        cancel_rate: a TransactWriteItems is cancelled with one of `cancel_codes`.
        cancel_codes: the codes a random cancellation draws from.
        throttle_rate: a single write is throttled (ProvisionedThroughputExceededException).
        burst_rate: a throttle repeats the same request 2..`max_burst` times in a row.
        max_burst: the longest burst (keep under botocore's 10 attempts).
        lose_rate: a write that landed has its response replaced by HTTP 500.
        hold_s: (min, max) seconds a transaction holds its items in flight before it commits.
        max_item_bytes: the item size limit (DynamoDB's 400 KB; lower only to test the
            mechanism below moto's own, looser, check).
    """

    seed: int = 0
    cancel_rate: float = 0.0
    cancel_codes: tuple[str, ...] = RANDOM_CANCEL_CODES
    throttle_rate: float = 0.0
    burst_rate: float = 0.0
    max_burst: int = 4
    lose_rate: float = 0.0
    hold_s: tuple[float, float] = (0.0, 0.0)
    max_item_bytes: int = MAX_ITEM_BYTES

    @classmethod
    def moderate(cls, seed: int = 0) -> AdversaryConfig:
        """A fault rate a run can live with while every kind still shows up."""
        return cls(
            seed=seed,
            cancel_rate=0.15,
            throttle_rate=0.1,
            burst_rate=0.2,
            max_burst=3,
            lose_rate=0.05,
            hold_s=(0.0, 0.02),
        )


@dataclass
class Fault:
    """One scripted fault: the next `times` requests of `op` that touch an item whose `pk`
    starts with `pk_prefix` get `kind` ("cancel" with `code` at that action's index,
    "throttle", or "lose_response")."""

    op: str
    kind: str
    code: str = "ThrottlingError"
    pk_prefix: str = ""
    times: int = 1


@dataclass
class _Response:
    status: str
    headers: list[tuple[str, str]]
    body: bytes

    @property
    def ok(self) -> bool:
        return self.status.startswith("200")


@dataclass
class _Action:
    index: int
    kind: str  # Put, Update, Delete, ConditionCheck
    body: dict[str, Any]
    table: str
    key: dict[str, Any] = field(default_factory=dict)

    @property
    def item_id(self) -> ItemId:
        return (self.table, json.dumps(self.key, sort_keys=True))

    def pk(self) -> str:
        value = self.key.get("pk", {})
        return str(value.get("S", "")) if isinstance(value, dict) else ""


# -- DynamoDB's item size --------------------------------------------------------------------


def attribute_value_size(value: Mapping[str, Any]) -> int:
    """The size of one typed value, by DynamoDB's rules."""
    ((kind, inner),) = value.items()
    if kind == "S":
        return len(str(inner).encode())
    if kind == "N":
        return _number_size(str(inner))
    if kind == "B":
        return len(base64.b64decode(inner)) if isinstance(inner, str) else len(inner)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(len(str(v).encode()) for v in inner)
    if kind == "NS":
        return sum(_number_size(str(v)) for v in inner)
    if kind == "BS":
        return sum(len(base64.b64decode(v)) if isinstance(v, str) else len(v) for v in inner)
    if kind == "L":
        return 3 + sum(1 + attribute_value_size(v) for v in inner)
    if kind == "M":
        return 3 + sum(len(k.encode()) + 1 + attribute_value_size(v) for k, v in inner.items())
    raise ValueError(f"unknown attribute type {kind!r}")


def item_size(item: Mapping[str, Any]) -> int:
    """An item's size: each attribute's name (UTF-8) plus its value."""
    return sum(len(name.encode()) + attribute_value_size(v) for name, v in item.items())


def _number_size(text: str) -> int:
    # One byte per two significant digits (leading and trailing zeros trimmed), plus one; one
    # more for a negative number.
    try:
        number = Decimal(text)
    except InvalidOperation:
        return len(text)
    if number.is_zero():
        return 1
    digits = len(number.normalize().as_tuple().digits)
    return math.ceil(digits / 2) + 1 + (1 if number < 0 else 0)


# -- DynamoDB's update expression paths --------------------------------------------------------

_CLAUSE = re.compile(r"(?<![#:\w])(SET|REMOVE|ADD|DELETE)(?!\w)", re.IGNORECASE)
_PATH = re.compile(r"\s*(#?\w+)((?:\[\d+\]|\.#?\w+)*)")
_ELEMENT = re.compile(r"\[(\d+)\]|\.(#?\w+)")
PathElement = tuple[str, str | int]  # ("key", name) or ("index", n)


def _split_top(text: str) -> list[str]:
    """`text` split at the commas outside parentheses (a function's arguments stay together)."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p for p in (part.strip() for part in parts) if p]


def _resolve(name: str, names: Mapping[str, str]) -> str:
    return names.get(name, name) if name.startswith("#") else name


def update_paths(expression: str, names: Mapping[str, str]) -> list[list[PathElement]]:
    """The document path each action of an update expression writes, names resolved."""
    cuts = list(_CLAUSE.finditer(expression))
    paths = []
    for n, cut in enumerate(cuts):
        end = cuts[n + 1].start() if n + 1 < len(cuts) else len(expression)
        for action in _split_top(expression[cut.end() : end]):
            match = _PATH.match(action)
            if match is None:
                continue  # malformed: moto answers it
            path: list[PathElement] = [("key", _resolve(match.group(1), names))]
            for index, key in _ELEMENT.findall(match.group(2)):
                path.append(("index", int(index)) if index else ("key", _resolve(key, names)))
            paths.append(path)
    return paths


def _path_text(path: list[PathElement]) -> str:
    return ", ".join(f"[{v}]" if kind == "index" else str(v) for kind, v in path)


def update_paths_error(expression: str, names: Mapping[str, str]) -> str | None:
    """DynamoDB's refusal of an update expression two of whose actions write overlapping
    document paths (one a prefix of the other) or conflicting ones (one indexes a list where
    the other names a map key); None if it has none."""
    paths = update_paths(expression, names)
    for n, one in enumerate(paths):
        for two in paths[n + 1 :]:
            common = 0
            while common < min(len(one), len(two)) and one[common] == two[common]:
                common += 1
            if common == min(len(one), len(two)):
                verdict = "overlap with each other; must remove or rewrite one of these paths"
            elif common > 0 and one[common][0] != two[common][0]:
                verdict = "conflict with each other; must remove or rewrite one of these paths"
            else:
                continue
            return (
                f"Invalid UpdateExpression: Two document paths {verdict}; "
                f"path one: [{_path_text(one)}], path two: [{_path_text(two)}]"
            )
    return None


# -- the middleware --------------------------------------------------------------------------


class Adversary:
    """The WSGI app that stands before moto's app; `lock` is the lock moto is called under."""

    def __init__(
        self, app: Callable[..., Iterable[bytes]], lock: threading.Lock, config: AdversaryConfig
    ) -> None:
        self._app = app
        self._moto_lock = lock
        self.config = config
        self._state = threading.Lock()
        self._random = random.Random(config.seed)
        self._in_flight: Counter[ItemId] = Counter()
        self._bursts: dict[str, int] = {}
        self._script: list[Fault] = []
        self._tokens: dict[str, tuple[str, _Response]] = {}
        self._key_schemas: dict[str, list[str]] = {}
        self._counts: Counter[str] = Counter()
        self._gate = threading.Event()  # set: holds end at once (tests)

    # -- what tests and the chaos run see --

    def stats(self) -> dict[str, int]:
        """How many faults of each kind were injected (and requests seen, `requests`)."""
        with self._state:
            return dict(sorted(self._counts.items()))

    def script(self, *faults: Fault) -> None:
        """Add scripted faults; they apply before the random schedule, in order."""
        with self._state:
            self._script.extend(faults)

    def configure(self, config: AdversaryConfig | None = None) -> None:
        """Start over: a new (or the same) config, its seed's sequence from the start, no
        counts, scripts, bursts or tokens."""
        with self._state:
            self.config = config or self.config
            self._random = random.Random(self.config.seed)
            self._counts.clear()
            self._script.clear()
            self._bursts.clear()
            self._tokens.clear()
            self._key_schemas.clear()
            self._gate.clear()

    def release_holds(self) -> None:
        """End every in-flight hold now, and make later ones end at once (until `configure`)."""
        self._gate.set()

    def in_flight(self) -> int:
        """How many items transactions hold in flight now."""
        with self._state:
            return sum(self._in_flight.values())

    # -- WSGI --

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> list[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/adversary/stats":
            return self._reply(start_response, _json_response(200, self.stats()))
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        if not target.startswith(TARGET_PREFIX):
            if path.startswith("/moto-api/reset"):
                with self._state:
                    self._key_schemas.clear()
                    self._tokens.clear()
            with self._moto_lock:
                return list(self._app(environ, start_response))
        op = target[len(TARGET_PREFIX) :]
        length = int(environ.get("CONTENT_LENGTH") or 0)
        raw = environ["wsgi.input"].read(length) if length else b""
        with self._state:
            self._counts["requests"] += 1
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = None
        if not isinstance(body, dict) or op not in WRITES:
            return self._reply(start_response, self._forward(environ, op, raw))
        if op == "TransactWriteItems":
            response = self._transact(environ, raw, body)
        elif op == "BatchWriteItem":
            response = self._batch_write(environ, raw)
        else:
            response = self._single_write(environ, op, raw, body)
        return self._reply(start_response, response)

    # -- the operations --

    def _single_write(
        self, environ: dict[str, Any], op: str, raw: bytes, body: dict[str, Any]
    ) -> _Response:
        table = str(body.get("TableName", ""))
        key = body.get("Key") or self._key_of(environ, table, body.get("Item") or {})
        action = _Action(0, op, body, table, key)
        refused = _refused_update(action)
        if refused is not None:
            self._count("update_paths_refused")
            return refused
        digest = _digest(op, raw)
        with self._state:
            if self._in_flight[action.item_id]:
                self._counts["single_write_conflict"] += 1
                return _error(
                    "TransactionConflictException",
                    "Transaction is ongoing for the item",
                )
            throttle = self._throttle_decision(op, digest, [action])
            lose = self._lose_decision(op, [action])
        if throttle:
            return _error(
                "ProvisionedThroughputExceededException",
                REASON_MESSAGES["ProvisionedThroughputExceeded"],
                lower=True,
            )
        if op == "PutItem" and item_size(body.get("Item") or {}) > self.config.max_item_bytes:
            self._count("item_too_large")
            return _error("ValidationException", "Item size has exceeded the maximum allowed size")
        with self._moto_lock:
            if op == "UpdateItem":
                old = self._get(environ, table, key)
                response = self._call(environ, op, raw)
                if response.ok:
                    new = self._get(environ, table, key)
                    if new is not None and item_size(new) > self.config.max_item_bytes:
                        self._restore(environ, table, key, old)
                        self._count("update_too_large")
                        return _error(
                            "ValidationException",
                            "Item size to update has exceeded the maximum allowed size",
                        )
            else:
                response = self._call(environ, op, raw)
        return self._maybe_lose(response, lose)

    def _batch_write(self, environ: dict[str, Any], raw: bytes) -> _Response:
        with self._state:
            lose = self._lose_decision("BatchWriteItem", [])
        return self._maybe_lose(self._forward(environ, "BatchWriteItem", raw), lose)

    def _transact(self, environ: dict[str, Any], raw: bytes, body: dict[str, Any]) -> _Response:
        items = body.get("TransactItems") or []
        if len(items) > MAX_TRANSACTION_ACTIONS:
            self._count("transaction_too_many_actions")
            return _error(
                "ValidationException",
                "1 validation error detected: Value at 'transactItems' failed to satisfy "
                f"constraint: Member must have length less than or equal to "
                f"{MAX_TRANSACTION_ACTIONS}",
            )
        if len(raw) > MAX_TRANSACTION_BYTES:
            self._count("transaction_too_large")
            return _error("ValidationException", "Transaction request cannot be larger than 4 MB")
        actions = self._actions(environ, items)
        for action in actions:
            refused = _refused_update(action)
            if refused is not None:
                self._count("update_paths_refused")
                return refused
        if len({a.item_id for a in actions}) < len(actions):
            self._count("transaction_duplicate_item")
            return _error(
                "ValidationException",
                "Transaction request cannot include multiple operations on one item",
            )
        token = body.get("ClientRequestToken")
        digest = _digest("TransactWriteItems", raw)
        with self._state:
            if token and token in self._tokens:
                seen_digest, seen = self._tokens[token]
                if seen_digest != digest:
                    return _error(
                        "IdempotentParameterMismatchException",
                        "The request uses the same client token as a previous, but non-identical"
                        " request.",
                    )
                self._counts["idempotent_replay"] += 1
                return seen
            busy = [a.index for a in actions if self._in_flight[a.item_id]]
            if busy:
                self._counts["transaction_conflict_in_flight"] += 1
            else:
                for a in actions:
                    self._in_flight[a.item_id] += 1
                injected = self._cancel_decision(actions)
                lose = self._lose_decision("TransactWriteItems", actions)
                low, high = self.config.hold_s
                hold = self._random.uniform(low, high) if high > 0 else 0.0
        if busy:
            return self._cancelled(
                environ, actions, dict.fromkeys(busy, "TransactionConflict"), with_conditions=True
            )
        try:
            if hold:
                self._gate.wait(hold)
            if injected is not None:
                return self._cancelled(environ, actions, dict([injected]), with_conditions=True)
            oversized = [
                a.index
                for a in actions
                if a.kind == "Put"
                and item_size(a.body.get("Item") or {}) > self.config.max_item_bytes
            ]
            if oversized:
                self._count("item_too_large")
                return self._cancelled(
                    environ,
                    actions,
                    dict.fromkeys(oversized, "ValidationError"),
                    messages={"ValidationError": "Item size has exceeded the maximum allowed size"},
                    with_conditions=True,
                )
            with self._moto_lock:
                updates = [a for a in actions if a.kind == "Update"]
                # Old images to put back if an update's post-image is too large.
                before = (
                    {a.index: self._get(environ, a.table, a.key) for a in actions}
                    if updates
                    else {}
                )
                response = self._call(environ, "TransactWriteItems", raw)
                if response.ok and updates:
                    too_large = [
                        a.index
                        for a in updates
                        if item_size(self._get(environ, a.table, a.key) or {})
                        > self.config.max_item_bytes
                    ]
                    if too_large:
                        for a in actions:
                            if a.kind != "ConditionCheck":
                                self._restore(environ, a.table, a.key, before[a.index])
                        self._count("update_too_large")
                        return _cancellation(
                            [
                                {
                                    "Code": "ValidationError",
                                    "Message": REASON_MESSAGES["ValidationError"],
                                }
                                if a.index in too_large
                                else {"Code": "None"}
                                for a in actions
                            ]
                        )
            if response.ok and token:
                with self._state:
                    self._tokens[token] = (digest, response)
            return self._maybe_lose(response, lose)
        finally:
            with self._state:
                for a in actions:
                    self._in_flight[a.item_id] -= 1
                    if not self._in_flight[a.item_id]:
                        del self._in_flight[a.item_id]

    # -- decisions (under self._state) --

    def _take_script(self, op: str, kinds: tuple[str, ...], actions: list[_Action]) -> Any:
        for fault in self._script:
            if fault.op != op or fault.kind not in kinds:
                continue
            match = [a for a in actions if a.pk().startswith(fault.pk_prefix)]
            if actions and not match:
                continue
            if not actions and fault.pk_prefix:
                continue
            fault.times -= 1
            if fault.times <= 0:
                self._script.remove(fault)
            return fault, (match[0].index if match else 0)
        return None

    def _throttle_decision(self, op: str, digest: str, actions: list[_Action]) -> bool:
        if self._bursts.get(digest, 0) > 0:
            self._bursts[digest] -= 1
            self._counts["throttled"] += 1
            return True
        scripted = self._take_script(op, ("throttle",), actions)
        if scripted is not None:
            self._counts["throttled"] += 1
            self._counts["throttled_by_script"] += 1
            return True
        if self._random.random() >= self.config.throttle_rate:
            return False
        self._counts["throttled"] += 1
        if self.config.max_burst > 1 and self._random.random() < self.config.burst_rate:
            self._bursts[digest] = self._random.randint(2, self.config.max_burst) - 1
            self._counts["throttle_bursts"] += 1
        return True

    def _lose_decision(self, op: str, actions: list[_Action]) -> bool:
        if self._take_script(op, ("lose_response",), actions) is not None:
            return True
        return self._random.random() < self.config.lose_rate

    def _cancel_decision(self, actions: list[_Action]) -> tuple[int, str] | None:
        scripted = self._take_script("TransactWriteItems", ("cancel",), actions)
        if scripted is not None:
            fault, index = scripted
            return index, fault.code
        if not actions or self._random.random() >= self.config.cancel_rate:
            return None
        index = self._random.randrange(len(actions))
        return index, self._random.choice(self.config.cancel_codes)

    # -- responses --

    def _cancelled(
        self,
        environ: dict[str, Any],
        actions: list[_Action],
        codes: dict[int, str],
        *,
        messages: Mapping[str, str] | None = None,
        with_conditions: bool,
    ) -> _Response:
        for code in codes.values():
            self._count(f"cancelled_{code}")
        failed = self._failed_conditions(environ, actions) if with_conditions else {}
        reasons: list[dict[str, Any]] = []
        for a in actions:
            if a.index in codes:
                code = codes[a.index]
                message = (messages or {}).get(code) or REASON_MESSAGES[code]
                reasons.append({"Code": code, "Message": message})
            elif a.index in failed:
                reasons.append(failed[a.index])
            else:
                reasons.append({"Code": "None"})
        return _cancellation(reasons)

    def _failed_conditions(
        self, environ: dict[str, Any], actions: list[_Action]
    ) -> dict[int, dict[str, Any]]:
        """The actions whose condition fails now, as moto decides: one read-only transaction of
        ConditionChecks (it writes nothing whether it passes or not)."""
        checks: list[tuple[int, dict[str, Any]]] = []
        for a in actions:
            condition = a.body.get("ConditionExpression")
            if not condition:
                continue
            used = set(re.findall(r"[:#][A-Za-z0-9_]+", condition))
            check: dict[str, Any] = {
                "TableName": a.table,
                "Key": a.key,
                "ConditionExpression": condition,
            }
            names = {
                k: v for k, v in (a.body.get("ExpressionAttributeNames") or {}).items() if k in used
            }
            values = {
                k: v
                for k, v in (a.body.get("ExpressionAttributeValues") or {}).items()
                if k in used
            }
            if names:
                check["ExpressionAttributeNames"] = names
            if values:
                check["ExpressionAttributeValues"] = values
            if a.body.get("ReturnValuesOnConditionCheckFailure"):
                check["ReturnValuesOnConditionCheckFailure"] = a.body[
                    "ReturnValuesOnConditionCheckFailure"
                ]
            checks.append((a.index, {"ConditionCheck": check}))
        if not checks:
            return {}
        request = json.dumps({"TransactItems": [c for _, c in checks]}).encode()
        with self._moto_lock:
            response = self._call(environ, "TransactWriteItems", request)
        if response.ok:
            return {}
        try:
            reasons = json.loads(response.body).get("CancellationReasons") or []
        except ValueError:
            return {}
        return {
            index: reason
            for (index, _), reason in zip(checks, reasons, strict=False)
            if reason.get("Code") == "ConditionalCheckFailed"
        }

    def _maybe_lose(self, response: _Response, lose: bool) -> _Response:
        if not (lose and response.ok):
            return response
        self._count("lost_response")
        return _json_response(
            500, {"__type": "com.amazon.coral.service#InternalFailure", "message": "Internal error"}
        )

    # -- moto --

    def _forward(self, environ: dict[str, Any], op: str, raw: bytes) -> _Response:
        with self._moto_lock:
            return self._call(environ, op, raw)

    def _call(self, environ: dict[str, Any], op: str, raw: bytes) -> _Response:
        """One request to moto (the caller holds moto's lock)."""
        env = {k: v for k, v in environ.items() if not k.startswith("werkzeug.")}
        env["wsgi.input"] = io.BytesIO(raw)
        env["CONTENT_LENGTH"] = str(len(raw))
        env["HTTP_X_AMZ_TARGET"] = TARGET_PREFIX + op
        captured: dict[str, Any] = {}

        def start_response(
            status: str, headers: list[tuple[str, str]], exc_info: Any = None
        ) -> Any:
            captured["status"], captured["headers"] = status, list(headers)
            return lambda data: None

        chunks = self._app(env, start_response)
        try:
            body = b"".join(chunks)
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()
        headers = [(k, v) for k, v in captured["headers"] if k.lower() != "content-length"]
        return _Response(captured["status"], headers, body)

    def _get(
        self, environ: dict[str, Any], table: str, key: dict[str, Any]
    ) -> dict[str, Any] | None:
        request = json.dumps({"TableName": table, "Key": key, "ConsistentRead": True}).encode()
        response = self._call(environ, "GetItem", request)
        if not response.ok:
            return None
        item = json.loads(response.body).get("Item")
        return item if isinstance(item, dict) else None

    def _restore(
        self, environ: dict[str, Any], table: str, key: dict[str, Any], old: dict[str, Any] | None
    ) -> None:
        if old is None:
            self._call(environ, "DeleteItem", json.dumps({"TableName": table, "Key": key}).encode())
        else:
            self._call(environ, "PutItem", json.dumps({"TableName": table, "Item": old}).encode())

    def _key_names(self, environ: dict[str, Any], table: str) -> list[str]:
        with self._state:
            names = self._key_schemas.get(table)
        if names is not None:
            return names
        with self._moto_lock:
            response = self._call(
                environ, "DescribeTable", json.dumps({"TableName": table}).encode()
            )
        if not response.ok:
            return ["pk", "sk"]
        schema = json.loads(response.body)["Table"]["KeySchema"]
        names = [str(k["AttributeName"]) for k in schema]
        with self._state:
            self._key_schemas[table] = names
        return names

    def _key_of(
        self, environ: dict[str, Any], table: str, item: Mapping[str, Any]
    ) -> dict[str, Any]:
        return {n: item[n] for n in self._key_names(environ, table) if n in item}

    def _actions(self, environ: dict[str, Any], items: list[dict[str, Any]]) -> list[_Action]:
        actions = []
        for index, entry in enumerate(items):
            ((kind, body),) = entry.items()
            table = str(body.get("TableName", ""))
            key = body.get("Key") or self._key_of(environ, table, body.get("Item") or {})
            actions.append(_Action(index, kind, body, table, key))
        return actions

    def _count(self, kind: str) -> None:
        with self._state:
            self._counts[kind] += 1

    @staticmethod
    def _reply(start_response: StartResponse, response: _Response) -> list[bytes]:
        start_response(
            response.status, [*response.headers, ("Content-Length", str(len(response.body)))]
        )
        return [response.body]


def _refused_update(action: _Action) -> _Response | None:
    """DynamoDB's ValidationException for an update action it would refuse (`update_paths_error`),
    which moto accepts; None for any other action."""
    expression = action.body.get("UpdateExpression")
    if action.kind not in ("Update", "UpdateItem") or not isinstance(expression, str):
        return None
    error = update_paths_error(expression, action.body.get("ExpressionAttributeNames") or {})
    return None if error is None else _error("ValidationException", error)


def _digest(op: str, raw: bytes) -> str:
    return hashlib.sha256(op.encode() + b"\0" + raw).hexdigest()


def _json_response(status: int, payload: Mapping[str, Any]) -> _Response:
    reason = {200: "OK", 400: "Bad Request", 500: "Internal Server Error"}[status]
    return _Response(
        f"{status} {reason}",
        [("Content-Type", "application/x-amz-json-1.0"), ("x-amzn-RequestId", _request_id())],
        json.dumps(payload).encode(),
    )


def _error(code: str, message: str, *, lower: bool = False) -> _Response:
    # DynamoDB spells the message key `message` on some errors and `Message` on others;
    # botocore reads either.
    return _json_response(
        400, {"__type": ERROR_PREFIX + code, ("message" if lower else "Message"): message}
    )


def _cancellation(reasons: list[dict[str, Any]]) -> _Response:
    codes = ", ".join(str(r["Code"]) for r in reasons)
    return _json_response(
        400,
        {
            "__type": ERROR_PREFIX + "TransactionCanceledException",
            "Message": "Transaction cancelled, please refer cancellation reasons for specific "
            f"reasons [{codes}]",
            "CancellationReasons": reasons,
        },
    )


def _request_id() -> str:
    return "".join(random.choices("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", k=52))
