"""The body of one message on the shard queue (`ShardMessage`): everything a worker needs to run
one shard, and the trace context it may carry."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from datetime import date, datetime
from typing import Any

from pydantic import ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from iotsched.core.task_definition import Priority
from iotsched.core.value_types import Frozen


class ShardMessage(Frozen):
    """The body of one shard message on the shard queue: everything a worker needs."""

    # A field a later version adds is ignored, not refused: a message sent by a newer worker
    # and received by an older one (a rollback, a deploy under way) still runs.
    model_config = ConfigDict(frozen=True, extra="ignore", defer_build=True)

    instance_id: str
    task_id: str
    shard: int = Field(ge=0)
    bounds: dict[str, Any]
    handler: str
    params: dict[str, Any] = Field(default_factory=dict)
    business_date: date
    data_interval_start: datetime
    data_interval_end: datetime
    timeout_s: int = Field(gt=0)
    max_attempts: int = Field(ge=1)
    backoff_s: int = Field(default=0, ge=0)
    tenant: str | None = None
    priority: Priority = Priority.NORMAL  # the shard queue it goes to (its instance's)
    reduce: bool = False  # the instance's reduce, not a shard (its index is the shard count)
    # The local tracer's context of the span that sent it (docs/design.md, section 16); absent
    # from the body when None, as on AWS, where X-Ray's own header carries the trace.
    trace: str | None = None
    # The minute of the rollout seat a deferred copy holds (docs/design.md, section 11): it
    # starts then without counting again. Absent from the body when None.
    seat: datetime | None = None

    @model_serializer(mode="wrap")
    def _without_absent_trace(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        for optional in ("trace", "seat"):
            if data.get(optional) is None:
                data.pop(optional, None)
        return data


def with_trace(messages: Sequence[ShardMessage], trace: str | None) -> Sequence[ShardMessage]:
    """`messages`, each without a trace given `trace` (a tracer's carrier: its receiver's spans
    join the sender's trace); unchanged when `trace` is None (no tracer, or X-Ray's)."""
    if trace is None or all(m.trace is not None for m in messages):
        return messages
    return [m if m.trace is not None else m.model_copy(update={"trace": trace}) for m in messages]


#: What SQS takes as a MessageGroupId: up to 128 of these characters.
_GROUP_ID = re.compile(r"[A-Za-z0-9!-/:-@\[-`{-~]{1,128}")


def fair_group(message: ShardMessage) -> str:
    """The message's tenant as the shard queue's fair queuing sees it (its MessageGroupId): its
    tenant's, or for a task without one, the task's own. A name SQS would not take is hashed."""
    group = f"tenant:{message.tenant}" if message.tenant is not None else f"task:{message.task_id}"
    if _GROUP_ID.fullmatch(group):
        return group
    return "tenant#" + hashlib.sha256(group.encode()).hexdigest()[:40]
