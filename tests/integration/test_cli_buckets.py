"""The CLI writes and reads the index keys with the deployment's bucket count: the stack's
`IndexBuckets` output, or for the local runtime's names IOTSCHED_INDEX_BUCKETS (moto server)."""

from __future__ import annotations

import json

import boto3
import pytest

from iotsched.cli.target import Target, TargetError
from tests.support import create_table

pytestmark = pytest.mark.moto


def _stack(endpoint: str, name: str, outputs: dict[str, str]) -> None:
    template = {
        "Resources": {"Queue": {"Type": "AWS::SQS::Queue", "Properties": {"QueueName": name}}},
        "Outputs": {key: {"Value": value} for key, value in outputs.items()},
    }
    boto3.client(
        "cloudformation",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    ).create_stack(StackName=name, TemplateBody=json.dumps(template))


OUTPUTS = {
    "TableName": "t",
    "ShardQueueUrl": "http://queue",
    "AlertTopicArn": "arn:aws:sns:us-east-1:123456789012:topic",
}


@pytest.fixture
def bare(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("IOTSCHED_TABLE", "IOTSCHED_SHARD_QUEUE_URL", "IOTSCHED_ALERT_TOPIC_ARN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("IOTSCHED_INDEX_BUCKETS", raising=False)


def test_the_stack_output_index_buckets_is_the_cli_s_bucket_count(
    moto_server: str, bare: None
) -> None:
    _stack(moto_server, "buckets-eight", {**OUTPUTS, "IndexBuckets": "8"})
    settings, _ = Target(moto_server, "us-east-1", "buckets-eight").connect()
    assert (settings.table, settings.index_buckets) == ("t", 8)
    table, _ = Target(moto_server, "us-east-1", "buckets-eight").connect_table()
    assert (table.table, table.index_buckets) == ("t", 8)  # the stores alone: the same table


def test_a_bad_index_buckets_output_is_named(moto_server: str, bare: None) -> None:
    _stack(moto_server, "buckets-bad", {**OUTPUTS, "IndexBuckets": "0"})
    with pytest.raises(TargetError, match="IndexBuckets"):
        Target(moto_server, "us-east-1", "buckets-bad").connect()
    with pytest.raises(TargetError, match="IndexBuckets"):
        Target(moto_server, "us-east-1", "buckets-bad").connect_table()


def test_the_local_runtime_s_names_take_the_environment_s_bucket_count(
    moto_server: str, bare: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    boto3.client(
        "sqs",
        endpoint_url=moto_server,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    ).create_queue(QueueName="localbuckets-ShardQueue")
    dynamodb = boto3.client(
        "dynamodb",
        endpoint_url=moto_server,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    if "localbuckets-Table" not in dynamodb.list_tables()["TableNames"]:
        create_table(dynamodb, "localbuckets-Table")
    target = Target(moto_server, "us-east-1", "localbuckets")
    assert target.connect()[0].index_buckets == 32  # the template's default
    assert target.connect_table()[0].index_buckets == 32
    monkeypatch.setenv("IOTSCHED_INDEX_BUCKETS", "64")
    assert target.connect()[0].index_buckets == 64
    assert target.connect_table()[0].index_buckets == 64
