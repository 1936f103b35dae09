"""Conditional and transactional writes: lost-response tokens and transaction packing."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Mapping
from typing import Any, TypeVar

from botocore.exceptions import ClientError

from iotsched.adapters.dynamodb.transact_outcomes import Outcome
from iotsched.ports.store_errors import WriteRejectedError

_T = TypeVar("_T")


def _conditional_failure(exc: ClientError) -> bool:
    return exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException"


# Lost responses. botocore retries a request whose response was lost (a 5xx, a read timeout);
# if the first try had landed, the retry fails its own condition. Every conditional update
# therefore stamps the item with a token chosen before the call, and asks for the item back on
# failure: a failure that shows our own token is our write having landed, not a lost race.
#   try 1: UpdateItem(SET ..., write_token = T) ── lands, response lost
#   try 2: same request ── ConditionalCheckFailed + ALL_OLD(write_token = T) ──► success
def _token() -> str:
    return uuid.uuid4().hex


def _with_token(expression: str) -> str:
    if expression.startswith("SET "):
        return "SET write_token = :wtok, " + expression[4:]
    return "SET write_token = :wtok " + expression


def _rejected(outcome: Outcome, what: str) -> Exception:
    """The error for an INVALID outcome. A request DynamoDB refused as a whole keeps its own
    ClientError (callers read a ValidationException about size as "too large to store"); a
    cancellation's reasons become WriteRejectedError."""
    if not outcome.reasons and isinstance(outcome.cause, ClientError):
        return outcome.cause
    return WriteRejectedError(f"{what}: {outcome.describe()}")


def _landed(exc: ClientError, token: str) -> bool:
    old: Any = exc.response.get("Item") or {}
    return bool(old.get("write_token", {}).get("S") == token)


#: TransactWriteItems limits: 100 actions, 4 MB in all (a margin for the request's own fields).
TRANSACTION_ACTIONS = 100
TRANSACTION_BYTES = 3_500_000
#: Rounds of `_write_groups` before contended groups are given up (False: one by one).
TRANSACTION_ROUNDS = 5


def _action_key(action: Mapping[str, Any]) -> str:
    """The item an action touches (a transaction may touch each item once)."""
    ((kind, body),) = action.items()
    key = body["Item"] if kind == "Put" else body["Key"]
    return f"{key['pk']['S']}\n{key['sk']['S']}"


def _pack(pending: list[int], groups: list[list[Any]]) -> Iterator[list[int]]:
    """Cut the pending groups into transactions: at most 100 actions and ~3.5 MB each, no item
    twice in one (a group that would touch an item already in the transaction starts the next);
    a group never split. Groups are at most 100 actions (callers drop larger ones)."""
    chunk: list[int] = []
    actions = size = 0
    keys: set[str] = set()
    for n in pending:
        group_keys = [_action_key(a) for a in groups[n]]
        group_size = sum(len(json.dumps(a, separators=(",", ":"))) for a in groups[n])
        if chunk and (
            actions + len(groups[n]) > TRANSACTION_ACTIONS
            or size + group_size > TRANSACTION_BYTES
            or not keys.isdisjoint(group_keys)
        ):
            yield chunk
            chunk, actions, size, keys = [], 0, 0, set()
        chunk.append(n)
        actions += len(groups[n])
        size += group_size
        keys.update(group_keys)
    if chunk:
        yield chunk
