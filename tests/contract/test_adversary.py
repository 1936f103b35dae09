"""The adversarial DynamoDB itself: each fault in the shape botocore parses, DynamoDB's limits,
conflicts between concurrent transactions, and a schedule that depends only on its seed.

Clients here go through botocore as the services' do: an error is asserted on the ClientError
botocore raised (`exc.response`), never on raw bytes.
"""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Callable
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from iotsched.adversary.limits import (
    MAX_ITEM_BYTES,
    attribute_value_size,
    item_size,
)
from iotsched.adversary.middleware import Adversary
from iotsched.adversary.schedule import (
    AdversaryConfig,
    Fault,
)
from iotsched.local.emulator import EmulatorServer
from tests.support import REGION, create_table, reset_moto

pytestmark = pytest.mark.moto

TABLE = "adversary-test"


def _client(url: str, attempts: int = 10) -> Any:
    return boto3.session.Session(region_name=REGION).client(
        "dynamodb",
        endpoint_url=url,
        config=Config(retries={"mode": "standard", "total_max_attempts": attempts}),
    )


@pytest.fixture
def ddb(adversarial_emulator: EmulatorServer, adversary: Adversary) -> Any:
    """A client on the adversarial emulator (botocore's standard retries), a fresh table."""
    reset_moto(adversarial_emulator.url)
    client = _client(adversarial_emulator.url)
    create_table(client, TABLE)
    return client


def _key(pk: str) -> dict[str, Any]:
    return {"pk": {"S": pk}, "sk": {"S": "X"}}


def _put(pk: str, condition: str | None = None, **attrs: Any) -> dict[str, Any]:
    put: dict[str, Any] = {"TableName": TABLE, "Item": {**_key(pk), **attrs}}
    if condition:
        put["ConditionExpression"] = condition
    return {"Put": put}


def _cancelled(call: Callable[[], object]) -> list[dict[str, Any]]:
    with pytest.raises(ClientError) as caught:
        call()
    error = caught.value.response
    assert error["Error"]["Code"] == "TransactionCanceledException"
    reasons: list[dict[str, Any]] = error["CancellationReasons"]
    codes = ", ".join(r["Code"] for r in reasons)
    assert error["Error"]["Message"] == (
        f"Transaction cancelled, please refer cancellation reasons for specific reasons [{codes}]"
    )
    return reasons


def _exists(ddb: Any, pk: str) -> bool:
    return "Item" in ddb.get_item(TableName=TABLE, Key=_key(pk), ConsistentRead=True)


# -- cancellations ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "code", ["ThrottlingError", "TransactionConflict", "ProvisionedThroughputExceeded"]
)
def test_a_scripted_cancellation_names_its_code_at_the_matching_index(
    ddb: Any, adversary: Adversary, code: str
) -> None:
    adversary.script(Fault(op="TransactWriteItems", kind="cancel", code=code, pk_prefix="EFFECT#"))
    items = [_put("TASK#t"), _put("EFFECT#k"), _put("INST#i")]
    reasons = _cancelled(lambda: ddb.transact_write_items(TransactItems=items))
    assert [r["Code"] for r in reasons] == ["None", code, "None"]
    assert reasons[1]["Message"]
    assert not any(_exists(ddb, pk) for pk in ("TASK#t", "EFFECT#k", "INST#i"))
    assert adversary.stats()[f"cancelled_{code}"] == 1
    # Once: the same transaction then commits.
    ddb.transact_write_items(TransactItems=items)
    assert _exists(ddb, "EFFECT#k")


def test_conditional_check_failed_appears_only_where_the_condition_fails(
    ddb: Any, adversary: Adversary
) -> None:
    ddb.put_item(TableName=TABLE, Item=_key("TASK#t"))
    adversary.script(Fault(op="TransactWriteItems", kind="cancel", code="ThrottlingError"))
    items = [
        _put("EFFECT#k"),
        _put("TASK#t", "attribute_not_exists(pk)"),  # fails: the item exists
        _put("INST#i", "attribute_not_exists(pk)"),  # holds
    ]
    reasons = _cancelled(lambda: ddb.transact_write_items(TransactItems=items))
    assert [r["Code"] for r in reasons] == ["ThrottlingError", "ConditionalCheckFailed", "None"]
    assert reasons[1]["Message"] == "The conditional request failed"


def test_a_validation_error_can_be_scripted(ddb: Any, adversary: Adversary) -> None:
    adversary.script(Fault(op="TransactWriteItems", kind="cancel", code="ValidationError"))
    reasons = _cancelled(lambda: ddb.transact_write_items(TransactItems=[_put("A"), _put("B")]))
    assert [r["Code"] for r in reasons] == ["ValidationError", "None"]


# -- throttling and lost responses -----------------------------------------------------------


def test_a_throttled_write_is_retried_by_botocore(ddb: Any, adversary: Adversary) -> None:
    adversary.script(Fault(op="PutItem", kind="throttle", pk_prefix="A", times=2))
    ddb.put_item(TableName=TABLE, Item=_key("A"))
    assert _exists(ddb, "A")
    assert adversary.stats()["throttled"] == 2


def test_a_throttle_that_outlasts_the_retries_is_the_error_botocore_names(
    adversarial_emulator: EmulatorServer, ddb: Any, adversary: Adversary
) -> None:
    adversary.script(Fault(op="UpdateItem", kind="throttle", times=2))
    once = _client(adversarial_emulator.url, attempts=2)
    with pytest.raises(ClientError) as caught:
        once.update_item(
            TableName=TABLE,
            Key=_key("A"),
            UpdateExpression="SET v = :v",
            ExpressionAttributeValues={":v": {"N": "1"}},
        )
    assert caught.value.response["Error"]["Code"] == "ProvisionedThroughputExceededException"
    assert caught.value.response["Error"]["Message"].startswith("The level of configured")
    assert caught.value.response["ResponseMetadata"]["RetryAttempts"] == 1
    assert not _exists(ddb, "A")


def test_a_lost_response_is_retried_and_the_write_had_landed(
    ddb: Any, adversary: Adversary
) -> None:
    adversary.script(Fault(op="PutItem", kind="lose_response", pk_prefix="A"))
    # The retry of a conditional put that landed meets its own write.
    with pytest.raises(ClientError) as caught:
        ddb.put_item(
            TableName=TABLE, Item=_key("A"), ConditionExpression="attribute_not_exists(pk)"
        )
    assert caught.value.response["Error"]["Code"] == "ConditionalCheckFailedException"
    assert caught.value.response["ResponseMetadata"]["RetryAttempts"] == 1
    assert _exists(ddb, "A")
    assert adversary.stats()["lost_response"] == 1


def test_a_lost_transaction_response_with_a_token_is_answered_idempotently(
    ddb: Any, adversary: Adversary
) -> None:
    adversary.script(Fault(op="TransactWriteItems", kind="lose_response"))
    out = ddb.transact_write_items(
        TransactItems=[_put("A", "attribute_not_exists(pk)")], ClientRequestToken="tok-1"
    )
    assert out["ResponseMetadata"]["RetryAttempts"] == 1
    assert adversary.stats()["lost_response"] == 1
    assert adversary.stats()["idempotent_replay"] == 1
    with pytest.raises(ClientError) as caught:
        ddb.transact_write_items(TransactItems=[_put("B")], ClientRequestToken="tok-1")
    assert caught.value.response["Error"]["Code"] == "IdempotentParameterMismatchException"


# -- limits ----------------------------------------------------------------------------------


def test_item_size_follows_dynamodbs_rules() -> None:
    assert attribute_value_size({"S": "héllo"}) == 6
    assert attribute_value_size({"N": "12300"}) == 3  # 3 significant digits: 2 + 1
    assert attribute_value_size({"N": "0.001"}) == 2
    assert attribute_value_size({"B": "AAEC"}) == 3  # base64 of 3 bytes
    assert attribute_value_size({"BOOL": True}) == 1
    assert attribute_value_size({"NULL": True}) == 1
    assert attribute_value_size({"L": []}) == 3
    assert attribute_value_size({"L": [{"S": "ab"}, {"S": "c"}]}) == 3 + (1 + 2) + (1 + 1)
    assert attribute_value_size({"M": {"ab": {"S": "c"}}}) == 3 + 2 + 1 + 1
    assert attribute_value_size({"SS": ["a", "bc"]}) == 3
    assert item_size({"pk": {"S": "A"}, "sk": {"S": "X"}}) == 6


def _item_of_size(pk: str, size: int) -> dict[str, Any]:
    # Mostly one string, plus a list of 5,000 one-byte strings: 2 bytes each by DynamoDB's
    # rules, 1 by moto's, so that moto's own looser check (405,000 of its bytes) never decides.
    item = {**_key(pk), "l": {"L": [{"S": "x"}] * 5000}}
    item["p"] = {"S": "y" * (size - item_size(item) - 1)}
    assert item_size(item) == size
    return item


def test_a_put_over_400_kb_is_refused_as_dynamodb_refuses_it(
    ddb: Any, adversary: Adversary
) -> None:
    ddb.put_item(TableName=TABLE, Item=_item_of_size("A", MAX_ITEM_BYTES))
    with pytest.raises(ClientError) as caught:
        ddb.put_item(TableName=TABLE, Item=_item_of_size("B", MAX_ITEM_BYTES + 1))
    assert caught.value.response["Error"] == {
        "Code": "ValidationException",
        "Message": "Item size has exceeded the maximum allowed size",
    }
    assert _exists(ddb, "A") and not _exists(ddb, "B")


def _grow(pk: str, size: int) -> dict[str, Any]:
    return {
        "TableName": TABLE,
        "Key": _key(pk),
        "UpdateExpression": "SET p = :p",
        "ExpressionAttributeValues": {":p": {"S": "y" * (size - 1)}},
    }


def test_an_update_whose_post_image_is_too_large_is_refused_and_changes_nothing(
    ddb: Any, adversary: Adversary
) -> None:
    # moto measures an update's post-image loosely and refuses some valid ones (over 405,000
    # of its bytes): the mechanism is shown below its check, at a limit of 1,000 bytes.
    adversary.configure(AdversaryConfig(max_item_bytes=1000))
    ddb.put_item(TableName=TABLE, Item=_key("A"))  # 6 bytes
    ddb.update_item(**_grow("A", 994))  # exactly 1,000: fits
    with pytest.raises(ClientError) as caught:
        ddb.update_item(**_grow("A", 995))
    assert caught.value.response["Error"] == {
        "Code": "ValidationException",
        "Message": "Item size to update has exceeded the maximum allowed size",
    }
    item = ddb.get_item(TableName=TABLE, Key=_key("A"), ConsistentRead=True)["Item"]
    assert item_size(item) == 1000
    assert adversary.stats()["update_too_large"] == 1
    # An update that creates the item too large leaves no item.
    with pytest.raises(ClientError):
        ddb.update_item(**_grow("B", 995))
    assert not _exists(ddb, "B")


def test_a_transaction_whose_update_grows_too_large_is_cancelled_and_undone(
    ddb: Any, adversary: Adversary
) -> None:
    adversary.configure(AdversaryConfig(max_item_bytes=1000))
    ddb.put_item(TableName=TABLE, Item={**_key("A"), "p": {"S": "old"}})
    grow = _grow("A", 995)
    del grow["TableName"]
    update = {"Update": {"TableName": TABLE, **grow}}
    reasons = _cancelled(lambda: ddb.transact_write_items(TransactItems=[_put("B"), update]))
    assert [r["Code"] for r in reasons] == ["None", "ValidationError"]
    assert reasons[1]["Message"] == "Item size to update has exceeded the maximum allowed size"
    assert not _exists(ddb, "B")
    item = ddb.get_item(TableName=TABLE, Key=_key("A"), ConsistentRead=True)["Item"]
    assert item["p"] == {"S": "old"}


def test_a_transaction_put_over_400_kb_is_cancelled_with_a_validation_error(
    ddb: Any, adversary: Adversary
) -> None:
    big = {"Put": {"TableName": TABLE, "Item": _item_of_size("B", MAX_ITEM_BYTES + 1)}}
    reasons = _cancelled(lambda: ddb.transact_write_items(TransactItems=[_put("A"), big]))
    assert reasons == [
        {"Code": "None"},
        {"Code": "ValidationError", "Message": "Item size has exceeded the maximum allowed size"},
    ]


@pytest.mark.parametrize(
    ("items", "message"),
    [
        (
            lambda: [_put(f"A{i}") for i in range(101)],
            "Member must have length less than or equal to 100",
        ),
        (
            lambda: [
                {"Put": {"TableName": TABLE, "Item": _item_of_size(f"A{i}", 390_000)}}
                for i in range(11)
            ],
            "Transaction request cannot be larger than 4 MB",
        ),
        (
            lambda: [_put("A"), _put("A")],
            "Transaction request cannot include multiple operations on one item",
        ),
    ],
    ids=["101 actions", "over 4 MB", "one item twice"],
)
def test_transaction_limits(
    ddb: Any, adversary: Adversary, items: Callable[[], list[dict[str, Any]]], message: str
) -> None:
    with pytest.raises(ClientError) as caught:
        ddb.transact_write_items(TransactItems=items())
    assert caught.value.response["Error"]["Code"] == "ValidationException"
    assert message in caught.value.response["Error"]["Message"]
    assert not _exists(ddb, "A") and not _exists(ddb, "A0")


def test_a_100_action_transaction_is_accepted(ddb: Any, adversary: Adversary) -> None:
    ddb.transact_write_items(TransactItems=[_put(f"A{i}") for i in range(100)])
    assert _exists(ddb, "A99")


# -- update expressions DynamoDB refuses ------------------------------------------------------


def _attempts_item(ddb: Any) -> None:
    first = {"M": {"worker": {"S": "w1"}}}
    ddb.put_item(TableName=TABLE, Item={**_key("S"), "attempts": {"L": [first]}})


@pytest.mark.parametrize(
    ("expression", "names", "verdict"),
    [
        # appending with list_append while closing an entry of the same list
        (
            "SET attempts = list_append(attempts, :new), attempts[0].outcome = :x",
            {},
            "overlap",
        ),
        ("SET #a[0].outcome = :x REMOVE attempts", {"#a": "attempts"}, "overlap"),
        ("SET attempts[0] = :x, attempts[0].outcome = :x", {}, "overlap"),
        ("SET attempts[0] = :x, attempts.outcome = :x", {}, "conflict"),
    ],
)
def test_an_update_on_overlapping_document_paths_is_refused_as_dynamodb_refuses_it(
    ddb: Any, adversary: Adversary, expression: str, names: dict[str, str], verdict: str
) -> None:
    _attempts_item(ddb)
    values = {":new": {"L": [{"M": {"worker": {"S": "w2"}}}]}, ":x": {"S": "lost"}}
    values = {k: v for k, v in values.items() if k in expression}
    update: dict[str, Any] = {
        "TableName": TABLE,
        "Key": _key("S"),
        "UpdateExpression": expression,
        "ExpressionAttributeValues": values,
    }
    if names:
        update["ExpressionAttributeNames"] = names
    for call in (
        lambda: ddb.update_item(**update),
        lambda: ddb.transact_write_items(TransactItems=[{"Update": update}, _put("B")]),
    ):
        with pytest.raises(ClientError) as caught:
            call()
        error = caught.value.response["Error"]
        assert error["Code"] == "ValidationException"
        assert f"Two document paths {verdict} with each other" in error["Message"]
    item = ddb.get_item(TableName=TABLE, Key=_key("S"), ConsistentRead=True)["Item"]
    assert item["attempts"] == {"L": [{"M": {"worker": {"S": "w1"}}}]}
    assert not _exists(ddb, "B")
    assert adversary.stats()["update_paths_refused"] == 2


def test_closing_one_entry_and_setting_the_next_past_the_end_is_accepted(
    ddb: Any, adversary: Adversary
) -> None:
    # DynamoDB appends an element SET at an index past the list's end.
    _attempts_item(ddb)
    ddb.update_item(
        TableName=TABLE,
        Key=_key("S"),
        UpdateExpression="SET attempts[0].outcome = :x, attempts[0].#err = :x, attempts[1] = :new "
        "REMOVE #err",
        ExpressionAttributeNames={"#err": "error"},
        ExpressionAttributeValues={":x": {"S": "lost"}, ":new": {"M": {"worker": {"S": "w2"}}}},
    )
    item = ddb.get_item(TableName=TABLE, Key=_key("S"), ConsistentRead=True)["Item"]
    assert [a["M"]["worker"]["S"] for a in item["attempts"]["L"]] == ["w1", "w2"]
    assert item["attempts"]["L"][0]["M"]["outcome"] == {"S": "lost"}
    assert "update_paths_refused" not in adversary.stats()


# -- concurrency -----------------------------------------------------------------------------


def _wait(condition: Callable[[], bool], what: str, deadline_s: float = 30.0) -> None:
    finished = threading.Event()
    for _ in range(int(deadline_s * 100)):
        if condition():
            return
        finished.wait(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def test_two_concurrent_transactions_on_one_item_conflict(
    adversarial_emulator: EmulatorServer, ddb: Any, adversary: Adversary
) -> None:
    # The first holds its items in flight long enough for the second to meet them; the hold is
    # released by the test (it ends as soon as the second has been answered).
    adversary.configure(AdversaryConfig(hold_s=(30.0, 30.0)))
    first_error: list[BaseException] = []

    def first() -> None:
        try:
            ddb.transact_write_items(TransactItems=[_put("X"), _put("Y")])
        except BaseException as exc:  # surfaced by the assertion below
            first_error.append(exc)

    thread = threading.Thread(target=first)
    thread.start()
    try:
        _wait(lambda: adversary.in_flight() == 2, "the first transaction to hold its items")
        other = _client(adversarial_emulator.url, attempts=1)
        reasons = _cancelled(
            lambda: other.transact_write_items(TransactItems=[_put("Z"), _put("Y")])
        )
        assert reasons == [
            {"Code": "None"},
            {"Code": "TransactionConflict", "Message": "Transaction is ongoing for the item"},
        ]
        with pytest.raises(ClientError) as caught:
            other.put_item(TableName=TABLE, Item=_key("X"))
        assert caught.value.response["Error"]["Code"] == "TransactionConflictException"
        # A read sees the last committed state: nothing yet.
        assert not _exists(other, "X")
    finally:
        adversary.release_holds()
        thread.join(timeout=60)
    assert not first_error
    assert _exists(ddb, "X") and _exists(ddb, "Y") and not _exists(ddb, "Z")
    stats = adversary.stats()
    assert stats["transaction_conflict_in_flight"] == 1
    assert stats["single_write_conflict"] == 1


# -- the schedule ----------------------------------------------------------------------------


def _outcomes(url: str, adversary: Adversary, seed: int) -> tuple[list[str], dict[str, int]]:
    reset_moto(url)
    client = _client(url, attempts=1)
    create_table(client, TABLE)
    adversary.configure(
        AdversaryConfig(seed=seed, cancel_rate=0.3, throttle_rate=0.3, lose_rate=0.2)
    )
    seen = []
    for i in range(30):
        try:
            if i % 2:
                client.transact_write_items(TransactItems=[_put(f"T{i}"), _put(f"U{i}")])
            else:
                client.put_item(TableName=TABLE, Item=_key(f"P{i}"))
            seen.append("ok")
        except ClientError as exc:
            reasons = exc.response.get("CancellationReasons") or []
            seen.append(exc.response["Error"]["Code"] + str([r["Code"] for r in reasons]))
    return seen, adversary.stats()


def test_the_schedule_depends_only_on_the_seed_and_the_request_order(
    adversarial_emulator: EmulatorServer, adversary: Adversary
) -> None:
    url = adversarial_emulator.url
    first = _outcomes(url, adversary, seed=7)
    assert _outcomes(url, adversary, seed=7) == first
    assert _outcomes(url, adversary, seed=8)[0] != first[0]
    kinds = first[1]
    assert kinds["throttled"] and kinds["lost_response"]
    assert sum(v for k, v in kinds.items() if k.startswith("cancelled_")) > 0


def test_the_counts_are_served_at_adversary_stats(
    adversarial_emulator: EmulatorServer, ddb: Any, adversary: Adversary
) -> None:
    adversary.script(Fault(op="PutItem", kind="throttle"))
    ddb.put_item(TableName=TABLE, Item=_key("A"))
    with urllib.request.urlopen(f"{adversarial_emulator.url}/adversary/stats", timeout=10) as r:
        served = json.loads(r.read())
    assert served["throttled"] == 1
    assert served == adversary.stats()
