"""DynamoDB's JSON protocol as the adversary reads and answers it.

The request targets it intercepts, one parsed write action (`WriteAction`), a buffered response
(`Response`), and the error and cancellation bodies DynamoDB sends, with the messages DynamoDB
puts on them, so botocore parses and retries them as it does DynamoDB's.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

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

ItemId = tuple[str, str]  # (table, canonical key JSON)
StartResponse = Callable[..., Any]


@dataclass
class Response:
    """A whole response: status line, headers (without Content-Length) and body."""

    status: str
    headers: list[tuple[str, str]]
    body: bytes

    @property
    def ok(self) -> bool:
        return self.status.startswith("200")


@dataclass
class WriteAction:
    """One write of a request: a transaction's action at `index`, or a single write (index 0)."""

    index: int
    kind: str  # Put, Update, Delete, ConditionCheck (or the single write's operation)
    body: dict[str, Any]
    table: str
    key: dict[str, Any] = field(default_factory=dict)

    @property
    def item_id(self) -> ItemId:
        return (self.table, json.dumps(self.key, sort_keys=True))

    def pk(self) -> str:
        value = self.key.get("pk", {})
        return str(value.get("S", "")) if isinstance(value, dict) else ""


def digest(op: str, raw: bytes) -> str:
    """A request's identity: the same operation with the same body is the same request."""
    return hashlib.sha256(op.encode() + b"\0" + raw).hexdigest()


def json_response(status: int, payload: Mapping[str, Any]) -> Response:
    reason = {200: "OK", 400: "Bad Request", 500: "Internal Server Error"}[status]
    return Response(
        f"{status} {reason}",
        [("Content-Type", "application/x-amz-json-1.0"), ("x-amzn-RequestId", _request_id())],
        json.dumps(payload).encode(),
    )


def error(code: str, message: str, *, lower: bool = False) -> Response:
    """DynamoDB's error `code` (without its prefix) with `message`."""
    # DynamoDB spells the message key `message` on some errors and `Message` on others;
    # botocore reads either.
    return json_response(
        400, {"__type": ERROR_PREFIX + code, ("message" if lower else "Message"): message}
    )


def cancellation(reasons: list[dict[str, Any]]) -> Response:
    """A TransactionCanceledException with one reason per action, in order."""
    codes = ", ".join(str(r["Code"]) for r in reasons)
    return json_response(
        400,
        {
            "__type": ERROR_PREFIX + "TransactionCanceledException",
            "Message": "Transaction cancelled, please refer cancellation reasons for specific "
            f"reasons [{codes}]",
            "CancellationReasons": reasons,
        },
    )


def lost_response() -> Response:
    """The HTTP 500 a write whose response was lost gets (botocore retries it)."""
    return json_response(
        500, {"__type": "com.amazon.coral.service#InternalFailure", "message": "Internal error"}
    )


def _request_id() -> str:
    return "".join(random.choices("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", k=52))
