"""The messages an instance puts on the shard queue, built in one place from its stored record:
the dispatcher, the sweeper and the size checks build the same message.

An instance sends its shards in *send order* (`send_order`): every shard of the plan by index,
or a rerun's `only` shards in the order listed. `InstanceRecord.sent` counts the messages of
send order that went out, so a resumed dispatch starts there.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from iotsched.core.instance_record import InstanceRecord
from iotsched.core.shard_message import ShardMessage


def shard_message(
    instance: InstanceRecord,
    index: int,
    bounds: dict[str, Any],
    *,
    handler: str | None = None,
    reduce: bool = False,
) -> ShardMessage:
    """The message of shard `index` of `instance`, with its `bounds` (and `handler`, if it is
    not the instance's own: the reduce's)."""
    return ShardMessage(
        instance_id=instance.instance_id,
        task_id=instance.task_id,
        tenant=instance.tenant,
        priority=instance.priority,
        shard=index,
        bounds=bounds,
        handler=instance.handler if handler is None else handler,
        params=instance.params,
        business_date=instance.business_date,
        data_interval_start=instance.data_interval_start,
        data_interval_end=instance.data_interval_end,
        timeout_s=instance.timeout_s,
        max_attempts=instance.max_attempts,
        backoff_s=instance.backoff_s,
        reduce=reduce,
    )


def send_order(instance: InstanceRecord) -> Sequence[int]:
    """The shard indexes the instance sends, in the order it sends them."""
    return instance.send_order()


def shard_messages(
    instance: InstanceRecord, start: int = 0, stop: int | None = None
) -> list[ShardMessage]:
    """The messages at positions `[start, stop)` of the instance's send order (all of them by
    default), built from the plan stored with the instance."""
    return [
        shard_message(instance, index, instance.plan.bounds(index))
        for index in send_order(instance)[start:stop]
    ]


def message_of(instance: InstanceRecord, index: int) -> ShardMessage | None:
    """The message of shard `index` (the reduce's at `plan.count`), or None if the instance
    sends no such message (outside a rerun's `only`, a reduce it does not have)."""
    if index == instance.plan.count:
        return reduce_message(instance) if instance.reduce is not None else None
    if not 0 <= index < instance.plan.count:
        return None
    if instance.only is not None and index not in instance.only:
        return None
    return shard_message(instance, index, instance.plan.bounds(index))


def reduce_message(instance: InstanceRecord) -> ShardMessage:
    """The reduce's message: the instance's reduce handler, as shard number `plan.count`."""
    assert instance.reduce is not None
    bounds = {"reduce": instance.reduce}
    return shard_message(
        instance, instance.plan.count, bounds, handler=instance.reduce, reduce=True
    )
