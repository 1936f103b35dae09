"""Params that would not fit where a firing puts them are bad input where they are given.

Every shard message carries its instance's params to SQS (256 KiB a message) and the instance's
item holds them with the shard plan (400 KB). `tasks apply` refuses a task whose largest shard
message would not fit; `run` and `submit` refuse params (merged over the task's) that would not
fit the instance's item or its messages. Each names the limit and writes nothing.
"""

from __future__ import annotations

from typing import Any

import pytest

from iotsched import bootstrap
from iotsched.clock import ManualClock
from iotsched.core.payload_limits import (
    MAX_INSTANCE_BYTES,
    MAX_MESSAGE_BYTES,
    MESSAGE_ROOM_BYTES,
    largest_task_message,
    message_problem,
)
from iotsched.core.task_definition import TaskDefinition
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.definitions.task_file import (
    TaskFileError,
    parse_task_file,
)
from iotsched.services.operations.on_demand import (
    ManualRunError,
    run_now,
    submit,
)
from iotsched.services.scheduling.tick import dispatch_tick
from iotsched.services.wiring import Wiring
from iotsched.tasklib import registry
from tests.support import T0

SQS_LIMIT = "SQS's 256 KiB message limit"
ITEM_LIMIT = "DynamoDB's 400 KB item limit"


def definition(**fields: Any) -> TaskDefinition:
    data: dict[str, Any] = {"id": "big", "handler": "noop", "trigger": {"rate": "1h"}}
    (parsed,) = parse_task_file({"tasks": [{**data, **fields}]}, handlers=registry())
    return parsed


def refused(**fields: Any) -> str:
    data: dict[str, Any] = {"id": "big", "handler": "noop", "trigger": {"rate": "1h"}}
    with pytest.raises(TaskFileError) as caught:
        parse_task_file({"tasks": [{**data, **fields}]}, handlers=registry())
    (problem,) = caught.value.problems
    return problem


@pytest.fixture
def services() -> Wiring:
    return bootstrap.build_memory(clock=ManualClock(T0))


SHARDINGS = {
    "none": {"strategy": "none"},
    "static": {"strategy": "static", "shards": [{"n": 1}, {"tenant": "acme", "zone": "x" * 300}]},
    "id_range": {"strategy": "id_range", "shards": 7, "key_space": "device_id", "id_max": 10**9},
    "hash_buckets": {"strategy": "custom", "planner": "hash_buckets", "params": {"buckets": 12}},
}


@pytest.mark.parametrize("sharding", SHARDINGS.values(), ids=SHARDINGS.keys())
@pytest.mark.parametrize("reduce", [None, "noop"])
def test_the_estimate_is_the_largest_message_the_dispatcher_sends(
    services: Wiring, sharding: dict[str, Any], reduce: str | None
) -> None:
    task = definition(sharding=sharding, reduce=reduce, params={"blob": "é" * 1000})
    apply_tasks([task], services.tasks, now=T0)
    queue: Any = services.queue
    dispatch_tick(T0.replace(hour=13), services)
    sent = max(len(m.model_dump_json().encode()) for m in queue.sent)
    estimate = len(largest_task_message(task).model_dump_json().encode())
    # never less than what is sent; more by the longest incarnation mark and instance id
    # suffix at most
    assert sent <= estimate <= sent + 120


def test_apply_refuses_params_whose_shard_messages_pass_sqs_limit() -> None:
    # 300 KB: well inside a task's item (the definition check passes), past SQS's limit
    problem = refused(params={"blob": "x" * 300_000})
    assert problem.startswith("task 'big': params: too large to send: a shard message takes ")
    assert SQS_LIMIT in problem and f"{MAX_MESSAGE_BYTES:,}" in problem


def test_apply_takes_the_largest_params_that_fit_and_refuses_one_byte_more() -> None:
    empty = largest_task_message(definition(params={"blob": ""}))
    room = MAX_MESSAGE_BYTES - len(empty.model_dump_json().encode())
    assert definition(params={"blob": "x" * room}).params["blob"] == "x" * room
    assert "too large to send" in refused(params={"blob": "x" * (room + 1)})


def test_a_static_shard_too_large_for_a_message_is_named() -> None:
    problem = refused(sharding={"strategy": "static", "shards": [{"blob": "x" * 260_000}]})
    assert problem.startswith("task 'big': sharding: too large to send")


def test_a_task_too_large_to_store_is_named_once() -> None:
    problem = refused(params={"blob": "x" * 420_000})
    assert problem.startswith("task 'big': params: too large to store")


def test_the_room_kept_covers_a_groups_plan_read_at_fire_time() -> None:
    """A `groups` plan cannot be read at apply: its bounds are left to the room kept."""
    task = definition(sharding={"strategy": "groups"}, params={"blob": "x" * 10})
    assert largest_task_message(task).bounds == {}
    group = {"tenant": "t" * 64, "group": "g" * 128, "key_space": "device_id", "start": 10**12}
    assert len(str(group)) < MESSAGE_ROOM_BYTES // 10
    assert message_problem(largest_task_message(task)) is None


# -- run and submit ------------------------------------------------------------------------------

#: 200 listed shards of about 1 KB: a plan of about 200 KB stored with every instance.
WIDE = {"strategy": "static", "shards": [{"n": n, "pad": "p" * 1000} for n in range(200)]}


@pytest.fixture
def wide(services: Wiring) -> Wiring:
    apply_tasks([definition(sharding=WIDE, params={"a": "a" * 100_000})], services.tasks, now=T0)
    return services


def test_run_refuses_params_that_make_the_instance_too_large_to_store(wide: Wiring) -> None:
    more = {"b": "b" * 110_000}  # merged: 210 KB of params beside a 200 KB plan
    with pytest.raises(ManualRunError) as caught:
        run_now("big", wide, params=more, request_id="r-1")
    message = str(caught.value)
    assert message.startswith("params: too large to store: the instance takes ")
    assert ITEM_LIMIT in message and f"{MAX_INSTANCE_BYTES:,}" in message
    with pytest.raises(ManualRunError, match="too large to store"):
        submit("big", wide, at=T0.replace(hour=14), params=more, request_id="s-1")
    assert wide.instances.list_instances() == []
    queue: Any = wide.queue
    assert queue.sent == []
    # Nothing was bound to the request ids: the same ids with params that fit are served.
    instance, _ = run_now("big", wide, params={"b": "b"}, request_id="r-1")
    assert instance.instance_id.endswith("~manual-r-1")
    assert instance.params == {"a": "a" * 100_000, "b": "b"}
    scheduled = submit("big", wide, at=T0.replace(hour=14), params={"b": "b"}, request_id="s-1")
    assert scheduled.instance_id.endswith("~submit-s-1")


def test_run_and_submit_refuse_params_whose_messages_pass_sqs_limit(services: Wiring) -> None:
    apply_tasks([definition(params={"a": "a" * 150_000})], services.tasks, now=T0)
    more = {"b": "b" * 120_000}  # each fits a message alone; merged they do not
    for attempt in (
        lambda: run_now("big", services, params=more),
        lambda: submit("big", services, at=T0.replace(hour=14), params=more),
    ):
        with pytest.raises(ManualRunError) as caught:
            attempt()
        assert str(caught.value).startswith("params: too large to send: a shard message takes ")
        assert SQS_LIMIT in str(caught.value)
    assert services.instances.list_instances() == []
    instance, _ = run_now("big", services, params={"b": "b" * 1000})
    assert instance.status.value == "running"
