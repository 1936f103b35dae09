"""A zombie's interruption (or its timeout) that arrives while its heartbeat commits the batch's
finished shards is delivered to its handler after that commit, not inside it: the commit's
outcomes stand and the handler is stopped."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any, cast

import pytest

from iotsched.clock import ManualClock
from iotsched.context import ShardContext
from iotsched.ports.shards import (
    CompletionVerdict,
    ShardCompletion,
    StaleAttemptError,
)
from iotsched.services.execution.batch import ShardBatch
from iotsched.services.execution.outcomes import (
    PendingShard,
    RetryShardError,
    ShardOutcome,
)
from iotsched.services.execution.schedules import HeldRenewals
from tests.support import T0
from tests.unit.test_shard_batch import Spy, Timers, delivery, setup

S = timedelta(seconds=1)


def alarm_went_off() -> None:
    """Wait (bounded by progress) until the handler's alarm has fired and been handled."""
    deadline = time.monotonic() + 30
    while signal.getitimer(signal.ITIMER_REAL)[0] > 0 and time.monotonic() < deadline:
        time.sleep(0.001)
    assert signal.getitimer(signal.ITIMER_REAL)[0] == 0, "the alarm never went off"
    time.sleep(0.01)  # its Python handler runs at the next bytecode on this thread


def test_a_zombie_s_interruption_during_its_heartbeat_s_commit_waits_for_the_commit() -> None:
    clock = ManualClock(T0)
    state: dict[str, Any] = {}

    def work(ctx: ShardContext) -> None:
        if ctx.shard == 0:
            return
        try:
            ctx.heartbeat()  # commits shard 0, during which this attempt is taken over
        except StaleAttemptError:
            state["interrupted"] = "in the heartbeat"
            raise
        try:  # not interrupted in the heartbeat: the handler goes on as a zombie
            deadline = time.monotonic() + 2
            while time.monotonic() < deadline:
                time.sleep(0.01)
        except StaleAttemptError:
            state["interrupted"] = "after the heartbeat"
            raise
        state["interrupted"] = "never"

    services, spy, messages = setup(clock, ("a", 2), handlers={"work": work})
    held = cast("HeldRenewals", services.renewals)
    store = services.instances

    class TakenOverMidCommit(Spy):
        def complete_shards(
            self, completions: Sequence[ShardCompletion]
        ) -> list[CompletionVerdict]:
            verdicts = super().complete_shards(completions)
            # While this commit is under way, attempt 1 of shard 1 loses its lease to w2 and
            # its renewal is refused: the renewal thread interrupts the handler.
            clock.advance(120 * S)
            (shard1,) = [s for s in store.list_shards(messages[1].instance_id) if s.index == 1]
            assert shard1.lease_until is not None
            taken = store.take_lease(
                messages[1].instance_id,
                1,
                bounds=messages[1].bounds,
                worker="w2",
                now=clock.now(),
                lease_until=clock.now() + 20 * S,
                max_attempts=messages[1].max_attempts,
            )
            assert taken.taken
            held.step()
            alarm_went_off()  # the interruption arrives while the commit runs
            return verdicts

    spy = TakenOverMidCommit(spy._store)
    services = services.__class__(**{**services.__dict__, "instances": spy})
    assert threading.current_thread() is threading.main_thread()
    batch = ShardBatch(services, worker="w", timer=Timers(), renewals=held)
    first = batch.run(delivery(messages[0]))
    assert isinstance(first, PendingShard)
    assert batch.run(delivery(messages[1], 1)) is ShardOutcome.STALE
    # The commit's outcome stands: shard 0 succeeded and is acknowledged, not sent back.
    assert (first.outcome, first.error) == (ShardOutcome.SUCCEEDED, None)
    assert state["interrupted"] == "in the heartbeat"


def test_a_timeout_during_a_heartbeat_s_commit_ends_the_attempt_timed_out_after_it() -> None:
    clock = ManualClock(T0)
    state: dict[str, Any] = {}

    def work(ctx: ShardContext) -> None:
        if ctx.shard == 0:
            return
        try:
            ctx.heartbeat()  # its commit of shard 0 outlasts this attempt's timeout_s
        except Exception as exc:
            state["raised"] = type(exc).__name__
            raise
        state["raised"] = None

    services, spy, messages = setup(clock, ("a", 2), handlers={"work": work}, timeout_s=1)

    class SlowCommit(Spy):
        def complete_shards(
            self, completions: Sequence[ShardCompletion]
        ) -> list[CompletionVerdict]:
            verdicts = super().complete_shards(completions)
            if len(self.commits) == 1:
                alarm_went_off()  # the handler's 1 s runs out while its heartbeat commits
            return verdicts

    spy = SlowCommit(spy._store)
    services = services.__class__(**{**services.__dict__, "instances": spy})
    batch = ShardBatch(services, worker="w", timer=Timers(), renewals=services.renewals)
    first = batch.run(delivery(messages[0]))
    assert isinstance(first, PendingShard)
    with pytest.raises(RetryShardError, match="timeout_s=1"):  # timed out, attempts left
        batch.run(delivery(messages[1], 1))
    assert (first.outcome, first.error) == (ShardOutcome.SUCCEEDED, None)
    assert state["raised"] == "AttemptTimeoutError"
