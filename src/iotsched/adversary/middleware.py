"""An adversarial DynamoDB: a WSGI middleware in front of moto that behaves as DynamoDB does.

`Adversary` stands before moto's app (called under moto's lock) and, for DynamoDB writes:
cancels transactions with one `CancellationReasons` entry per action (the injected code at its
index, `ConditionalCheckFailed` where moto finds the condition really fails); throttles single
writes, sometimes several times in a row; loses the responses of writes that landed (HTTP 500,
botocore retries); enforces DynamoDB's limits and update-path rules (`limits`), measuring an
update's post-image under moto's lock and reverting it when too large; answers a retried
transaction with the same `ClientRequestToken` idempotently; and holds a transaction's items in
flight before it commits, so a concurrent write to one gets `TransactionConflict`.

What to inject comes from the `FaultSchedule`; every injected fault is counted per kind
(`stats()`, or `GET /adversary/stats` on the server).
"""

from __future__ import annotations

import io
import json
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from iotsched.adversary.limits import (
    MAX_TRANSACTION_ACTIONS,
    MAX_TRANSACTION_BYTES,
    item_size,
    update_paths_error,
)
from iotsched.adversary.protocol import (
    REASON_MESSAGES,
    TARGET_PREFIX,
    WRITES,
    ItemId,
    Response,
    StartResponse,
    WriteAction,
    cancellation,
    digest,
    error,
    json_response,
    lost_response,
)
from iotsched.adversary.schedule import AdversaryConfig, Fault, FaultSchedule


class Adversary:
    """The WSGI app that stands before moto's app; `lock` is the lock moto is called under."""

    def __init__(
        self, app: Callable[..., Iterable[bytes]], lock: threading.Lock, config: AdversaryConfig
    ) -> None:
        self._app = app
        self._moto_lock = lock
        self._state = threading.Lock()  # guards everything below, and the schedule
        self._tally: Counter[str] = Counter()
        self._schedule = FaultSchedule(config, self._tally)
        self._in_flight: Counter[ItemId] = Counter()
        self._tokens: dict[str, tuple[str, Response]] = {}
        self._key_schemas: dict[str, list[str]] = {}
        self._gate = threading.Event()  # set: holds end at once (tests)

    # -- what tests and the chaos run see --

    @property
    def config(self) -> AdversaryConfig:
        """The schedule's rates and the limits now in force."""
        return self._schedule.config

    def stats(self) -> dict[str, int]:
        """How many faults of each kind were injected (and requests seen, `requests`)."""
        with self._state:
            return dict(sorted(self._tally.items()))

    def script(self, *faults: Fault) -> None:
        """Add scripted faults; they apply before the random schedule, in order."""
        with self._state:
            self._schedule.add(faults)

    def configure(self, config: AdversaryConfig | None = None) -> None:
        """Start over: a new (or the same) config, its seed's sequence from the start, no
        counts, scripts, bursts or tokens."""
        with self._state:
            self._schedule.restart(config or self._schedule.config)
            self._tally.clear()
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
            return self._reply(start_response, json_response(200, self.stats()))
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
            self._tally["requests"] += 1
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
    ) -> Response:
        table = str(body.get("TableName", ""))
        key = body.get("Key") or self._key_of(environ, table, body.get("Item") or {})
        action = WriteAction(0, op, body, table, key)
        refused = _refused_update(action)
        if refused is not None:
            self._count("update_paths_refused")
            return refused
        fingerprint = digest(op, raw)
        with self._state:
            if self._in_flight[action.item_id]:
                self._tally["single_write_conflict"] += 1
                return error(
                    "TransactionConflictException",
                    "Transaction is ongoing for the item",
                )
            throttle = self._schedule.throttle(op, fingerprint, [action])
            lose = self._schedule.lose(op, [action])
        if throttle:
            return error(
                "ProvisionedThroughputExceededException",
                REASON_MESSAGES["ProvisionedThroughputExceeded"],
                lower=True,
            )
        if op == "PutItem" and item_size(body.get("Item") or {}) > self.config.max_item_bytes:
            self._count("item_too_large")
            return error("ValidationException", "Item size has exceeded the maximum allowed size")
        with self._moto_lock:
            if op == "UpdateItem":
                old = self._get(environ, table, key)
                response = self._call(environ, op, raw)
                if response.ok:
                    new = self._get(environ, table, key)
                    if new is not None and item_size(new) > self.config.max_item_bytes:
                        self._restore(environ, table, key, old)
                        self._count("update_too_large")
                        return error(
                            "ValidationException",
                            "Item size to update has exceeded the maximum allowed size",
                        )
            else:
                response = self._call(environ, op, raw)
        return self._maybe_lose(response, lose)

    def _batch_write(self, environ: dict[str, Any], raw: bytes) -> Response:
        with self._state:
            lose = self._schedule.lose("BatchWriteItem", [])
        return self._maybe_lose(self._forward(environ, "BatchWriteItem", raw), lose)

    def _transact(self, environ: dict[str, Any], raw: bytes, body: dict[str, Any]) -> Response:
        items = body.get("TransactItems") or []
        if len(items) > MAX_TRANSACTION_ACTIONS:
            self._count("transaction_too_many_actions")
            return error(
                "ValidationException",
                "1 validation error detected: Value at 'transactItems' failed to satisfy "
                f"constraint: Member must have length less than or equal to "
                f"{MAX_TRANSACTION_ACTIONS}",
            )
        if len(raw) > MAX_TRANSACTION_BYTES:
            self._count("transaction_too_large")
            return error("ValidationException", "Transaction request cannot be larger than 4 MB")
        actions = self._actions(environ, items)
        for action in actions:
            refused = _refused_update(action)
            if refused is not None:
                self._count("update_paths_refused")
                return refused
        if len({a.item_id for a in actions}) < len(actions):
            self._count("transaction_duplicate_item")
            return error(
                "ValidationException",
                "Transaction request cannot include multiple operations on one item",
            )
        token = body.get("ClientRequestToken")
        fingerprint = digest("TransactWriteItems", raw)
        with self._state:
            if token and token in self._tokens:
                seen_digest, seen = self._tokens[token]
                if seen_digest != fingerprint:
                    return error(
                        "IdempotentParameterMismatchException",
                        "The request uses the same client token as a previous, but non-identical"
                        " request.",
                    )
                self._tally["idempotent_replay"] += 1
                return seen
            busy = [a.index for a in actions if self._in_flight[a.item_id]]
            if busy:
                self._tally["transaction_conflict_in_flight"] += 1
            else:
                for a in actions:
                    self._in_flight[a.item_id] += 1
                injected = self._schedule.cancel(actions)
                lose = self._schedule.lose("TransactWriteItems", actions)
                hold = self._schedule.hold_seconds()
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
                        return cancellation(
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
                    self._tokens[token] = (fingerprint, response)
            return self._maybe_lose(response, lose)
        finally:
            with self._state:
                for a in actions:
                    self._in_flight[a.item_id] -= 1
                    if not self._in_flight[a.item_id]:
                        del self._in_flight[a.item_id]

    # -- responses --

    def _cancelled(
        self,
        environ: dict[str, Any],
        actions: list[WriteAction],
        codes: dict[int, str],
        *,
        messages: Mapping[str, str] | None = None,
        with_conditions: bool,
    ) -> Response:
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
        return cancellation(reasons)

    def _failed_conditions(
        self, environ: dict[str, Any], actions: list[WriteAction]
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

    def _maybe_lose(self, response: Response, lose: bool) -> Response:
        if not (lose and response.ok):
            return response
        self._count("lost_response")
        return lost_response()

    # -- moto --

    def _forward(self, environ: dict[str, Any], op: str, raw: bytes) -> Response:
        with self._moto_lock:
            return self._call(environ, op, raw)

    def _call(self, environ: dict[str, Any], op: str, raw: bytes) -> Response:
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
        return Response(captured["status"], headers, body)

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

    def _actions(self, environ: dict[str, Any], items: list[dict[str, Any]]) -> list[WriteAction]:
        actions = []
        for index, entry in enumerate(items):
            ((kind, body),) = entry.items()
            table = str(body.get("TableName", ""))
            key = body.get("Key") or self._key_of(environ, table, body.get("Item") or {})
            actions.append(WriteAction(index, kind, body, table, key))
        return actions

    def _count(self, kind: str) -> None:
        with self._state:
            self._tally[kind] += 1

    @staticmethod
    def _reply(start_response: StartResponse, response: Response) -> list[bytes]:
        start_response(
            response.status, [*response.headers, ("Content-Length", str(len(response.body)))]
        )
        return [response.body]


def _refused_update(action: WriteAction) -> Response | None:
    """DynamoDB's ValidationException for an update action it would refuse (`update_paths_error`),
    which moto accepts; None for any other action."""
    expression = action.body.get("UpdateExpression")
    if action.kind not in ("Update", "UpdateItem") or not isinstance(expression, str):
        return None
    refusal = update_paths_error(expression, action.body.get("ExpressionAttributeNames") or {})
    return None if refusal is None else error("ValidationException", refusal)
