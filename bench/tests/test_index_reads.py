"""The benchmark's DynamoDB read accounting (bench/indexreads.py), rule by rule, on moto.

Each test makes real reads through a boto3 client on moto (in process) and checks the read
units charged to each partition of the table and of its global secondary indexes, sized by
hand (`bench.counting.item_size`: attribute names plus values).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from bench.indexreads import SCAN, ReadAccountant, query_partition
from bench.indexwrites import TableSchema, WriteAccountant, describe
from bench.tests.indexed_table import ALL, KEYS, TABLE, indexed_table, key, s

pytestmark = pytest.mark.moto

KB4 = 4096


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, ReadAccountant]]:
    with indexed_table(monkeypatch) as client:
        reader = boto3.client("dynamodb", region_name="us-east-1")
        accountant = ReadAccountant(reader, [describe(reader, TABLE)])
        accountant.attach(client)
        yield client, accountant


def rcu(accountant: ReadAccountant) -> dict[tuple[str, str], float]:
    return {k: v["rcu"] for k, v in accountant.ledger.partitions().items()}


def sized(pk: str, sk: str, size: int, **more: dict[str, str]) -> dict[str, Any]:
    """An item of exactly `size` bytes (its key, `more`, and a padding attribute `x`)."""
    item = {**key(pk, sk), **more}
    used = sum(len(k) + len(v["S"]) for k, v in item.items()) + len("x")
    return {**item, "x": s("y" * (size - used))}


def test_get_item_per_started_4_kb_half_if_eventual_a_missing_item_the_minimum(
    aws: Any,
) -> None:
    client, acc = aws
    client.put_item(TableName=TABLE, Item=sized("P", "S", KB4 + 1))  # 2 units
    client.get_item(TableName=TABLE, Key=key(), ConsistentRead=True)
    assert rcu(acc) == {(TABLE, "P"): 2}
    acc.reset()
    client.get_item(TableName=TABLE, Key=key())
    assert rcu(acc) == {(TABLE, "P"): 1}
    acc.reset()
    client.get_item(TableName=TABLE, Key=key("Q"), ConsistentRead=True)
    client.get_item(TableName=TABLE, Key=key("R"))
    assert rcu(acc) == {(TABLE, "Q"): 1, (TABLE, "R"): 0.5}
    assert acc.ledger.calls == {"GetItem": 2}


def test_a_projection_is_charged_the_whole_item(aws: Any) -> None:
    client, acc = aws
    client.put_item(TableName=TABLE, Item=sized("P", "S", 3 * KB4, n=s("1")))
    got = client.get_item(TableName=TABLE, Key=key(), ConsistentRead=True, ProjectionExpression="n")
    assert got["Item"] == {"n": s("1")}
    assert rcu(acc) == {(TABLE, "P"): 3}
    assert acc.ledger.calls == {"GetItem": 1}  # its own read of the whole item is not counted


def test_batch_get_charges_each_key_as_a_get_with_its_tables_consistency(aws: Any) -> None:
    client, acc = aws
    client.put_item(TableName=TABLE, Item=sized("A", "1", KB4 + 1))
    client.put_item(TableName=TABLE, Item=sized("A", "2", 100))
    request = {"Keys": [key("A", "1"), key("A", "2"), key("B", "1")]}
    client.batch_get_item(RequestItems={TABLE: {**request, "ConsistentRead": True}})
    assert rcu(acc) == {(TABLE, "A"): 2 + 1, (TABLE, "B"): 1}
    acc.reset()
    client.batch_get_item(RequestItems={TABLE: request})
    assert rcu(acc) == {(TABLE, "A"): 1 + 0.5, (TABLE, "B"): 0.5}
    assert acc.ledger.partitions()[(TABLE, "A")]["BatchGetItem"] == 2
    acc.reset()
    client.batch_get_item(  # projected, even off the keys: the whole items
        RequestItems={TABLE: {**request, "ConsistentRead": True, "ProjectionExpression": "x"}}
    )
    assert rcu(acc) == {(TABLE, "A"): 2 + 1, (TABLE, "B"): 1}


def test_batch_get_does_not_charge_the_keys_left_unprocessed() -> None:
    # moto leaves keys unprocessed only past a 16 MB answer: the answer is stubbed.
    client = boto3.client("dynamodb", region_name="us-east-1")
    acc = ReadAccountant(reader=None, schemas=[TableSchema(TABLE, "pk", "sk")])
    acc.attach(client)
    request: dict[str, Any] = {TABLE: {"Keys": [key("A"), key("B")], "ConsistentRead": True}}
    with Stubber(client) as stub:
        stub.add_response(
            "batch_get_item",
            {
                "Responses": {TABLE: [{**key("A"), "x": s("y")}]},
                "UnprocessedKeys": {TABLE: {"Keys": [key("B")]}},
            },
            {"RequestItems": request},
        )
        client.batch_get_item(RequestItems=request)
    assert rcu(acc) == {(TABLE, "A"): 1}


def test_a_query_sums_its_items_and_is_charged_to_the_partition_it_names(aws: Any) -> None:
    client, acc = aws
    for sk in ("1", "2", "3"):
        client.put_item(TableName=TABLE, Item=sized("P", sk, 2000))  # 6,000 bytes: 2 units
    client.put_item(TableName=TABLE, Item=sized("Q", "1", 2000))
    client.query(
        TableName=TABLE,
        KeyConditionExpression="#p = :p AND sk >= :s",
        ExpressionAttributeNames={"#p": "pk"},
        ExpressionAttributeValues={":p": s("P"), ":s": s("1")},
        ConsistentRead=True,
    )
    assert rcu(acc) == {(TABLE, "P"): 2}
    acc.reset()
    client.query(  # eventually consistent: half
        TableName=TABLE,
        KeyConditionExpression="pk = :p",
        ExpressionAttributeValues={":p": s("P")},
    )
    assert rcu(acc) == {(TABLE, "P"): 1}
    acc.reset()
    client.query(  # nothing found: the minimum unit
        TableName=TABLE,
        KeyConditionExpression="pk = :p",
        ExpressionAttributeValues={":p": s("Z")},
        ConsistentRead=True,
    )
    assert rcu(acc) == {(TABLE, "Z"): 1}


def test_a_query_is_charged_what_it_read_not_what_its_filter_and_projection_kept(
    aws: Any,
) -> None:
    client, acc = aws
    for sk in ("1", "2", "3"):
        client.put_item(TableName=TABLE, Item=sized("P", sk, 2000, n=s(sk)))
    found = client.query(
        TableName=TABLE,
        KeyConditionExpression="pk = :p",
        FilterExpression="n = :n",
        ProjectionExpression="sk",
        ExpressionAttributeValues={":p": s("P"), ":n": s("2")},
        ConsistentRead=True,
    )
    assert found["Items"] == [{"sk": s("2")}]
    assert rcu(acc) == {(TABLE, "P"): 2}  # the three items read, 6,000 bytes
    acc.reset()
    page = client.query(  # a page: the items its limit let it read
        TableName=TABLE,
        KeyConditionExpression="pk = :p",
        ProjectionExpression="sk",
        ExpressionAttributeValues={":p": s("P")},
        ConsistentRead=True,
        Limit=2,
    )
    client.query(
        TableName=TABLE,
        KeyConditionExpression="pk = :p",
        ProjectionExpression="sk",
        ExpressionAttributeValues={":p": s("P")},
        ConsistentRead=True,
        ExclusiveStartKey=page["LastEvaluatedKey"],
    )
    assert rcu(acc) == {(TABLE, "P"): 1 + 1}  # 4,000 bytes, then 2,000
    assert acc.ledger.calls == {"Query": 2}


def test_an_index_query_is_eventual_charged_to_the_index_key_its_entries_sizes(
    aws: Any,
) -> None:
    client, acc = aws
    for sk in ("1", "2", "3"):  # 3 items of 6,000 bytes, in both indexes
        client.put_item(
            TableName=TABLE, Item=sized("P", sk, 6000, a_pk=s("A"), a_sk=s(sk), k_pk=s("K"))
        )
    client.query(
        TableName=TABLE,
        IndexName=ALL,
        KeyConditionExpression="a_pk = :a",
        ExpressionAttributeValues={":a": s("A")},
    )
    client.query(
        TableName=TABLE,
        IndexName=KEYS,
        KeyConditionExpression="k_pk = :k",
        ExpressionAttributeValues={":k": s("K")},
    )
    # ALL: the whole items, 18,000 bytes, 5 units halved; KEYS_ONLY: their keys, one unit halved
    assert rcu(acc) == {(ALL, "A"): 2.5, (KEYS, "K"): 0.5}


def test_a_transactional_get_costs_twice_a_consistent_get(aws: Any) -> None:
    client, acc = aws
    client.put_item(TableName=TABLE, Item=sized("P", "S", KB4 + 1))
    client.transact_get_items(
        TransactItems=[
            {"Get": {"TableName": TABLE, "Key": key()}},
            {"Get": {"TableName": TABLE, "Key": key("Q")}},  # missing: twice the minimum
        ]
    )
    assert rcu(acc) == {(TABLE, "P"): 4, (TABLE, "Q"): 2}


def test_a_scan_is_charged_to_its_pseudo_partition(aws: Any) -> None:
    client, acc = aws
    client.put_item(TableName=TABLE, Item=sized("P", "S", 100))
    client.put_item(TableName=TABLE, Item=sized("Q", "S", 100))
    client.scan(TableName=TABLE, ConsistentRead=True)
    assert rcu(acc) == {(TABLE, SCAN): 1}


def test_writes_and_the_accountants_own_reads_are_not_charged_labels_and_pausing(
    aws: Any,
) -> None:
    client, acc = aws
    reader = boto3.client("dynamodb", region_name="us-east-1")
    writes = WriteAccountant(reader, [describe(reader, TABLE)])
    writes.attach(client)  # it reads every written item twice, with its reader
    client.put_item(TableName=TABLE, Item=key())
    assert acc.ledger.total() == 0
    acc.label = "worker"
    client.get_item(TableName=TABLE, Key=key(), ConsistentRead=True)
    acc.paused = True
    client.get_item(TableName=TABLE, Key=key(), ConsistentRead=True)
    acc.paused = False
    acc.label = "dispatcher"
    client.get_item(TableName=TABLE, Key=key())
    assert acc.ledger.total(label="worker") == 1
    assert acc.ledger.total(label="dispatcher") == 0.5
    assert acc.ledger.total() == 1.5


def test_query_partition_reads_the_equality_on_the_partition_key_only() -> None:
    values = {":d": s("DUE#3"), ":t": s("2026")}

    def named(condition: str, hash_key: str) -> str | None:
        params = {"KeyConditionExpression": condition, "ExpressionAttributeValues": values}
        return query_partition(params, hash_key)

    assert named("due_pk = :d AND due_sk <= :t", "due_pk") == "DUE#3"
    assert named(":d = due_pk", "due_pk") == "DUE#3"
    assert named("due_sk <= :t", "due_sk") is None  # no equality
    legacy = {"KeyConditions": {"pk": {"ComparisonOperator": "EQ", "AttributeValueList": [s("P")]}}}
    assert query_partition(legacy, "pk") == "P"
