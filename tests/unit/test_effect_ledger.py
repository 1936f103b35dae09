"""The effect ledger does not grow the shard record: an attempt lists its first LISTED_KEYS
keys and counts the rest; every key is in the ledger, and claimed once."""

from __future__ import annotations

from typing import cast

from iotsched.adapters.memory.store import MemoryStore
from iotsched.clock import ManualClock
from iotsched.context import ShardContext
from iotsched.core.attempt_record import LISTED_KEYS
from iotsched.core.shard_record import ShardStatus
from iotsched.services.execution.batch import run_shard
from iotsched.services.execution.outcomes import ShardOutcome
from iotsched.services.operations.views import shard_views
from tests.unit.test_shard_batch import delivery, setup

EFFECTS = LISTED_KEYS + 15


def test_an_attempt_lists_its_first_keys_and_counts_them_all(clock: ManualClock) -> None:
    def work(ctx: ShardContext) -> None:
        for n in range(EFFECTS):
            assert ctx.once(f"notice#{n:03d}")

    services, _spy, messages = setup(clock, ("a", 1), handlers={"work": work})
    (message,) = messages
    assert run_shard(delivery(message), services, worker="w") is ShardOutcome.SUCCEEDED
    (shard,) = services.instances.list_shards(message.instance_id)
    (attempt,) = shard.attempts
    assert shard.status is ShardStatus.SUCCEEDED
    assert attempt.keys == [f"notice#{n:03d}" for n in range(LISTED_KEYS)]
    assert (attempt.key_count, shard.keys_count) == (EFFECTS, EFFECTS)
    inst = services.instances.get_instance(message.instance_id)
    assert inst is not None
    (view,) = shard_views(inst, [shard])
    assert (len(view["keys_written"]), view["keys_count"]) == (LISTED_KEYS, EFFECTS)
    # Every key is in the ledger, claimed by this attempt, however many there are.
    store = cast("MemoryStore", services.instances._store)  # type: ignore[attr-defined]
    assert sorted(k for k, (iid, _, n) in store._effects.items() if iid == inst.instance_id) == [
        f"notice#{n:03d}" for n in range(EFFECTS)
    ]
