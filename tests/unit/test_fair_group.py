"""A shard message's tenant as SQS's fair queuing sees it (`fair_group`, its MessageGroupId):
every group sent is one SQS takes, whatever the tenant's name."""

from __future__ import annotations

import re
from datetime import date

from hypothesis import given
from hypothesis import strategies as st

from iotsched.core.shard_message import ShardMessage, fair_group
from tests.support import T0

#: SQS's rule for a MessageGroupId: 1 to 128 of these characters, nothing else.
SQS_GROUP_ID = re.compile(r"[A-Za-z0-9!-/:-@\[-`{-~]{1,128}")


def _message(tenant: str | None, task_id: str = "nightly-report") -> ShardMessage:
    return ShardMessage(
        instance_id=f"{task_id}@2026-11-29T12:00Z",
        task_id=task_id,
        shard=0,
        bounds={},
        handler="noop",
        business_date=date(2026, 11, 28),
        data_interval_start=T0,
        data_interval_end=T0,
        timeout_s=60,
        max_attempts=1,
        tenant=tenant,
    )


def test_a_tenant_or_a_task_names_the_group() -> None:
    assert fair_group(_message("acme")) == "tenant:acme"
    assert fair_group(_message(None)) == "task:nightly-report"


def test_a_name_sqs_would_refuse_is_hashed_and_stays_one_group() -> None:
    for tenant in ("a b", "é", "a\n", "x" * 130):
        group = fair_group(_message(tenant))
        assert group.startswith("tenant#") and SQS_GROUP_ID.fullmatch(group), repr(tenant)
        assert fair_group(_message(tenant)) == group  # the same tenant, the same group
    assert fair_group(_message("a\n")) != fair_group(_message("a"))


@given(st.text(max_size=200))
def test_every_group_is_one_sqs_takes(tenant: str) -> None:
    assert SQS_GROUP_ID.fullmatch(fair_group(_message(tenant)))
