"""The one retry policy for unprocessed batch items (`iotsched.adapters.dynamodb.batches`)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from iotsched.adapters.dynamodb import (
    batches,
)
from iotsched.adapters.dynamodb import (
    transact_outcomes as transact,
)
from iotsched.adapters.dynamodb.batches import (
    ATTEMPTS,
    UnprocessedItemsError,
    batch_get_items,
    batch_write_items,
)
from iotsched.ports.store_errors import StoreContendedError


def key(n: int) -> dict[str, Any]:
    return {"pk": {"S": f"K#{n}"}, "sk": {"S": "X"}}


class PartialDynamoDB:
    """Answers each batch request by processing all but the keys it is told to hold back
    (one list per call; then everything)."""

    def __init__(self, held_back: list[list[int]]) -> None:
        self.held_back = list(held_back)
        self.requests: list[dict[str, Any]] = []

    def _held(self) -> set[str]:
        return {key(n)["pk"]["S"] for n in (self.held_back.pop(0) if self.held_back else [])}

    def batch_get_item(self, *, RequestItems: dict[str, Any]) -> dict[str, Any]:
        self.requests.append(RequestItems)
        held = self._held()
        keys = RequestItems["t"]["Keys"]
        done = [dict(k, v={"S": "found"}) for k in keys if k["pk"]["S"] not in held]
        left = [k for k in keys if k["pk"]["S"] in held]
        out: dict[str, Any] = {"Responses": {"t": done}}
        if left:
            out["UnprocessedKeys"] = {"t": {"Keys": left}}  # as moto answers: the keys alone
        return out

    def batch_write_item(self, *, RequestItems: dict[str, Any]) -> dict[str, Any]:
        self.requests.append(RequestItems)
        held = self._held()
        left = [r for r in RequestItems["t"] if r["PutRequest"]["Item"]["pk"]["S"] in held]
        return {"UnprocessedItems": {"t": left}} if left else {"UnprocessedItems": {}}


@pytest.fixture
def pauses(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)
    return slept


def test_unprocessed_keys_are_sent_again_until_none_are_left(pauses: list[float]) -> None:
    client = PartialDynamoDB([[1, 2], [2]])  # unprocessed twice, then drained
    request = {"t": {"Keys": [key(n) for n in range(4)], "ConsistentRead": True}}
    found = batch_get_items(client, request)
    assert sorted(i["pk"]["S"] for i in found["t"]) == [f"K#{n}" for n in range(4)]
    sent = [[k["pk"]["S"] for k in r["t"]["Keys"]] for r in client.requests]
    assert sent == [["K#0", "K#1", "K#2", "K#3"], ["K#1", "K#2"], ["K#2"]]
    assert all(r["t"]["ConsistentRead"] for r in client.requests)  # kept on every retry
    assert len(pauses) == 2  # one pause between two requests, none after the last


def test_unprocessed_write_requests_are_sent_again(pauses: list[float]) -> None:
    client = PartialDynamoDB([[0], [0]])
    batch_write_items(client, {"t": [{"PutRequest": {"Item": key(n)}} for n in range(3)]})
    assert [len(r["t"]) for r in client.requests] == [3, 1, 1]
    assert len(pauses) == 2


def test_the_backoff_grows_with_jitter_and_is_capped(pauses: list[float]) -> None:
    client = PartialDynamoDB([[0]] * (ATTEMPTS - 1))  # drains on the last attempt
    batch_write_items(client, {"t": [{"PutRequest": {"Item": key(0)}}]})
    assert len(pauses) == ATTEMPTS - 1
    for attempt, pause in enumerate(pauses):
        ceiling = min(transact.BACKOFF_CAP_S, transact.BACKOFF_BASE_S * 2**attempt)
        assert ceiling / 2 <= pause <= ceiling
    assert pauses[-1] > pauses[0]


def test_items_that_never_drain_raise_a_clear_error(pauses: list[float]) -> None:
    client = PartialDynamoDB([[1, 3]] * 100)
    with pytest.raises(UnprocessedItemsError) as raised:
        batch_get_items(client, {"t": {"Keys": [key(n) for n in range(5)]}})
    assert len(client.requests) == ATTEMPTS  # bounded
    assert str(raised.value) == (
        f"BatchGetItem on t: 2 items still unprocessed after {batches.ATTEMPTS} attempts"
    )
    assert isinstance(raised.value, StoreContendedError)  # the store's callers catch it
    assert len(pauses) == ATTEMPTS - 1


def test_writes_that_never_drain_raise_a_clear_error(pauses: list[float]) -> None:
    client = PartialDynamoDB([[0]] * 100)
    with pytest.raises(UnprocessedItemsError, match="BatchWriteItem on t: 1 items still"):
        batch_write_items(client, {"t": [{"PutRequest": {"Item": key(n)}} for n in range(2)]})
    assert len(client.requests) == ATTEMPTS
