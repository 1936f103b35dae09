"""Whether what a task fires fits where it goes: the instance item (params and shard plan, at
most 400 KB by `itemsize`'s rules) and each shard message (params, at most 256 KiB on SQS, and
nesting no deeper than a worker reads). Checked where params enter (`tasks apply`, a run, a
submission), so that such params are refused there as bad input naming the limit, never at a
firing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, date, datetime
from typing import Any

from iotsched.core.input_limits import check_params_depth
from iotsched.core.instance_record import InstanceRecord
from iotsched.core.itemsize import ITEM_LIMIT_BYTES, item_size
from iotsched.core.messages import shard_message
from iotsched.core.shard_message import ShardMessage
from iotsched.core.sharding import PlanningError, ShardPlan, plan_shards
from iotsched.core.task_definition import TaskDefinition

#: SQS's message limit (the queue's default; the shard queue's Lambda takes batches of 10).
SQS_MESSAGE_LIMIT_BYTES = 256 * 1024
#: Room a shard message keeps below that limit for what a firing holds beyond the message
#: estimated here: a longer instance id, `groups` bounds read only when it fires.
MESSAGE_ROOM_BYTES = 8 * 1024
#: The largest shard message a task may produce.
MAX_MESSAGE_BYTES = SQS_MESSAGE_LIMIT_BYTES - MESSAGE_ROOM_BYTES
#: Room an instance item keeps beside its record: keys, index keys, counters, and what later
#: writes add to it (a reason, the follow-ups owed).
INSTANCE_STATE_BYTES = 8 * 1024
#: The largest instance record an item holds within DynamoDB's item limit.
MAX_INSTANCE_BYTES = ITEM_LIMIT_BYTES - INSTANCE_STATE_BYTES

#: What the estimate of a task's messages takes for the instance id a firing gets: the slot,
#: the longest incarnation mark, and the longest suffix a run, a submission or a rerun adds.
_SLOT = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
_SUFFIX = "~v9999999999~" + "x" * 80
_HINT = "keep large data in object storage and pass its key"


def _json_bytes(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str).encode())


def widest_bounds(plan: ShardPlan) -> dict[str, Any]:
    """The bounds of the plan's shard that take the most bytes."""
    return max(plan.all_bounds(), key=_json_bytes)


def largest_task_message(definition: TaskDefinition) -> ShardMessage:
    """The largest shard message `definition` can produce with its own params: its widest
    bounds (a `groups` plan, read only at fire time, is left to the room kept below the
    limit), under the longest instance id."""
    try:
        plan: ShardPlan | None = plan_shards(definition.sharding)
    except PlanningError:
        plan = None
    count = plan.count if plan else 1
    bounds = widest_bounds(plan) if plan else {}
    handler = definition.handler
    if definition.reduce is not None:
        bounds = max(bounds, {"reduce": definition.reduce}, key=_json_bytes)
        handler = max(handler, definition.reduce, key=len)
    day = date(2026, 11, 28)
    return ShardMessage(
        instance_id=f"{definition.id}@{_SLOT:%Y-%m-%dT%H:%MZ}{_SUFFIX}",
        task_id=definition.id,
        tenant=definition.tenant,
        shard=count,
        bounds=bounds,
        handler=handler,
        params=definition.params,
        business_date=day,
        data_interval_start=_SLOT,
        data_interval_end=_SLOT,
        timeout_s=definition.timeout_s,
        max_attempts=definition.retry.max_attempts,
        backoff_s=definition.retry.backoff_s,
    )


def largest_instance_message(instance: InstanceRecord) -> ShardMessage:
    """The largest shard (or reduce) message of `instance`, built as the dispatcher builds
    them (`iotsched.core.messages`)."""
    bounds = widest_bounds(instance.plan)
    handler = instance.handler
    if instance.reduce is not None:
        bounds = max(bounds, {"reduce": instance.reduce}, key=_json_bytes)
        handler = max(handler, instance.reduce, key=len)
    return shard_message(instance, instance.plan.count, bounds, handler=handler)


def params_problem(params: Mapping[str, Any]) -> str | None:
    """`params: nests deeper than 32 levels, ...` if a worker could not read shard messages
    carrying `params` (nor the instance be stored); else None. Checked first: a value nesting
    some hundreds of levels cannot even be measured by the other checks."""
    try:
        check_params_depth(params)
    except ValueError as exc:
        return f"params: {exc}"
    return None


def message_problem(message: ShardMessage) -> str | None:
    """`params: too large to send: ...` (or `sharding`, if a shard's bounds are the larger)
    if `message` exceeds what a shard message may take, naming SQS's limit; else None."""
    size = len(message.model_dump_json().encode())
    if size <= MAX_MESSAGE_BYTES:
        return None
    field = "params" if _json_bytes(message.params) >= _json_bytes(message.bounds) else "sharding"
    return (
        f"{field}: too large to send: a shard message takes {size:,} bytes, which exceeds the "
        f"{MAX_MESSAGE_BYTES:,} a shard message may take within SQS's 256 KiB message limit; "
        f"{_HINT}"
    )


def instance_problem(instance: InstanceRecord) -> str | None:
    """`params: too large to store: ...` (or `sharding`, if the plan is the larger) if the
    instance's item would pass DynamoDB's item limit, naming it; else None."""
    size = item_size({"body": instance.model_dump_json()})
    if size <= MAX_INSTANCE_BYTES:
        return None
    plan = instance.plan.explicit or []
    field = "params" if _json_bytes(instance.params) >= _json_bytes(plan) else "sharding"
    return (
        f"{field}: too large to store: the instance takes {size:,} bytes, which exceeds the "
        f"{MAX_INSTANCE_BYTES:,} an instance holds within DynamoDB's 400 KB item limit; {_HINT}"
    )
