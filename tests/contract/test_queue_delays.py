"""ShardQueue delays (`send(..., delays=...)`): each message stays hidden for its own delay
(SQS's per-entry DelaySeconds; the memory queue records when each becomes visible)."""

from __future__ import annotations

import pytest

from iotsched.adapters.memory.queues import MemoryShardQueue
from iotsched.clock import ManualClock
from iotsched.core.shard_message import ShardMessage
from iotsched.services.scheduling.send import shard_messages
from tests.contract.conftest import QueueHarness
from tests.support import T0, instance


def messages(count: int) -> list[ShardMessage]:
    return shard_messages(instance("d", shards=[{"n": i} for i in range(count)]))


def test_a_delayed_message_is_not_delivered_before_its_delay(queue: QueueHarness) -> None:
    batch = messages(12)
    delays = [900 if m.shard % 4 == 1 else 0 for m in batch]
    assert queue.queue.send(batch, delays=delays) == 2
    undelayed = [m for m, d in zip(batch, delays, strict=True) if d == 0]
    if isinstance(queue.queue, MemoryShardQueue):
        assert queue.queue.delays == delays  # the fake keeps each message's delay
        return
    assert queue.delivered(len(undelayed)) == undelayed
    assert queue.delivered(0) == []  # the three delayed ones are still hidden


def test_the_memory_queue_knows_when_each_message_becomes_visible() -> None:
    clock = ManualClock(T0)
    queue = MemoryShardQueue(clock)
    queue.send(messages(3), delays=[0, 30, 900])
    assert [(v - T0).total_seconds() for v in queue.visible_at if v] == [0, 30, 900]


@pytest.mark.parametrize("delays", [[0, 0], [901], [-1]])
def test_delays_must_match_the_messages_and_sqs_limits(delays: list[int]) -> None:
    with pytest.raises(ValueError, match="delays"):
        MemoryShardQueue().send(messages(1), delays=delays)
