"""Count AWS requests and DynamoDB capacity units with botocore event hooks; price them.

A `RequestCounter` is attached to boto3 clients (`client.meta.events`):

* `before-parameter-build`: the operation's parameters, and the size of every item a write will
  touch *before* it (read from the in-process emulator's memory, not by another request);
* `before-send`: one HTTP attempt (so botocore retries would show as attempts > calls);
* `after-call`: the response (also for errors: a failed conditional write still costs), the
  size of each written item *after* it, and the read sizes.

Capacity follows DynamoDB's published pricing rules: a write costs one WRU per started KB of the larger of the item before and
after it (minimum 1, also when its condition fails); a transactional write item costs 2 WRU per
started KB; a strongly consistent read costs one RRU per started 4 KB (minimum 1), an eventually
consistent read half of that, a transactional read twice; a Query costs its returned items' total
size per started 4 KB. SQS bills each started 64 KB of a request's payload as one request.
"""

from __future__ import annotations

import base64
import math
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

KB = 1024
READ_UNIT = 4 * KB
SQS_CHUNK = 64 * KB

#: us-east-1 list prices in USD (free tiers ignored).
PRICES: dict[str, float] = {
    "dynamodb_wru": 0.625 / 1e6,  # on-demand, per write request unit
    "dynamodb_rru": 0.125 / 1e6,  # on-demand, per read request unit
    "sqs_request": 0.40 / 1e6,  # standard queue, per request (64 KB chunk)
    "lambda_request": 0.20 / 1e6,  # per invocation
    "lambda_gb_s_arm64": 0.0000133334,  # per GB-second, arm64 (template: Architectures arm64)
    "sns_publish": 0.50 / 1e6,  # standard topic, per publish
}
PRICE_NOTES = {
    "dynamodb_wru": "$0.625 per million WRU (on-demand)",
    "dynamodb_rru": "$0.125 per million RRU (on-demand)",
    "sqs_request": "$0.40 per million requests (standard; each 64 KB chunk is a request)",
    "lambda_request": "$0.20 per million invocations",
    "lambda_gb_s_arm64": "$0.0000133334 per GB-s (arm64)",
    "sns_publish": "$0.50 per million publishes",
}
LAMBDA_MEMORY_GB = 512 / 1024  # template.yaml Globals.Function.MemorySize

#: Assumed round trips from a Lambda to a service in its region, to price Lambda duration on AWS
#: rather than on the emulator: DynamoDB's single-item calls take "single-digit milliseconds"
#: (its own statement); a transaction commits in two phases; SQS calls are slower than DynamoDB's.
AWS_LATENCY_MS: dict[str, float] = {
    "DynamoDB": 5.0,
    "DynamoDB.TransactWriteItems": 10.0,
    "DynamoDB.Query": 10.0,
    "SQS": 10.0,
    "SNS": 10.0,
}


def aws_latency_s(service: str, operation: str) -> float:
    """The assumed AWS round trip of one call, in seconds."""
    ms = AWS_LATENCY_MS.get(f"{service}.{operation}", AWS_LATENCY_MS.get(service, 10.0))
    return ms / 1000


def attribute_size(value: Mapping[str, Any]) -> int:
    """Bytes of one DynamoDB-JSON value, as DynamoDB sizes it."""
    ((kind, inner),) = value.items()
    if kind == "S":
        return len(str(inner).encode())
    if kind == "N":
        digits = str(inner).lstrip("-").replace(".", "").strip("0") or "0"
        return (len(digits) + 1) // 2 + 1
    if kind == "B":
        raw = inner if isinstance(inner, bytes) else base64.b64decode(inner)
        return len(raw)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "L":
        return 3 + sum(1 + attribute_size(v) for v in inner)
    if kind == "M":
        return 3 + sum(len(k.encode()) + 1 + attribute_size(v) for k, v in inner.items())
    if kind == "SS":
        return sum(len(str(v).encode()) for v in inner)
    if kind == "NS":
        return sum(attribute_size({"N": v}) for v in inner)
    if kind == "BS":
        return sum(attribute_size({"B": v}) for v in inner)
    raise ValueError(f"unknown DynamoDB type {kind!r}")


def item_size(item: Mapping[str, Any]) -> int:
    """Bytes of a DynamoDB-JSON item: attribute names plus values."""
    return sum(len(name.encode()) + attribute_size(value) for name, value in item.items())


def write_units(size_before: int | None, size_after: int | None) -> int:
    """WRU of one (non-transactional) item write: started KB of the larger image, at least 1."""
    largest = max(size_before or 0, size_after or 0)
    return max(1, math.ceil(largest / KB))


def read_units(size: int, *, consistent: bool) -> float:
    """RRU of reading `size` bytes: started 4 KB, at least 1; half for eventual consistency."""
    units = max(1, math.ceil(size / READ_UNIT))
    return float(units) if consistent else units / 2


SizeOf = Callable[[str, Mapping[str, Any]], int | None]


def moto_item_sizes(account: str = "123456789012", region: str = "us-east-1") -> SizeOf:
    """Item sizes read from the in-process moto server's memory (no request, no cost)."""
    from moto.backends import get_backend

    def size_of(table: str, key: Mapping[str, Any]) -> int | None:
        backend = get_backend("dynamodb")[account][region]
        try:
            item = backend.get_item(table, dict(key))
        except Exception:
            return None
        if item is None:
            return None
        return item_size(item.to_json()["Attributes"])

    return size_of


@dataclass
class _Write:
    table: str
    key: dict[str, Any]
    transactional: bool
    before: int | None


@dataclass
class RequestCounter:
    """Counts calls by (service, operation) and by phase; DynamoDB WRU/RRU; SQS billed requests.

    `phase` names who is making the calls now (dispatcher, worker, esm); `paused` stops counting
    (set-up and checks are not part of the measured run).
    """

    size_of: SizeOf
    key_names: tuple[str, ...] = ("pk", "sk")
    phase: str = "other"
    paused: bool = False
    calls: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    attempts: Counter[str] = field(default_factory=Counter)
    wru: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))  # by phase
    rru: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))  # by phase
    wru_by_operation: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    sqs_billed: Counter[str] = field(default_factory=Counter)  # by phase
    conditional_failures: int = 0
    largest_item: dict[str, int] = field(default_factory=dict)
    hook_seconds: float = 0.0  # the counter's own time (subtracted from measured CPU time)

    def attach(self, client: Any) -> None:
        """Count every call `client` makes from now on."""
        events = client.meta.events
        events.register("before-parameter-build", self._before)
        events.register("before-send", self._attempt)
        events.register("after-call", self._after)

    # -- hooks ------------------------------------------------------------------------------

    def _before(
        self, params: Mapping[str, Any], model: Any, context: dict[str, Any], **_: Any
    ) -> None:
        if self.paused:
            return
        started = time.perf_counter()
        context["bench_params"] = params
        if model.service_model.service_id == "DynamoDB":
            context["bench_writes"] = [
                _Write(table, key, transactional, self.size_of(table, key))
                for table, key, transactional in self._written_keys(model.name, params)
            ]
        self.hook_seconds += time.perf_counter() - started

    def _attempt(self, request: Any = None, **_: Any) -> None:
        if self.paused or request is None:
            return
        host = str(getattr(request, "url", ""))
        self.attempts[host.split("//")[-1].split("/")[0]] += 1

    def _after(
        self,
        http_response: Any,
        parsed: Mapping[str, Any],
        model: Any,
        context: dict[str, Any],
        **_: Any,
    ) -> None:
        if self.paused or "bench_params" not in context:
            return
        started = time.perf_counter()
        service = model.service_model.service_id
        operation = model.name
        params = context["bench_params"]
        self.calls[(service, operation, self.phase)] += 1
        error = (parsed.get("Error") or {}).get("Code")
        if error in ("ConditionalCheckFailedException", "TransactionCanceledException"):
            self.conditional_failures += 1
        if service == "DynamoDB":
            self._dynamodb_cost(operation, params, parsed, context.get("bench_writes", []))
        elif service == "SQS":
            self.sqs_billed[self.phase] += self._sqs_requests(operation, params, parsed)
        self.hook_seconds += time.perf_counter() - started

    # -- DynamoDB ---------------------------------------------------------------------------

    def _key_of(self, item: Mapping[str, Any]) -> dict[str, Any]:
        return {k: item[k] for k in self.key_names if k in item}

    def _written_keys(
        self, operation: str, params: Mapping[str, Any]
    ) -> Iterable[tuple[str, dict[str, Any], bool]]:
        if operation == "PutItem":
            yield params["TableName"], self._key_of(params["Item"]), False
        elif operation in ("UpdateItem", "DeleteItem"):
            yield params["TableName"], dict(params["Key"]), False
        elif operation == "BatchWriteItem":
            for table, requests in params["RequestItems"].items():
                for request in requests:
                    if "PutRequest" in request:
                        yield table, self._key_of(request["PutRequest"]["Item"]), False
                    else:
                        yield table, dict(request["DeleteRequest"]["Key"]), False
        elif operation == "TransactWriteItems":
            for entry in params["TransactItems"]:
                ((_action, body),) = entry.items()
                key = body.get("Key") or self._key_of(body.get("Item", {}))
                yield body["TableName"], dict(key), True

    def _dynamodb_cost(
        self,
        operation: str,
        params: Mapping[str, Any],
        parsed: Mapping[str, Any],
        writes: list[_Write],
    ) -> None:
        for write in writes:
            after = self.size_of(write.table, write.key)
            units = write_units(write.before, after) * (2 if write.transactional else 1)
            self.wru[self.phase] += units
            self.wru_by_operation[operation] += units
            kind = "/".join(
                str(write.key.get(name, {}).get("S", "?")).split("#")[0] for name in self.key_names
            )
            self.largest_item[kind] = max(
                self.largest_item.get(kind, 0), write.before or 0, after or 0
            )
        consistent = bool(params.get("ConsistentRead")) and "IndexName" not in params
        if operation == "GetItem":
            size = item_size(parsed.get("Item") or {})
            self.rru[self.phase] += read_units(size, consistent=consistent)
        elif operation in ("Query", "Scan"):
            size = sum(item_size(i) for i in parsed.get("Items", []))
            self.rru[self.phase] += read_units(size, consistent=consistent)
        elif operation == "BatchGetItem":
            for items in (parsed.get("Responses") or {}).values():
                for item in items:
                    self.rru[self.phase] += read_units(item_size(item), consistent=consistent)
        elif operation == "TransactGetItems":
            for response in parsed.get("Responses", []):
                size = item_size(response.get("Item") or {})
                self.rru[self.phase] += 2 * read_units(size, consistent=True)

    # -- SQS --------------------------------------------------------------------------------

    @staticmethod
    def _sqs_requests(operation: str, params: Mapping[str, Any], parsed: Mapping[str, Any]) -> int:
        payload = 0
        if operation == "SendMessageBatch":
            payload = sum(len(e["MessageBody"].encode()) for e in params.get("Entries", []))
        elif operation == "SendMessage":
            payload = len(params["MessageBody"].encode())
        elif operation == "ReceiveMessage":
            payload = sum(len(m.get("Body", "").encode()) for m in parsed.get("Messages", []))
        return max(1, math.ceil(payload / SQS_CHUNK))

    # -- totals -----------------------------------------------------------------------------

    def requests(self, service: str, phase: str | None = None) -> int:
        """Calls to `service` (by service id), optionally in one phase."""
        return sum(
            n
            for (svc, _op, ph), n in self.calls.items()
            if svc == service and (phase is None or ph == phase)
        )

    def by_operation(self) -> dict[str, int]:
        """Calls by `Service.Operation`, over every phase."""
        out: Counter[str] = Counter()
        for (svc, op, _ph), n in self.calls.items():
            out[f"{svc}.{op}"] += n
        return dict(sorted(out.items()))

    def by_phase(self) -> dict[str, dict[str, int]]:
        """Calls by phase, then `Service.Operation`."""
        out: dict[str, Counter[str]] = {}
        for (svc, op, ph), n in self.calls.items():
            out.setdefault(ph, Counter())[f"{svc}.{op}"] += n
        return {ph: dict(sorted(c.items())) for ph, c in sorted(out.items())}
