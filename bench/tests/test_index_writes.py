"""The benchmark's DynamoDB write accounting (bench/indexwrites.py), rule by rule, on moto.

These are the ground truth of the partition and cost benchmarks: each test makes real writes
through a boto3 client on moto (in process) and checks the units charged to each partition of
the table and of its global secondary indexes, sized by hand.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from bench.indexwrites import DELETE, NONE, PUT, UPDATE, WriteAccountant, charges, describe
from bench.tests.indexed_table import ALL, INCL, KEYS, TABLE, indexed_table, key, s

pytestmark = pytest.mark.moto


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, WriteAccountant]]:
    with indexed_table(monkeypatch) as client:
        reader = boto3.client("dynamodb", region_name="us-east-1")
        accountant = WriteAccountant(reader, [describe(reader, TABLE)])
        accountant.attach(client)
        yield client, accountant


def rows(accountant: WriteAccountant) -> dict[tuple[str, str], dict[str, int]]:
    """Charged partitions only (zero counts dropped, for readable comparisons)."""
    return {
        k: {kind: n for kind, n in v.items() if n}
        for k, v in accountant.ledger.partitions().items()
    }


def test_a_put_outside_every_index_costs_the_table_only(aws: Any) -> None:
    client, acc = aws
    client.put_item(TableName=TABLE, Item={**key(), "x": s("1")})
    assert rows(acc) == {(TABLE, "P"): {PUT: 1, "wcu": 1}}


def test_item_size_in_started_kb_the_larger_of_before_and_after(aws: Any) -> None:
    client, acc = aws
    client.put_item(TableName=TABLE, Item={**key(), "x": s("y" * 2100)})  # 3 KB
    acc.reset()
    client.update_item(  # 3 KB before, 1 KB after: 3 units
        TableName=TABLE,
        Key=key(),
        UpdateExpression="SET x = :v",
        ExpressionAttributeValues={":v": s("z")},
    )
    assert rows(acc) == {(TABLE, "P"): {UPDATE: 1, "wcu": 3}}
    acc.reset()
    client.delete_item(TableName=TABLE, Key=key())  # a delete costs the deleted item's size
    assert rows(acc) == {(TABLE, "P"): {DELETE: 1, "wcu": 1}}


def test_a_failed_conditional_write_still_costs_the_table(aws: Any) -> None:
    client, acc = aws
    client.put_item(TableName=TABLE, Item={**key(), "a_pk": s("A"), "a_sk": s("1")})
    acc.reset()
    with pytest.raises(ClientError):
        client.put_item(
            TableName=TABLE,
            Item={**key(), "a_pk": s("B"), "a_sk": s("1")},
            ConditionExpression="attribute_not_exists(pk)",
        )
    # the table is charged; the index, which did not change, is not
    assert rows(acc) == {(TABLE, "P"): {NONE: 1, "wcu": 1}}
    assert acc.ledger.failed_conditions == 1


def test_entering_and_leaving_a_sparse_index_is_a_put_and_a_delete(aws: Any) -> None:
    client, acc = aws
    client.put_item(TableName=TABLE, Item=key())
    acc.reset()
    client.update_item(
        TableName=TABLE,
        Key=key(),
        UpdateExpression="SET a_pk = :p, a_sk = :s",
        ExpressionAttributeValues={":p": s("OPEN"), ":s": s("1")},
    )
    assert rows(acc) == {
        (TABLE, "P"): {UPDATE: 1, "wcu": 1},
        (ALL, "OPEN"): {PUT: 1, "wcu": 1},
    }
    acc.reset()
    client.update_item(TableName=TABLE, Key=key(), UpdateExpression="REMOVE a_pk, a_sk")
    assert rows(acc) == {
        (TABLE, "P"): {UPDATE: 1, "wcu": 1},
        (ALL, "OPEN"): {DELETE: 1, "wcu": 1},
    }


def test_an_item_missing_part_of_the_index_key_is_not_in_it(aws: Any) -> None:
    client, acc = aws
    client.put_item(TableName=TABLE, Item={**key(), "a_pk": s("OPEN")})  # no a_sk
    assert (ALL, "OPEN") not in rows(acc)


def test_a_key_change_moves_the_entry_a_delete_and_a_put(aws: Any) -> None:
    client, acc = aws
    client.put_item(TableName=TABLE, Item={**key(), "a_pk": s("LEASE"), "a_sk": s("1")})
    acc.reset()
    client.update_item(
        TableName=TABLE,
        Key=key(),
        UpdateExpression="SET a_pk = :p",
        ExpressionAttributeValues={":p": s("LEASE#3")},
    )
    assert rows(acc) == {
        (TABLE, "P"): {UPDATE: 1, "wcu": 1},
        (ALL, "LEASE"): {DELETE: 1, "wcu": 1},
        (ALL, "LEASE#3"): {PUT: 1, "wcu": 1},
    }
    acc.reset()
    client.update_item(  # the sort key of the index moves it too, within one partition
        TableName=TABLE,
        Key=key(),
        UpdateExpression="SET a_sk = :s",
        ExpressionAttributeValues={":s": s("2")},
    )
    assert rows(acc) == {
        (TABLE, "P"): {UPDATE: 1, "wcu": 1},
        (ALL, "LEASE#3"): {DELETE: 1, PUT: 1, "wcu": 2},
    }


def test_an_attribute_change_writes_only_the_indexes_projecting_it(aws: Any) -> None:
    client, acc = aws
    client.put_item(
        TableName=TABLE,
        Item={**key(), "a_pk": s("A"), "a_sk": s("1"), "k_pk": s("K"), "i_pk": s("I")},
    )
    assert rows(acc) == {
        (TABLE, "P"): {PUT: 1, "wcu": 1},
        (ALL, "A"): {PUT: 1, "wcu": 1},
        (KEYS, "K"): {PUT: 1, "wcu": 1},
        (INCL, "I"): {PUT: 1, "wcu": 1},
    }
    acc.reset()
    client.update_item(  # x: projected by ALL only
        TableName=TABLE,
        Key=key(),
        UpdateExpression="SET x = :v",
        ExpressionAttributeValues={":v": s("1")},
    )
    assert rows(acc) == {(TABLE, "P"): {UPDATE: 1, "wcu": 1}, (ALL, "A"): {UPDATE: 1, "wcu": 1}}
    acc.reset()
    client.update_item(  # n: projected by ALL and INCLUDE
        TableName=TABLE,
        Key=key(),
        UpdateExpression="SET n = :v",
        ExpressionAttributeValues={":v": {"N": "1"}},
    )
    assert rows(acc) == {
        (TABLE, "P"): {UPDATE: 1, "wcu": 1},
        (ALL, "A"): {UPDATE: 1, "wcu": 1},
        (INCL, "I"): {UPDATE: 1, "wcu": 1},
    }
    acc.reset()
    client.update_item(  # the same value again: no index entry changes
        TableName=TABLE,
        Key=key(),
        UpdateExpression="SET n = :v",
        ExpressionAttributeValues={":v": {"N": "1"}},
    )
    assert rows(acc) == {(TABLE, "P"): {NONE: 1, "wcu": 1}}


def test_an_index_entry_costs_its_projected_size_not_the_item_size(aws: Any) -> None:
    client, acc = aws
    big = s("y" * 3000)  # a 3 KB item
    client.put_item(
        TableName=TABLE,
        Item={**key(), "a_pk": s("A"), "a_sk": s("1"), "k_pk": s("K"), "i_pk": s("I"), "big": big},
    )
    assert rows(acc) == {
        (TABLE, "P"): {PUT: 1, "wcu": 3},
        (ALL, "A"): {PUT: 1, "wcu": 3},  # ALL: the whole item
        (KEYS, "K"): {PUT: 1, "wcu": 1},  # keys only
        (INCL, "I"): {PUT: 1, "wcu": 1},  # keys and `n` (absent)
    }


def test_a_transaction_doubles_the_table_not_the_indexes(aws: Any) -> None:
    client, acc = aws
    client.put_item(TableName=TABLE, Item={**key("Q"), "z": s("1")})
    acc.reset()
    client.transact_write_items(
        TransactItems=[
            {"Put": {"TableName": TABLE, "Item": {**key(), "a_pk": s("A"), "a_sk": s("1")}}},
            {
                "ConditionCheck": {
                    "TableName": TABLE,
                    "Key": key("Q"),
                    "ConditionExpression": "attribute_exists(pk)",
                }
            },
        ]
    )
    assert rows(acc) == {
        (TABLE, "P"): {PUT: 1, "wcu": 2},
        (TABLE, "Q"): {NONE: 1, "wcu": 2},
        (ALL, "A"): {PUT: 1, "wcu": 1},
    }


def test_a_cancelled_transaction_costs_the_table_and_writes_no_index(aws: Any) -> None:
    client, acc = aws
    with pytest.raises(ClientError):
        client.transact_write_items(
            TransactItems=[
                {"Put": {"TableName": TABLE, "Item": {**key(), "a_pk": s("A"), "a_sk": s("1")}}},
                {
                    "ConditionCheck": {
                        "TableName": TABLE,
                        "Key": key("Q"),
                        "ConditionExpression": "attribute_exists(pk)",
                    }
                },
            ]
        )
    assert rows(acc) == {(TABLE, "P"): {NONE: 1, "wcu": 2}, (TABLE, "Q"): {NONE: 1, "wcu": 2}}


def test_batch_writes_are_charged_item_by_item(aws: Any) -> None:
    client, acc = aws
    client.put_item(TableName=TABLE, Item={**key("B"), "k_pk": s("K")})
    acc.reset()
    client.batch_write_item(
        RequestItems={
            TABLE: [
                {"PutRequest": {"Item": {**key("A"), "k_pk": s("K")}}},
                {"DeleteRequest": {"Key": key("B")}},
            ]
        }
    )
    assert rows(acc) == {
        (TABLE, "A"): {PUT: 1, "wcu": 1},
        (TABLE, "B"): {DELETE: 1, "wcu": 1},
        (KEYS, "K"): {PUT: 1, DELETE: 1, "wcu": 2},
    }


def test_labels_split_the_units_and_pausing_stops_them(aws: Any) -> None:
    client, acc = aws
    acc.label = "worker"
    client.put_item(TableName=TABLE, Item=key("A"))
    acc.paused = True
    client.put_item(TableName=TABLE, Item=key("B"))
    acc.paused = False
    acc.label = "dispatcher"
    client.put_item(TableName=TABLE, Item={**key("C"), "k_pk": s("K")})
    assert acc.ledger.total(label="worker") == 1
    assert acc.ledger.total(label="dispatcher") == 2
    assert acc.ledger.total() == 3


def test_charges_is_pure_and_names_the_kinds() -> None:
    from bench.indexwrites import IndexSchema, TableSchema

    schema = TableSchema("t", "pk", "sk", (IndexSchema("i", "g", None, "KEYS_ONLY"),))
    before = {"pk": s("P"), "sk": s("S"), "g": s("G1")}
    after = {"pk": s("P"), "sk": s("S"), "g": s("G2")}
    found = [(c.target, c.partition, c.kind, c.units) for c in charges(schema, before, after)]
    assert found == [("t", "P", UPDATE, 1), ("i", "G1", DELETE, 1), ("i", "G2", PUT, 1)]
