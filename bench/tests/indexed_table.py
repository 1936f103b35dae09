"""The table the accounting tests write and read on moto (in process): a pk/sk key and three
global secondary indexes, one per projection (ALL, KEYS_ONLY, INCLUDE `n`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import boto3
import pytest

TABLE = "t"
ALL, KEYS, INCL = "by_all", "by_keys", "by_incl"


@contextmanager
def indexed_table(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """moto in process with the table made; yields a client of it (nothing attached)."""
    from moto import mock_aws

    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        client.create_table(
            TableName=TABLE,
            BillingMode="PAY_PER_REQUEST",
            AttributeDefinitions=[
                {"AttributeName": n, "AttributeType": "S"}
                for n in ("pk", "sk", "a_pk", "a_sk", "k_pk", "i_pk")
            ],
            KeySchema=[
                {"AttributeName": "pk", "KeyType": "HASH"},
                {"AttributeName": "sk", "KeyType": "RANGE"},
            ],
            GlobalSecondaryIndexes=[
                {
                    "IndexName": ALL,
                    "KeySchema": [
                        {"AttributeName": "a_pk", "KeyType": "HASH"},
                        {"AttributeName": "a_sk", "KeyType": "RANGE"},
                    ],
                    "Projection": {"ProjectionType": "ALL"},
                },
                {
                    "IndexName": KEYS,
                    "KeySchema": [{"AttributeName": "k_pk", "KeyType": "HASH"}],
                    "Projection": {"ProjectionType": "KEYS_ONLY"},
                },
                {
                    "IndexName": INCL,
                    "KeySchema": [{"AttributeName": "i_pk", "KeyType": "HASH"}],
                    "Projection": {"ProjectionType": "INCLUDE", "NonKeyAttributes": ["n"]},
                },
            ],
        )
        yield client


def s(value: str) -> dict[str, str]:
    return {"S": value}


def key(pk: str = "P", sk: str = "S") -> dict[str, Any]:
    return {"pk": s(pk), "sk": s(sk)}
