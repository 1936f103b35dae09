"""The owing index on DynamoDB: an instance leaves its `OWED#n` partition with the write that
strikes its last owed follow-up, whoever strikes the others and in whatever order (moto)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from iotsched.adapters.dynamodb import DynamoDBStore
from iotsched.adapters.dynamodb.keys import owed_partition
from iotsched.core.instance_record import (
    FollowUp,
    InstanceStatus,
)
from iotsched.core.timeutil import iso
from tests.support import T0, TEST_INDEX_BUCKETS, AwsResources, instance

pytestmark = pytest.mark.moto


class Interleaved:
    """A DynamoDB client that runs `meanwhile` once, just before the first request whose
    update expression contains `marker` (standing for a concurrent caller's writes)."""

    def __init__(self, client: Any, marker: str, meanwhile: Callable[[], object]) -> None:
        self._client = client
        self._marker = marker
        self._meanwhile: Callable[[], object] | None = meanwhile

    def update_item(self, **kwargs: Any) -> Any:
        if self._meanwhile is not None and self._marker in kwargs.get("UpdateExpression", ""):
            meanwhile, self._meanwhile = self._meanwhile, None
            meanwhile()
        return self._client.update_item(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def test_two_callers_striking_the_last_two_marks_take_the_instance_out_of_the_index(
    aws_resources: AwsResources,
) -> None:
    client = aws_resources.clients().dynamodb()
    other = DynamoDBStore(client, aws_resources.table, buckets=TEST_INDEX_BUCKETS)
    inst = instance("t", T0)
    assert other.claim_instance(inst) is None
    assert other.end_instance(
        inst.instance_id,
        status=InstanceStatus.FAILED,
        reason="test",
        finished_at=T0,
        owed=[FollowUp.ALERT, FollowUp.DEPENDENTS],
    )
    assert [i.instance_id for i in other.owing_instances()] == [inst.instance_id]
    # Both callers read two marks; the other strikes its mark between this caller's reads
    # and its own strike-off, so this caller's strikes the last one.
    store = DynamoDBStore(
        Interleaved(
            client,
            "DELETE owed",
            lambda: other.settle_followup(inst.instance_id, FollowUp.DEPENDENTS),
        ),
        aws_resources.table,
        buckets=TEST_INDEX_BUCKETS,
    )
    assert store.settle_followup(inst.instance_id, FollowUp.ALERT)
    item = client.get_item(
        TableName=aws_resources.table,
        Key={"pk": {"S": "TASK#t"}, "sk": {"S": f"INST#{inst.slot:%Y-%m-%dT%H:%MZ}"}},
        ConsistentRead=True,
    )["Item"]
    assert "owed" not in item
    assert "open_pk" not in item and "open_sk" not in item
    assert store.settle_followup(inst.instance_id, FollowUp.ALERT) is False
    assert other.owing_instances() == []


def test_a_backlog_of_unpublished_alerts_never_hides_an_owing_instance(
    aws_resources: AwsResources,
) -> None:
    client = aws_resources.clients().dynamodb()
    store = DynamoDBStore(client, aws_resources.table, buckets=TEST_INDEX_BUCKETS)
    inst = instance("t", T0)
    assert store.claim_instance(inst) is None
    assert store.end_instance(
        inst.instance_id,
        status=InstanceStatus.CANCELLED,
        reason="test",
        finished_at=T0,
        owed=[FollowUp.RELEASE],
    )
    # Alerts recorded before it ended and still pending, in its owing partition.
    for n in range(5):
        client.put_item(
            TableName=aws_resources.table,
            Item={
                "pk": {"S": f"ALERT#a{n}"},
                "sk": {"S": "ALERT"},
                "kind": {"S": "alert"},
                "body": {"S": "{}"},
                "open_pk": {"S": owed_partition(inst.instance_id)},
                "open_sk": {"S": f"{iso(T0 - timedelta(hours=1))}#ALERT#a{n}"},
            },
        )
    assert [i.instance_id for i in store.owing_instances(limit=3)] == [inst.instance_id]
