"""The project's emulator (`iotsched.local.emulator`): its speed-ups change nothing a client
observes, its options do what they say and end when they end, and it serves this machine's
programs only, never a web page of another origin or site."""

from __future__ import annotations

import contextlib
import json
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, ReadTimeoutError

from iotsched.local.emulator import EmulatorServer
from iotsched.local.moto_patches import SPEED_UPS, arrival_order, fast_moto, installed_speed_ups
from tests.support import AwsResources

pytestmark = pytest.mark.moto


def _item(pk: str, sk: str, **attrs: str) -> dict[str, Any]:
    return {"pk": {"S": pk}, "sk": {"S": sk}, **{k: {"S": v} for k, v in attrs.items()}}


def test_every_emulator_server_has_every_speed_up(moto_server: str) -> None:
    from moto.dynamodb.models import DynamoDBBackend
    from moto.dynamodb.models.table import Table
    from moto.sqs.models import SQSBackend

    assert installed_speed_ups() == frozenset(SPEED_UPS)
    patched = (
        DynamoDBBackend.transact_write_items,
        Table.query,
        Table.all_items,
        SQSBackend.send_message,
        SQSBackend.receive_message,
        SQSBackend.is_message_valid_based_on_retention_period,
    )
    assert {fn.__module__ for fn in patched} == {"iotsched.local.moto_patches"}


def test_the_module_list_read_once_is_moto_s_own(moto_server: str) -> None:
    import moto
    from moto import backends

    # the server's answer for a host naming a service module is unchanged
    package = Path(moto.__file__).parent
    listed = sorted(e.name for e in package.iterdir() if e.is_dir() and not e.name.startswith("__"))
    assert list(backends.list_of_moto_modules()) == listed
    assert {"dynamodb", "sqs", "sns", "s3"} <= set(listed)
    assert backends.list_of_moto_modules.__module__ == "iotsched.local.moto_patches"


def test_the_action_lookup_found_once_answers_as_moto_s_own(moto_server: str) -> None:
    from moto.core import responses, utils
    from moto.dynamodb.responses import DynamoHandler
    from moto.sqs.responses import SQSResponse

    assert responses.method_names_from_class is not utils.method_names_from_class
    for clazz in (DynamoHandler, SQSResponse):
        names = responses.method_names_from_class(clazz)
        assert set(names) == set(utils.method_names_from_class(clazz))
        assert responses.method_names_from_class(clazz) is names  # listed once
    for action in ("TransactWriteItems", "ReceiveMessage", "ChangeMessageVisibilityBatch"):
        assert responses.camelcase_to_underscores(action) == utils.camelcase_to_underscores(action)


def test_a_cancelled_transaction_leaves_every_item_as_it_was(aws_resources: AwsResources) -> None:
    ddb = aws_resources.client("dynamodb")
    table = aws_resources.table
    ddb.put_item(TableName=table, Item=_item("A", "1", v="before"))
    ddb.put_item(TableName=table, Item=_item("B", "1", v="there"))
    with pytest.raises(ClientError, match="TransactionCanceled"):
        ddb.transact_write_items(
            TransactItems=[
                {"Put": {"TableName": table, "Item": _item("A", "1", v="after")}},
                {"Put": {"TableName": table, "Item": _item("C", "1", v="new")}},
                {
                    "Put": {
                        "TableName": table,
                        "Item": _item("B", "1", v="again"),
                        "ConditionExpression": "attribute_not_exists(pk)",
                    }
                },
            ]
        )
    items = ddb.scan(TableName=table)["Items"]
    assert sorted((i["pk"]["S"], i["v"]["S"]) for i in items) == [("A", "before"), ("B", "there")]


def test_a_query_returns_its_partition_in_key_order_and_pages(aws_resources: AwsResources) -> None:
    ddb = aws_resources.client("dynamodb")
    table = aws_resources.table
    for pk in ("P", "Q"):
        for sk in ("3", "1", "2"):
            ddb.put_item(TableName=table, Item=_item(pk, sk, date_pk=f"D{sk}"))

    def query(**kwargs: Any) -> list[tuple[str, str]]:
        found = ddb.query(TableName=table, **kwargs)
        return [(i["pk"]["S"], i["sk"]["S"]) for i in found["Items"]]

    values = {":p": {"S": "P"}}
    assert query(KeyConditionExpression="pk = :p", ExpressionAttributeValues=values) == [
        ("P", "1"),
        ("P", "2"),
        ("P", "3"),
    ]
    backwards = query(
        KeyConditionExpression="pk = :p", ExpressionAttributeValues=values, ScanIndexForward=False
    )
    assert backwards == [("P", "3"), ("P", "2"), ("P", "1")]
    first = ddb.query(
        TableName=table, KeyConditionExpression="pk = :p", ExpressionAttributeValues=values, Limit=2
    )
    rest = query(
        KeyConditionExpression="pk = :p",
        ExpressionAttributeValues=values,
        ExclusiveStartKey=first["LastEvaluatedKey"],
    )
    assert rest == [("P", "3")]
    assert (
        query(KeyConditionExpression="pk = :p", ExpressionAttributeValues={":p": {"S": "Z"}}) == []
    )
    # an index query sees every partition's items, in the index's key order
    by_date = query(
        IndexName="by_date",
        KeyConditionExpression="date_pk = :d",
        ExpressionAttributeValues={":d": {"S": "D2"}},
    )
    assert by_date == [("P", "2"), ("Q", "2")]


def test_queue_counts_stay_real_after_sends_and_receives(aws_resources: AwsResources) -> None:
    sqs = aws_resources.client("sqs")
    url = aws_resources.shard_queue_url
    for n in range(3):
        sqs.send_message(QueueUrl=url, MessageBody=str(n))
    received = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=1, VisibilityTimeout=60)
    assert len(received["Messages"]) == 1
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert attributes["ApproximateNumberOfMessages"] == "2"
    assert attributes["ApproximateNumberOfMessagesNotVisible"] == "1"


def test_a_long_poll_holds_no_other_request_and_answers_with_the_message_sent_meanwhile(
    aws_resources: AwsResources,
) -> None:
    sqs = aws_resources.client("sqs")
    other = aws_resources.clients().sqs()  # the poll on a client of its own
    url = aws_resources.shard_queue_url
    with ThreadPoolExecutor(1) as pool:
        polling = pool.submit(
            other.receive_message, QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=20
        )
        # Served while the poll waits (a poll holding the server would hold these for 20 s
        # and the poll would answer empty); the message sent is the poll's answer.
        assert aws_resources.client("dynamodb").describe_table(TableName=aws_resources.table)
        sqs.send_message(QueueUrl=url, MessageBody="meanwhile")
        answer = polling.result(timeout=60)
    assert [m["Body"] for m in answer["Messages"]] == ["meanwhile"]
    # a poll of an empty queue answers empty when its wait has passed, as SQS does
    assert sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1).get("Messages", []) == []


@pytest.mark.parametrize("how", ["delay", "visibility"])
def test_a_long_poll_answers_when_a_message_s_delay_or_visibility_ends_with_nothing_sent(
    aws_resources: AwsResources, how: str
) -> None:
    """No request wakes the poll here: the emulator reads when the queue's next message becomes
    receivable, and answers then (long before the 20 s wait ends)."""
    sqs = aws_resources.client("sqs")
    url = aws_resources.shard_queue_url
    if how == "delay":
        sqs.send_message(QueueUrl=url, MessageBody="later", DelaySeconds=2)
    else:
        sqs.send_message(QueueUrl=url, MessageBody="later")
        taken = sqs.receive_message(QueueUrl=url, VisibilityTimeout=2)["Messages"]
        assert [m["Body"] for m in taken] == ["later"]
    started = time.monotonic()
    answer = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=20).get("Messages", [])
    waited = time.monotonic() - started
    assert [m["Body"] for m in answer] == ["later"]
    assert 1.0 < waited < 12, f"{waited:.1f} s"


def test_a_long_poll_answers_when_moto_s_backends_change_while_it_reads_them(
    aws_resources: AwsResources, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wait reads moto's backends while other requests are served: one that creates a
    region's backend meanwhile changes the dict under the walk. The poll then checks again
    soon, and still answers with the message once its delay ends."""
    from moto.sqs.models import sqs_backends

    def changed_meanwhile() -> Any:
        raise RuntimeError("dictionary changed size during iteration")

    monkeypatch.setattr(sqs_backends, "iter_backends", changed_meanwhile)
    sqs = _sqs(aws_resources.endpoint_url)  # no retry: an error would be the answer
    url = aws_resources.shard_queue_url
    sqs.send_message(QueueUrl=url, MessageBody="later", DelaySeconds=1)
    answer = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=10).get("Messages", [])
    assert [m["Body"] for m in answer] == ["later"]


def _sqs(url: str, **config: Any) -> Any:
    return boto3.client(
        "sqs",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(retries={"max_attempts": 1}, **config),
    )


def test_a_long_poll_under_way_when_its_emulator_stops_takes_nothing_from_the_next() -> None:
    """moto's state is per process: a wait left running past its server's stop would receive,
    for a client gone, the message of the next emulator's queue of the same name."""
    first = EmulatorServer()
    url = _sqs(first.url).create_queue(QueueName="handover")["QueueUrl"]
    second: EmulatorServer | None = None
    with ThreadPoolExecutor(1) as pool:
        polling = pool.submit(_sqs(first.url).receive_message, QueueUrl=url, WaitTimeSeconds=3)
        time.sleep(0.5)  # the poll is waiting
        first.stop()
        try:
            second = EmulatorServer()
            second.reset()
            sqs = _sqs(second.url)
            queue = sqs.create_queue(QueueName="handover")["QueueUrl"]
            sqs.send_message(QueueUrl=queue, MessageBody="for the second")
            with contextlib.suppress(Exception):  # an empty answer, or its connection closed
                polling.result(timeout=10)
            time.sleep(3)  # past the first poll's wait
            answer = sqs.receive_message(QueueUrl=queue).get("Messages", [])
            assert [m["Body"] for m in answer] == ["for the second"]
        finally:
            if second is not None:
                second.stop()


def test_a_long_poll_whose_client_has_gone_takes_nothing(aws_resources: AwsResources) -> None:
    url = aws_resources.shard_queue_url
    impatient = _sqs(aws_resources.endpoint_url, read_timeout=0.5)
    with pytest.raises(ReadTimeoutError):  # the client gives up, closing its connection
        impatient.receive_message(QueueUrl=url, WaitTimeSeconds=5)
    sqs = aws_resources.client("sqs")
    sqs.send_message(QueueUrl=url, MessageBody="for a live poller")  # wakes the abandoned wait
    time.sleep(0.5)
    answer = sqs.receive_message(QueueUrl=url).get("Messages", [])
    assert [m["Body"] for m in answer] == ["for a live poller"]


def test_fast_moto_makes_transactions_idempotent_by_token_until_it_ends(
    aws_resources: AwsResources,
) -> None:
    ddb = aws_resources.client("dynamodb")
    table = aws_resources.table
    claim: Any = {
        "Put": {
            "TableName": table,
            "Item": _item("EFFECT#k", "EFFECT"),
            "ConditionExpression": "attribute_not_exists(pk)",
        }
    }
    with fast_moto() as emulator:
        ddb.transact_write_items(TransactItems=[claim], ClientRequestToken="attempt-1")
        ddb.transact_write_items(TransactItems=[claim], ClientRequestToken="attempt-1")
        with pytest.raises(ClientError, match="TransactionCanceled"):
            ddb.transact_write_items(TransactItems=[claim], ClientRequestToken="attempt-2")
        assert emulator["idempotent_replays"] == 1
    assert installed_speed_ups() == frozenset(SPEED_UPS)  # the speed-ups outlive it
    with pytest.raises(ClientError, match="TransactionCanceled"):
        ddb.transact_write_items(TransactItems=[claim], ClientRequestToken="attempt-1")


def _send(sqs: Any, url: str, group: str | None, bodies: list[str]) -> None:
    for start in range(0, len(bodies), 10):
        entries: list[dict[str, Any]] = [
            {"Id": str(n), "MessageBody": body} for n, body in enumerate(bodies[start : start + 10])
        ]
        if group is not None:
            for entry in entries:
                entry["MessageGroupId"] = group
        sqs.send_message_batch(QueueUrl=url, Entries=entries)


def _receive(sqs: Any, url: str, n: int) -> list[str]:
    out = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=n, VisibilityTimeout=60)
    return [m["Body"] for m in out.get("Messages", [])]


def test_a_standard_queue_serves_quiet_tenants_before_a_noisy_ones_backlog(
    aws_resources: AwsResources,
) -> None:
    sqs = aws_resources.client("sqs")
    url = sqs.create_queue(QueueName="fair")["QueueUrl"]
    _send(sqs, url, "tenant:a", [f"a{n}" for n in range(40)])
    assert _receive(sqs, url, 10) == [f"a{n}" for n in range(10)]  # alone: arrival order
    # a holds all ten messages in flight: a noisy neighbour. b's and c's (c names no group: a
    # tenant of its own) go before a's backlog, in the order they came.
    _send(sqs, url, "tenant:b", ["b0", "b1"])
    _send(sqs, url, None, ["c0"])
    assert _receive(sqs, url, 4) == ["b0", "b1", "c0", "a10"]
    # Two noisy tenants (a: 11 in flight, d: 5 of 19): the one with fewer in flight first.
    _send(sqs, url, "tenant:d", [f"d{n}" for n in range(10)])
    assert _receive(sqs, url, 5) == [f"d{n}" for n in range(5)]  # d quiet until it holds 5
    assert _receive(sqs, url, 3) == ["d5", "d6", "d7"]
    # Without fair queuing (a baseline), arrival order.
    with arrival_order():
        assert _receive(sqs, url, 3) == ["a11", "a12", "a13"]


def _answer(url: str, headers: dict[str, str], method: str = "GET") -> tuple[int, Any, bytes]:
    request = urllib.request.Request(url, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.headers, answer.read()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.headers, exc.read()


def test_the_emulator_serves_no_web_page_of_another_origin_or_site(
    aws_resources: AwsResources,
) -> None:
    s3 = aws_resources.client("s3")
    s3.create_bucket(Bucket="reports")
    s3.put_object(Bucket="reports", Key="secret.txt", Body=b"the fleet's keys")
    url = aws_resources.endpoint_url
    port = url.rsplit(":", 1)[1]
    refused = {
        "another origin": (403, "foreign_origin", {"Origin": "http://evil.example"}),
        "a preflight": (
            403,
            "foreign_origin",
            {"Origin": "http://evil.example", "Access-Control-Request-Method": "PUT"},
        ),
        "another site, no origin (an image)": (
            403,
            "foreign_site",
            {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors"},
        ),
        "a sibling port (same site)": (403, "foreign_site", {"Sec-Fetch-Site": "same-site"}),
        "another host name (DNS rebinding)": (
            421,
            "wrong_host",
            {"Host": f"rebind.example:{port}"},
        ),
    }
    for case, (status, error, headers) in refused.items():
        method = "OPTIONS" if "Access-Control-Request-Method" in headers else "GET"
        got, answer_headers, body = _answer(f"{url}/reports/secret.txt", headers, method)
        assert (got, json.loads(body)["error"]) == (status, error), case
        assert not any(k.lower().startswith("access-control-") for k in answer_headers), case
    # the SDKs, the CLI and a page of the emulator's own origin are served, and told nothing
    # about other origins
    for headers in ({}, {"Origin": url, "Sec-Fetch-Site": "same-origin"}):
        got, answer_headers, body = _answer(f"{url}/reports", headers)  # (anonymous: a list)
        assert (got, b"<Key>secret.txt</Key>" in body) == (200, True), body
        assert not any(k.lower().startswith("access-control-") for k in answer_headers)
    assert s3.get_object(Bucket="reports", Key="secret.txt")["Body"].read() == b"the fleet's keys"
