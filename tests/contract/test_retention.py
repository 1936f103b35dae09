"""Retention: what has ended carries `expires_at` (the table's TTL attribute, epoch seconds)
per its task's `retention.days`, written in the write that ends it; effect keys are kept at
least EFFECT_RETENTION_FLOOR_DAYS, while a copy of the shard's message can still come back.
Every store backend; the raw items on DynamoDB."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

import pytest

from iotsched import bootstrap
from iotsched.adapters.memory.store import MemoryStore
from iotsched.clock import ManualClock
from iotsched.context import ShardContext
from iotsched.core.instance_record import InstanceStatus
from iotsched.core.shard_record import ShardStatus
from iotsched.core.task_policies import (
    DEFAULT_RETENTION_DAYS,
    EFFECT_RETENTION_FLOOR_DAYS,
)
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.execution.batch import run_shard
from iotsched.services.execution.outcomes import ShardOutcome
from iotsched.services.execution.sweep import message_for
from iotsched.services.scheduling.tick import dispatch_tick
from iotsched.services.wiring import Wiring
from iotsched.tasklib import registry
from tests.contract.conftest import Store
from tests.support import T0, TEST_INDEX_BUCKETS, AwsResources, instance, task
from tests.unit.test_shard_batch import delivery

DAY = timedelta(days=1)
NOW = T0 + timedelta(seconds=3)


def _work(ctx: ShardContext) -> None:
    assert ctx.once(f"effect#{ctx.shard}")
    if ctx.shard == 1:
        raise RuntimeError("boom")


@dataclass
class Wired:
    services: Wiring
    raw: dict[tuple[str, str], dict[str, Any]] | None  # DynamoDB's items, by (pk, sk)
    aws: AwsResources | None

    def items(self) -> dict[tuple[str, str], dict[str, Any]]:
        assert self.aws is not None
        client = self.aws.clients().dynamodb()
        items = client.scan(TableName=self.aws.table, ConsistentRead=True)["Items"]
        return {(i["pk"]["S"], i["sk"]["S"]): cast("dict[str, Any]", i) for i in items}


@pytest.fixture(
    params=[
        "memory",
        pytest.param("dynamodb", marks=pytest.mark.moto),
        pytest.param("adversarial", marks=[pytest.mark.moto, pytest.mark.adversarial]),
    ]
)
def wired(request: pytest.FixtureRequest) -> Iterator[Wired]:
    clock = ManualClock(T0 - timedelta(minutes=7))
    handlers = {**registry(), "work": _work}
    if request.param == "memory":
        yield Wired(bootstrap.build_memory(clock=clock, handlers=handlers), None, None)
        return
    name = "adversarial_resources" if request.param == "adversarial" else "aws_resources"
    aws: AwsResources = request.getfixturevalue(name)
    yield Wired(
        bootstrap.build(aws.settings, clock=clock, clients=aws.clients(), handlers=handlers),
        None,
        aws,
    )


def _epoch(at: datetime) -> str:
    return str(int(at.timestamp()))


def test_an_ended_instance_its_shards_effects_and_alert_expire_per_the_task_retention(
    wired: Wired,
) -> None:
    services = wired.services
    clock = cast("ManualClock", services.clock)
    definition = task(
        "kept",
        handler="work",
        trigger={"rate": "15m"},
        sharding={"strategy": "static", "shards": [{"n": 0}, {"n": 1}]},
        retry={"max_attempts": 1, "backoff_s": 0},
        retention={"days": 3},
    )
    apply_tasks([definition], services.tasks, now=clock.now())
    clock.set(NOW)
    dispatch_tick(clock.now(), services)
    (inst,) = services.instances.list_instances(task_id="kept")
    assert inst.retention_days == 3 and inst.expires_at is None  # open: kept
    outcomes = []
    for index in (0, 1):
        message = message_for(inst, index)
        assert message is not None
        outcomes.append(run_shard(delivery(message), services, worker="w"))
    assert outcomes == [ShardOutcome.SUCCEEDED, ShardOutcome.FAILED]

    ended = services.instances.get_instance(inst.instance_id)
    assert ended is not None and ended.status is InstanceStatus.FAILED
    assert ended.finished_at is not None
    assert ended.expires_at == ended.finished_at + 3 * DAY
    shards = services.instances.list_shards(inst.instance_id)
    assert [s.status for s in shards] == [ShardStatus.SUCCEEDED, ShardStatus.FAILED]
    assert [s.expires_at for s in shards] == [NOW + 3 * DAY] * 2
    effect_expiry = NOW + EFFECT_RETENTION_FLOOR_DAYS * DAY  # the floor beats 3 days
    (alert,) = services.alert_log.recent()
    assert alert.instance_id == inst.instance_id
    if wired.aws is None:
        store = cast("MemoryStore", services.instances)
        assert store.effect_expiry == {"effect#0": effect_expiry, "effect#1": effect_expiry}
        return
    items = wired.items()
    item = items[("TASK#kept", f"INST#{inst.instance_id.partition('@')[2]}")]
    assert item["expires_at"] == {"N": _epoch(ended.finished_at + 3 * DAY)}
    for n in (0, 1):
        assert items[(f"INST#{inst.instance_id}", f"SHARD#{n:06d}")]["expires_at"] == {
            "N": _epoch(NOW + 3 * DAY)
        }
        assert items[(f"EFFECT#effect#{n}", "EFFECT")]["expires_at"] == {"N": _epoch(effect_expiry)}
    # the instance's counter item takes the expiry of its last decrement
    assert items[(f"INST#{inst.instance_id}", "COUNT")]["expires_at"] == {
        "N": _epoch(NOW + 3 * DAY)
    }
    assert alert.raised_at is not None
    assert items[(f"ALERT#{alert.alert_id}", "ALERT")]["expires_at"] == {
        "N": _epoch(alert.raised_at + 3 * DAY)
    }
    # nothing else of the task's run carries one: the task itself is kept
    assert "expires_at" not in items[("TASK#kept", "DEF")]


@pytest.fixture(
    params=[
        "memory",
        pytest.param("dynamodb", marks=pytest.mark.moto),
        pytest.param("adversarial", marks=[pytest.mark.moto, pytest.mark.adversarial]),
    ]
)
def store(request: pytest.FixtureRequest) -> Store:
    from iotsched.adapters.dynamodb import DynamoDBStore

    if request.param == "memory":
        return MemoryStore()
    name = "adversarial_resources" if request.param == "adversarial" else "aws_resources"
    aws: AwsResources = request.getfixturevalue(name)
    return DynamoDBStore(aws.clients().dynamodb(), aws.table, buckets=TEST_INDEX_BUCKETS)


@pytest.mark.parametrize(
    "status", [InstanceStatus.CANCELLED, InstanceStatus.TIMED_OUT, InstanceStatus.SUCCEEDED]
)
def test_every_final_status_write_carries_the_expiry(store: Store, status: InstanceStatus) -> None:
    inst = instance("t", T0, retention={"days": 5})
    assert store.claim_instance(inst) is None
    end = T0 + timedelta(hours=2)
    if status is InstanceStatus.SUCCEEDED:
        assert store.mark_running([inst.instance_id]) == [True]
        lease = store.take_lease(
            inst.instance_id,
            0,
            bounds={"n": 0},
            worker="w",
            now=T0,
            lease_until=end,
            max_attempts=1,
        )
        assert lease.taken
        done = lease.shard.attempts[-1].model_copy(update={"ended_at": end})
        store.complete_shard(
            inst.instance_id, 0, status=ShardStatus.SUCCEEDED, attempt=done, expires_at=end + DAY
        )
        assert store.finalize_instance(inst.instance_id, status=status, finished_at=end)
        shard = store.get_shard(inst.instance_id, 0)
        assert shard is not None and shard.expires_at == end + DAY
    else:
        assert store.end_instance(inst.instance_id, status=status, reason="test", finished_at=end)
    got = store.get_instance(inst.instance_id)
    assert got is not None and got.expires_at == end + 5 * DAY
    _assert_raw(store, inst.instance_id, end + 5 * DAY)


def test_an_instance_claimed_final_expires_from_its_claim(store: Store) -> None:
    inst = instance("t", T0, status=InstanceStatus.SKIPPED, retention={"days": 2})
    assert store.claim_instance(inst) is None
    got = store.get_instance(inst.instance_id)
    assert got is not None and got.expires_at == T0 + 2 * DAY
    _assert_raw(store, inst.instance_id, T0 + 2 * DAY)


def test_an_instance_stored_without_a_retention_expires_after_the_default(store: Store) -> None:
    """Claimed before retention existed: the final write takes the documented default."""
    from iotsched.adapters.dynamodb import DynamoDBStore

    inst = instance("t", T0)
    assert store.claim_instance(inst) is None
    if isinstance(store, DynamoDBStore):
        key = {"pk": {"S": "TASK#t"}, "sk": {"S": f"INST#{inst.instance_id.partition('@')[2]}"}}
        store._ddb.update_item(
            TableName=store._table, Key=key, UpdateExpression="REMOVE retention_s"
        )
    assert store.end_instance(
        inst.instance_id, status=InstanceStatus.CANCELLED, reason="test", finished_at=T0
    )
    _assert_raw(store, inst.instance_id, T0 + DEFAULT_RETENTION_DAYS * DAY)


def _assert_raw(store: Store, instance_id: str, expires: datetime) -> None:
    from iotsched.adapters.dynamodb import DynamoDBStore

    if not isinstance(store, DynamoDBStore):
        return
    key = {"pk": {"S": "TASK#t"}, "sk": {"S": f"INST#{instance_id.partition('@')[2]}"}}
    item = store._ddb.get_item(TableName=store._table, Key=key, ConsistentRead=True)["Item"]
    assert item["expires_at"] == {"N": _epoch(expires)}
