"""DynamoDBStore's batched writes against a scripted stand-in for the DynamoDB client.

moto applies one request at a time, so its transactions never conflict and it never throttles;
this is where the adapter's reading of CancellationReasons is exercised: which groups lost,
which go again, how transactions are cut. The contract suite (tests/contract/test_batch_writes)
covers what really lands in a table.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any, cast

import pytest
from botocore.exceptions import ClientError

from iotsched.adapters.dynamodb import (
    DynamoDBStore,
    transactions,
)
from iotsched.adapters.dynamodb.transactions import TRANSACTION_ROUNDS
from iotsched.core.attempt_record import Attempt
from iotsched.core.shard_record import ShardStatus
from iotsched.ports.shards import (
    CompletionVerdict,
    ShardCompletion,
)
from iotsched.ports.tasks import TaskAdvance
from tests.support import T0, instance

M = timedelta(minutes=1)


def cancelled(*codes: str) -> ClientError:
    """A TransactionCanceledException as botocore raises it, one reason per action."""
    return ClientError(
        {
            "Error": {"Code": "TransactionCanceledException", "Message": "cancelled"},
            "CancellationReasons": [{"Code": c} for c in codes],
        },
        "TransactWriteItems",
    )


def failed(code: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": code}}, "TransactWriteItems")


class ScriptedDynamoDB:
    """Answers TransactWriteItems from a script: per call, None (committed) or an error."""

    def __init__(self, script: list[ClientError | None]) -> None:
        self.script = script
        self.calls: list[list[str]] = []  # the instance or task ids of each call's actions
        self.tokens: list[str] = []

    def transact_write_items(self, *, TransactItems: list[Any], ClientRequestToken: str) -> Any:
        assert len(TransactItems) <= 100
        self.calls.append([_name(a) for a in TransactItems])
        self.tokens.append(ClientRequestToken)
        outcome = self.script.pop(0) if self.script else None
        if outcome is not None:
            raise outcome
        return {}

    def get_item(self, **_: Any) -> Any:
        """The read of an instance's shard parts: none stored (its records on `INST#<id>`)."""
        return {}

    def batch_get_item(self, *, RequestItems: dict[str, Any]) -> Any:
        """Every item asked for exists; a counter is at zero (a counter's refusal stands)."""
        ((table, request),) = RequestItems.items()
        items = [
            {**k, "remaining": {"N": "0"}, "failed_shards": {"N": "0"}} for k in request["Keys"]
        ]
        return {"Responses": {table: items}}


def _name(action: dict[str, Any]) -> str:
    ((kind, body),) = action.items()
    key = body["Item"] if kind == "Put" else body["Key"]
    return f"{key['pk']['S'].removeprefix('TASK#')}/{key['sk']['S']}"


@pytest.fixture(autouse=True)
def _no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(time, "sleep", lambda _s: None)


def store_on(client: ScriptedDynamoDB) -> DynamoDBStore:
    return DynamoDBStore(cast("Any", client), "table")


def counted(*names: str) -> list[str]:
    """Claim actions: each open instance's put, then its counter's."""
    return [n for name in names for n in (name, f"INST#{name.replace('/INST#', '@')}/COUNT")]


def test_a_lost_claim_is_dropped_and_the_others_go_again_without_it() -> None:
    client = ScriptedDynamoDB([cancelled("None", "None", "ConditionalCheckFailed", *["None"] * 5)])
    groups = [
        [instance("a")],
        [instance("b"), instance("b", T0 + M)],  # its first action failed: the group lost
        [instance("c")],
    ]
    assert store_on(client).claim_instances(groups) == [True, False, True]
    first = ["a", "b", "b", "c"], ["12:00", "12:00", "12:01", "12:00"]
    assert client.calls == [
        counted(*[f"{t}/INST#2026-11-29T{hm}Z" for t, hm in zip(*first, strict=True)]),
        counted("a/INST#2026-11-29T12:00Z", "c/INST#2026-11-29T12:00Z"),
    ]
    assert len(set(client.tokens)) == 2  # a new round is a new request, not a retry of one


def test_conflicts_and_throttling_are_retried_until_they_pass() -> None:
    client = ScriptedDynamoDB(
        [
            cancelled("TransactionConflict", "None", "None", "None"),
            cancelled("None", "ThrottlingError", "None", "None"),
            None,
        ]
    )
    assert store_on(client).claim_instances([[instance("a")], [instance("b")]]) == [True, True]
    assert len(client.calls) == 3
    assert client.calls[-1] == counted("a/INST#2026-11-29T12:00Z", "b/INST#2026-11-29T12:00Z")


def test_a_group_contended_every_round_is_given_up_not_guessed() -> None:
    client = ScriptedDynamoDB([cancelled("TransactionConflict", "None")] * TRANSACTION_ROUNDS)
    assert store_on(client).claim_instances([[instance("a")]]) == [False]
    assert len(client.calls) == TRANSACTION_ROUNDS


def test_cancellation_without_reasons_drops_the_transaction_for_the_caller_to_decide() -> None:
    client = ScriptedDynamoDB([cancelled()])
    assert store_on(client).claim_instances([[instance("a")], [instance("b")]]) == [False, False]
    assert len(client.calls) == 1


def test_a_request_dynamodb_refuses_as_invalid_falls_back_to_one_by_one() -> None:
    client = ScriptedDynamoDB([failed("ValidationException")])
    assert store_on(client).mark_running(["a@2026-11-29T12:00Z"]) == [False]


def test_other_errors_are_raised() -> None:
    client = ScriptedDynamoDB([failed("InternalServerError")])
    with pytest.raises(ClientError, match="InternalServerError"):
        store_on(client).advance_tasks([TaskAdvance("a", T0, T0 + M, T0)])


def test_transactions_hold_at_most_100_actions_and_never_split_a_group() -> None:
    client = ScriptedDynamoDB([])
    groups = [[instance(f"t{n:02d}", T0 + k * M) for k in range(3)] for n in range(40)]
    assert store_on(client).claim_instances(groups) == [True] * 40
    # an open instance is two puts (its counter's): 16 groups of 6, 16, then 8
    assert [len(c) for c in client.calls] == [96, 96, 48]


def test_an_item_twice_goes_into_separate_transactions() -> None:
    client = ScriptedDynamoDB([None, cancelled("ConditionalCheckFailed")])
    ids = ["a@2026-11-29T12:00Z", "b@2026-11-29T12:00Z", "a@2026-11-29T12:00Z"]
    assert store_on(client).mark_running(ids) == [True, True, False]
    assert client.calls == [
        ["a/INST#2026-11-29T12:00Z", "b/INST#2026-11-29T12:00Z"],
        ["a/INST#2026-11-29T12:00Z"],
    ]


def test_transactions_stay_under_the_request_size_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    big = instance("big", shards=[{"blob": "x" * 290_000}])  # a plan that still fits an item
    client = ScriptedDynamoDB([])
    monkeypatch.setattr(transactions, "TRANSACTION_BYTES", 1_000_000)
    groups = [
        [big.model_copy(update={"instance_id": f"big{n}@2026-11-29T12:00Z"})] for n in range(5)
    ]
    assert store_on(client).claim_instances(groups) == [True] * 5
    assert [len(c) for c in client.calls] == [6, 4]  # three instances, then two, counters with


# -- a worker batch's completions (complete_shards) ----------------------------------------------


def completions(*shards: tuple[str, int]) -> list[ShardCompletion]:
    """Succeeded completions of attempt 1 of each (instance task id, shard index)."""
    return [
        ShardCompletion(
            instance_id=f"{task_id}@2026-11-29T12:00Z",
            index=index,
            status=ShardStatus.SUCCEEDED,
            attempt=Attempt(number=1, worker="w", started_at=T0, outcome="succeeded"),
        )
        for task_id, index in shards
    ]


C, S_ = CompletionVerdict.COMMITTED, CompletionVerdict.STALE
U = CompletionVerdict.UNWRITTEN
BATCH = (("a", 0), ("b", 0), ("a", 1))  # actions: a/0, b/0, a/1, counter a (2), counter b (1)


def counters(call: list[str]) -> list[str]:
    return [name for name in call if name.endswith("/COUNT")]


def test_a_batch_is_one_transaction_with_one_decrement_per_instance() -> None:
    client = ScriptedDynamoDB([None])
    assert store_on(client).complete_shards(completions(*BATCH)) == [C, C, C]
    (call,) = client.calls
    assert len(call) == 5
    assert counters(call) == ["INST#a@2026-11-29T12:00Z/COUNT", "INST#b@2026-11-29T12:00Z/COUNT"]


def test_a_zombie_is_stale_and_the_rest_go_again_with_the_count_redone() -> None:
    client = ScriptedDynamoDB(
        [cancelled("None", "None", "ConditionalCheckFailed", "None", "None"), None]
    )
    store = store_on(client)
    decrements: list[str] = []
    original = store._decrement

    def spy(instance_id: str, *, failed: int, count: int = 1, **expiry: Any) -> Any:
        decrements.append(f"{instance_id.split('@')[0]}-{count}")
        return original(instance_id, failed=failed, count=count, **expiry)

    store._decrement = spy  # type: ignore[method-assign]
    assert store.complete_shards(completions(*BATCH)) == [C, C, S_]
    assert [len(c) for c in client.calls] == [5, 4]
    assert decrements == ["a-2", "b-1", "a-1", "b-1"]


def test_conflicts_on_a_counter_are_retried_until_they_pass() -> None:
    client = ScriptedDynamoDB(
        [
            cancelled("None", "None", "None", "TransactionConflict", "None"),
            cancelled("None", "None", "None", "None", "ThrottlingError"),
            None,
        ]
    )
    assert store_on(client).complete_shards(completions(*BATCH)) == [C, C, C]
    assert len(client.calls) == 3
    assert len(set(client.tokens)) == 3  # each round is a new request


def test_a_counter_refusing_alone_makes_its_shards_stale() -> None:
    client = ScriptedDynamoDB([cancelled("None", "None", "None", "ConditionalCheckFailed", "None")])
    assert store_on(client).complete_shards(completions(*BATCH)) == [S_, C, S_]
    assert [len(c) for c in client.calls] == [5, 2]


def test_a_counter_refused_with_a_stale_shard_of_its_own_goes_again() -> None:
    client = ScriptedDynamoDB(
        [cancelled("ConditionalCheckFailed", "None", "None", "ConditionalCheckFailed", "None")]
    )
    assert store_on(client).complete_shards(completions(*BATCH)) == [S_, C, C]
    assert [len(c) for c in client.calls] == [5, 4]


def test_completions_contended_every_round_are_left_unwritten() -> None:
    conflict = cancelled("None", "None", "None", "TransactionConflict", "None")
    rounds = DynamoDBStore.COMPLETION_ROUNDS
    client = ScriptedDynamoDB([conflict] * rounds)
    assert store_on(client).complete_shards(completions(*BATCH)) == [U, U, U]
    assert len(client.calls) == rounds


def test_a_busy_counter_is_waited_for_longer_than_five_rounds() -> None:
    # A hot instance's counter: every worker of a wide instance decrements it.
    conflict = cancelled("None", "None", "None", "TransactionConflict", "None")
    client = ScriptedDynamoDB([conflict] * 9 + [None])
    assert store_on(client).complete_shards(completions(*BATCH)) == [C, C, C]
    assert len(client.calls) == 10


def test_contended_completions_stop_at_the_time_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [0.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])

    def sleep(seconds: float) -> None:
        assert 0 < seconds <= 0.5  # capped
        now[0] += 2.0  # a slow round trip besides: the budget runs out in a few rounds

    monkeypatch.setattr(time, "sleep", sleep)
    conflict = cancelled("None", "None", "None", "TransactionConflict", "None")
    client = ScriptedDynamoDB([conflict] * 50)
    assert store_on(client).complete_shards(completions(*BATCH)) == [U, U, U]
    assert len(client.calls) == 4  # sent at 0, 2, 4, 6 s; the 5 s budget is spent


def test_completions_with_an_error_of_their_own_or_no_reasons_are_left_unwritten() -> None:
    client = ScriptedDynamoDB([cancelled("None", "ValidationError", "None", "None", "None"), None])
    assert store_on(client).complete_shards(completions(*BATCH)) == [C, U, C]
    assert [len(c) for c in client.calls] == [5, 3]  # a/0, a/1 and a's counter
    client = ScriptedDynamoDB([cancelled()])
    assert store_on(client).complete_shards(completions(*BATCH)) == [U, U, U]


def test_other_errors_of_a_completion_batch_are_raised() -> None:
    client = ScriptedDynamoDB([failed("InternalServerError")])
    with pytest.raises(ClientError):
        store_on(client).complete_shards(completions(*BATCH))


def test_many_completions_are_cut_into_transactions_of_at_most_100_actions() -> None:
    client = ScriptedDynamoDB([])
    many = completions(*((f"t{n % 60}", n) for n in range(120)))
    assert store_on(client).complete_shards(many) == [C] * 120
    assert [len(c) for c in client.calls] == [100, 100, 120 - 100 + 20]
