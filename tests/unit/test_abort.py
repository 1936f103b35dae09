"""Abort criteria on the in-memory services and the worker batches (`ShardBatch`), with a manual
clock: the decision's figures, the fence, the `aborted` end, one alert, the task's pause.

The scenario is the issue's: 20 shards, `noop` failing 30 % of them (one attempt each),
`abort: {failure_percent: 20, min_executed: 10}`. Workers run the messages in batches of five;
each batch commits its completions together and the commit's instance read decides.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import timedelta
from typing import Any, cast

import pytest

from iotsched import bootstrap
from iotsched.adapters.memory.queues import MemoryShardQueue
from iotsched.clock import ManualClock
from iotsched.core.abort import abort_figures, decide_abort, owes_pause, pause_note
from iotsched.core.alert_message import Alert
from iotsched.core.decisions import decide_follow_ups
from iotsched.core.instance_record import (
    FollowUp,
    InstanceRecord,
    InstanceStatus,
)
from iotsched.core.shard_message import ShardMessage
from iotsched.core.shard_record import (
    ShardRecord,
    ShardStatus,
)
from iotsched.core.task_fleet_safety import Abort
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.execution.batch import ShardBatch
from iotsched.services.execution.dead_letters import handle_dead_letter
from iotsched.services.execution.outcomes import (
    Delivery,
    PendingShard,
    ShardOutcome,
)
from iotsched.services.execution.sweep import sweep
from iotsched.services.scheduling.tick import dispatch_tick
from iotsched.services.wiring import Wiring
from tests.support import T0, instance, task

S = timedelta(seconds=1)
SHARDS = 20
#: 6 of 20 (30 %); three of them among the first ten, so the first ten ended decide.
FAILING = [1, 4, 7, 12, 15, 18]
ABORT = {"failure_percent": 20, "min_executed": 10}
FLEET = f"fleet@{T0:%Y-%m-%dT%H:%MZ}"


class Timers:
    """A batch timer nobody fires: commits happen when the test calls them."""

    def __call__(self, delay_s: float, call: Any) -> Any:
        return self

    def cancel(self) -> None:
        """Nothing scheduled."""


class Sink:
    """The alert sink, counting every publish call (the memory sink dedupes by id)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: list[Alert] = []

    def publish(self, alert: Alert) -> None:
        self.calls.append(alert)
        self.inner.publish(alert)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def fleet(clock: ManualClock, **fields: Any) -> tuple[Wiring, Sink, list[ShardMessage]]:
    """The fleet task, fired at T0: its shard messages, in order."""
    services = bootstrap.build_memory(clock=clock)
    sink = Sink(services.alerts)
    services = dataclasses.replace(services, alerts=cast("Any", sink))
    definition: dict[str, Any] = {
        "trigger": {"rate": "1h"},
        "sharding": {"strategy": "static", "shards": [{"n": i} for i in range(SHARDS)]},
        "retry": {"max_attempts": 1},
        "params": {"fail": FAILING},
        "abort": ABORT,
        **fields,
    }
    apply_tasks([task("fleet", **definition)], services.tasks, now=T0 - 3600 * S)
    clock.set(T0 + 3 * S)
    dispatch_tick(clock.now(), services)
    return services, sink, list(cast("MemoryShardQueue", services.queue).sent)


def run_batch(services: Wiring, messages: Sequence[ShardMessage], tag: str) -> list[Any]:
    """One worker invocation: its messages run in turn, then their completions commit."""
    batch = ShardBatch(services, worker=f"w-{tag}", timer=Timers())
    results = [batch.run(Delivery(m.model_dump_json(), f"{tag}-{m.shard}")) for m in messages]
    batch.commit()
    return results


def shards(services: Wiring) -> list[ShardRecord]:
    return services.instances.list_shards(FLEET)


def the_instance(services: Wiring) -> InstanceRecord:
    found = services.instances.get_instance(FLEET)
    assert found is not None
    return found


def aborted_alerts(calls: Sequence[Alert]) -> list[Alert]:
    return [a for a in calls if a.type == "instance_aborted"]


# -- the decision (core) ---------------------------------------------------------------------


def figures_of(
    abort: dict[str, Any], *, planned: int, remaining: int, failed: int
) -> tuple[bool, str]:
    record = instance(shards=planned, status=InstanceStatus.RUNNING).model_copy(
        update={
            "abort": Abort.model_validate(abort),
            "remaining": remaining,
            "failed_shards": failed,
        }
    )
    figures = abort_figures(record)
    assert figures is not None
    return figures.met, figures.reason()


def test_the_decision_waits_for_min_executed_then_compares_the_failed_share() -> None:
    # 9 ended, 9 failed: under min_executed, whatever the share
    assert figures_of(ABORT, planned=20, remaining=11, failed=9)[0] is False
    # 10 ended, 1 failed (10 %): under the share
    assert figures_of(ABORT, planned=20, remaining=10, failed=1)[0] is False
    # exactly 20 % is "at or above": no float rounding keeps 2 of 10 under 20
    assert figures_of(ABORT, planned=20, remaining=10, failed=2) == (
        True,
        "2 of 10 ended shards failed (20%): at or above 20% after at least 10",
    )
    assert figures_of(ABORT, planned=20, remaining=10, failed=3)[1] == (
        "3 of 10 ended shards failed (30%): at or above 20% after at least 10"
    )
    third = {"failure_percent": 33.3, "min_executed": 3}
    assert figures_of(third, planned=5, remaining=2, failed=1) == (
        True,
        "1 of 3 ended shards failed (33.3%): at or above 33.3% after at least 3",
    )


def test_only_an_open_instance_with_criteria_is_decided() -> None:
    record = instance(shards=4, status=InstanceStatus.RUNNING).model_copy(
        update={"remaining": 0, "failed_shards": 4}
    )
    assert decide_abort(record) is None  # no criteria
    with_abort = record.model_copy(update={"abort": Abort(failure_percent=50, min_executed=1)})
    assert decide_abort(with_abort) is not None
    for status in (InstanceStatus.REDUCING, InstanceStatus.QUEUED, InstanceStatus.FAILED):
        assert decide_abort(with_abort.model_copy(update={"status": status})) is None


def test_a_rerun_of_some_shards_counts_those_it_sends() -> None:
    rerun = instance(shards=20, status=InstanceStatus.RUNNING).model_copy(
        update={
            "only": [3, 4, 5, 6],
            "remaining": 1,
            "failed_shards": 2,
            "abort": Abort(failure_percent=50, min_executed=3),
        }
    )
    figures = decide_abort(rerun)
    assert figures is not None and (figures.executed, figures.failed) == (3, 2)


def test_which_ends_pause_the_task_and_with_what_note() -> None:
    plain = instance(status=InstanceStatus.RUNNING)
    cancel = plain.model_copy(update={"abort": Abort(failure_percent=10)})
    pause = plain.model_copy(update={"abort": Abort(failure_percent=10, action="pause")})
    on_failure = plain.model_copy(update={"pause_on_failure": True})
    assert not owes_pause(plain, InstanceStatus.FAILED)
    assert not owes_pause(cancel, InstanceStatus.ABORTED)
    assert owes_pause(pause, InstanceStatus.ABORTED)
    assert not owes_pause(pause, InstanceStatus.FAILED)  # its criteria pause, not failure
    for status in (InstanceStatus.FAILED, InstanceStatus.TIMED_OUT, InstanceStatus.ABORTED):
        assert owes_pause(on_failure, status)
    for status in (InstanceStatus.SUCCEEDED, InstanceStatus.CANCELLED, InstanceStatus.SKIPPED):
        assert not owes_pause(on_failure, status)
    # the pause is owed right after the alert, before the hold and the dependents
    assert decide_follow_ups(on_failure, alert=True, ending=InstanceStatus.FAILED) == [
        FollowUp.ALERT,
        FollowUp.PAUSE,
        FollowUp.DEPENDENTS,
    ]
    assert decide_follow_ups(on_failure, alert=True) == [FollowUp.ALERT, FollowUp.DEPENDENTS]
    ended = pause.model_copy(update={"status": InstanceStatus.ABORTED, "reason": "3 of 10 ..."})
    assert pause_note(ended) == f"aborted {ended.instance_id}: 3 of 10 ..."
    failed = on_failure.model_copy(update={"status": InstanceStatus.TIMED_OUT, "reason": None})
    assert pause_note(failed) == f"{failed.instance_id} ended timed_out"


# -- the scenario (services, worker batches) ---------------------------------------------------


def test_the_issue_scenario_aborts_once_and_starts_nothing_after_the_decision(
    clock: ManualClock,
) -> None:
    services, sink, messages = fleet(clock)
    assert len(messages) == SHARDS
    # batch 1: 5 ended, 2 failed (40 %) but under min_executed: still running
    run_batch(services, messages[0:5], "a")
    assert the_instance(services).status is InstanceStatus.RUNNING
    # batch 2: 10 ended, 3 failed (30 %): the commit's read decides
    clock.advance(S)
    run_batch(services, messages[5:10], "b")
    aborted = the_instance(services)
    assert aborted.status is InstanceStatus.ABORTED
    assert aborted.reason == "3 of 10 ended shards failed (30%): at or above 20% after at least 10"
    decided_at = aborted.finished_at
    assert decided_at is not None
    assert services.instances.starts_closed(FLEET)
    # the rest are delivered afterwards, by other workers: none starts
    clock.advance(S)
    results = run_batch(services, messages[10:15], "c") + run_batch(services, messages[15:], "d")
    assert results == [ShardOutcome.NOT_STARTED] * 10
    started = [a.started_at for s in shards(services) for a in s.attempts]
    assert len(started) == 10 and all(at <= decided_at for at in started)
    assert sorted(s.index for s in shards(services)) == list(range(10))
    # exactly one alert, with the figures; nothing left owing, nothing reopened by the sweeper
    [alert] = aborted_alerts(sink.calls)
    assert alert.alert_id == f"{FLEET}#aborted" and alert.status == "aborted"
    assert alert.reason == aborted.reason and alert.failed_shard_count == 3
    assert the_instance(services).owed == []
    clock.advance(3600 * S)
    sweep(services)
    assert the_instance(services).status is InstanceStatus.ABORTED
    assert aborted_alerts(sink.calls) == [alert]
    task = services.tasks.get_task("fleet")
    assert task is not None and not task.paused  # action: cancel


def test_a_worker_racing_the_decision_does_not_start_its_shard(clock: ManualClock) -> None:
    """A worker read the instance open before the decision (its batch's shared read), and
    starts a shard only after the fence closed: it takes the lease, the fence it reads then
    is closed, and it gives the lease back (unused) without running its handler."""
    services, sink, messages = fleet(clock)
    racer = ShardBatch(services, worker="racer", timer=Timers())
    # the racer's batch runs one shard first: its read of the instance (running) is shared by
    # its next messages for a second
    first = racer.run(Delivery(messages[19].model_dump_json(), "r-19"))
    assert isinstance(first, PendingShard)
    run_batch(services, messages[0:10], "decider")
    assert the_instance(services).status is InstanceStatus.ABORTED
    assert racer.reads.get(FLEET) is not None
    assert cast("InstanceRecord", racer.reads.get(FLEET)).status is InstanceStatus.RUNNING
    # its next message: the stale read says running; the fence after the lease says closed
    assert racer.run(Delivery(messages[10].model_dump_json(), "r-10")) is (ShardOutcome.NOT_STARTED)
    # its lease given back, unused: no record, as a shard no worker reached
    assert services.instances.get_shard(FLEET, 10) is None
    racer.commit()  # the shard it ran before the decision ends cancelled (its handler saw it)
    assert len(aborted_alerts(sink.calls)) == 1


def test_action_pause_pauses_the_task_with_a_note(clock: ManualClock) -> None:
    services, sink, messages = fleet(clock, abort={**ABORT, "action": "pause"})
    run_batch(services, messages[:10], "a")
    aborted = the_instance(services)
    assert aborted.status is InstanceStatus.ABORTED and aborted.owed == []
    task = services.tasks.get_task("fleet")
    assert task is not None and task.paused
    assert task.pause_note == f"aborted {FLEET}: {aborted.reason}"
    assert services.tasks.due_tasks(T0 + 10 * 3600 * S) == []
    assert len(aborted_alerts(sink.calls)) == 1


def test_the_last_completion_decides_too(clock: ManualClock) -> None:
    """Criteria met only when the counter drains: the instance ends aborted, not failed."""
    services, sink, messages = fleet(
        clock,
        sharding={"strategy": "static", "shards": [{"n": i} for i in range(4)]},
        params={"fail": [3]},
        abort={"failure_percent": 25, "min_executed": 4},
    )
    run_batch(services, messages, "a")
    ended = the_instance(services)
    assert ended.status is InstanceStatus.ABORTED
    assert ended.reason == "1 of 4 ended shards failed (25%): at or above 25% after at least 4"
    assert len(aborted_alerts(sink.calls)) == 1
    assert not [a for a in sink.calls if a.type == "instance_failed"]


def test_criteria_not_met_end_as_before(clock: ManualClock) -> None:
    services, sink, messages = fleet(clock, params={"fail": [19]})
    run_batch(services, messages[:10], "a")
    run_batch(services, messages[10:], "b")
    ended = the_instance(services)
    assert ended.status is InstanceStatus.FAILED  # 1 of 20 (5 %)
    assert [a.type for a in sink.calls] == ["instance_failed"]


class Died(BaseException):
    """The deciding process died here."""


class DieOnce:
    """Faults: the first fence closed is the decider's last act."""

    def __init__(self) -> None:
        self.armed = True

    def after_claim(self, instance_id: str) -> None:
        """No death after claims."""

    def at(self, point: str, instance_id: str) -> None:
        if point == "starts_closed" and self.armed:
            self.armed = False
            raise Died(point)


def test_a_lost_decision_is_taken_again_by_the_sweeper(clock: ManualClock) -> None:
    """The decider died between the fence and the end: the instance is open, its starts
    closed; the sweeper's pass over open instances decides again and ends it, once."""

    services, sink, messages = fleet(clock)
    services = dataclasses.replace(services, faults=DieOnce())
    batch = ShardBatch(services, worker="w", timer=Timers())
    for m in messages[:10]:
        batch.run(Delivery(m.model_dump_json(), f"d-{m.shard}"))
    with pytest.raises(Died):
        batch.commit()
    assert the_instance(services).status is InstanceStatus.RUNNING
    assert services.instances.starts_closed(FLEET)
    clock.advance(60 * S)
    report = sweep(services)
    assert FLEET in report.finalized
    assert the_instance(services).status is InstanceStatus.ABORTED
    assert run_batch(services, messages[10:12], "late") == [ShardOutcome.NOT_STARTED] * 2
    assert len(aborted_alerts(sink.calls)) == 1


def test_starts_fenced_out_after_a_lost_decision_decide_it_again(clock: ManualClock) -> None:
    """The decider died between the fence and the end; shards delivered meanwhile take their
    leases, find the fence closed and give them back unrun, counting nothing: the sweeper
    decides again on the same figures."""

    services, sink, messages = fleet(clock)
    services = dataclasses.replace(services, faults=DieOnce())
    batch = ShardBatch(services, worker="w", timer=Timers())
    for m in messages[:10]:
        batch.run(Delivery(m.model_dump_json(), f"d-{m.shard}"))
    with pytest.raises(Died):
        batch.commit()
    fenced = the_instance(services)
    assert fenced.status is InstanceStatus.RUNNING
    assert run_batch(services, messages[10:12], "late") == [ShardOutcome.NOT_STARTED] * 2
    late = [services.instances.get_shard(FLEET, n) for n in (10, 11)]
    assert late == [None, None]
    after = the_instance(services)  # the late two not counted
    assert (after.remaining, after.failed_shards) == (fenced.remaining, fenced.failed_shards)
    clock.advance(60 * S)
    sweep(services)
    ended = the_instance(services)
    assert ended.status is InstanceStatus.ABORTED
    assert ended.reason == "3 of 10 ended shards failed (30%): at or above 20% after at least 10"
    assert len(aborted_alerts(sink.calls)) == 1


def test_a_task_without_criteria_reads_and_writes_nothing_more(clock: ManualClock) -> None:
    """No gate is touched and the completions' reads are those of any task."""
    services, _sink, messages = fleet(clock, abort=None)
    calls: list[str] = []
    inner = services.instances

    class Spy:
        def __getattr__(self, name: str) -> Any:
            if name in ("starts_closed", "take_seat", "close_starts", "end_instance"):
                calls.append(name)
            return getattr(inner, name)

    spied = dataclasses.replace(services, instances=cast("Any", Spy()))
    run_batch(spied, messages[:10], "a")
    run_batch(spied, messages[10:], "b")
    assert the_instance(services).status is InstanceStatus.FAILED
    assert calls == []


# -- what follows an aborted instance, and pause on failure ------------------------------------


def test_dependents_of_an_aborted_parent_are_skipped_and_it_can_be_rerun(
    clock: ManualClock,
) -> None:
    from iotsched.services.operations.actions import rerun_instance

    services, _sink, messages = fleet(clock)
    apply_tasks([task("child", trigger={"after": ["fleet"]})], services.tasks, now=T0)
    run_batch(services, messages[:10], "a")
    assert the_instance(services).status is InstanceStatus.ABORTED
    [child] = services.instances.list_instances(task_id="child")
    assert child.status is InstanceStatus.SKIPPED
    assert child.reason == "upstream_failed: fleet aborted"
    rerun = rerun_instance(FLEET, services, failed_only=True)
    # the failed shards and those never started; its own gate, open
    assert rerun.only == [1, 4, 7, *range(10, SHARDS)]
    assert rerun.abort is not None and rerun.status is InstanceStatus.RUNNING
    assert not services.instances.starts_closed(rerun.instance_id)


@pytest.mark.parametrize("fail", [[1], []])
def test_pause_on_failure_pauses_after_a_failed_instance_only(
    clock: ManualClock, fail: list[int]
) -> None:
    services, _sink, messages = fleet(
        clock,
        sharding={"strategy": "static", "shards": [{"n": 0}, {"n": 1}]},
        params={"fail": fail},
        abort=None,
        pause_on_failure=True,
    )
    run_batch(services, messages, "a")
    ended = the_instance(services)
    stored = services.tasks.get_task("fleet")
    assert stored is not None and ended.owed == []
    if fail:
        assert ended.status is InstanceStatus.FAILED
        assert stored.paused and stored.pause_note is not None
        assert stored.pause_note.startswith(f"{FLEET} ended failed")
    else:
        assert ended.status is InstanceStatus.SUCCEEDED
        assert not stored.paused and stored.pause_note is None


def test_pause_on_failure_pauses_after_an_instance_timeout(clock: ManualClock) -> None:
    services, _sink, _messages = fleet(clock, abort=None, pause_on_failure=True)
    clock.advance(2 * 3600 * S)  # past instance_timeout_s (an hour): nothing ran
    sweep(services)
    assert the_instance(services).status is InstanceStatus.TIMED_OUT
    stored = services.tasks.get_task("fleet")
    assert stored is not None and stored.paused
    assert stored.pause_note == f"{FLEET} ended timed_out: instance_timeout"


def test_a_scheduler_pause_keeps_an_operator_s_note(clock: ManualClock) -> None:
    from iotsched.services.definitions.control import pause_task

    services, _sink, messages = fleet(clock, abort={**ABORT, "action": "pause"})
    pause_task("fleet", services, note="maintenance by ops")
    run_batch(services, messages[:10], "a")
    assert the_instance(services).status is InstanceStatus.ABORTED
    stored = services.tasks.get_task("fleet")
    assert stored is not None and stored.paused and stored.pause_note == "maintenance by ops"


# -- the other completions that end shards -------------------------------------------------------


def test_a_dead_letter_decides(clock: ManualClock) -> None:
    services, sink, messages = fleet(clock, abort={"failure_percent": 50, "min_executed": 2})
    run_batch(services, messages[1:2], "a")  # shard 1 fails: 1 of 1 ended
    assert the_instance(services).status is InstanceStatus.RUNNING
    # shard 2's handler ran and its worker crashed, every receive: its message is dead-lettered
    services.instances.take_lease(
        FLEET,
        2,
        bounds={"n": 2},
        worker="crashing",
        now=clock.now(),
        lease_until=clock.now() + 60 * S,
        max_attempts=1,
    )
    assert handle_dead_letter(messages[2].model_dump_json(), services) == "dead_lettered"
    ended = the_instance(services)
    assert ended.status is InstanceStatus.ABORTED
    assert ended.reason == "2 of 2 ended shards failed (100%): at or above 50% after at least 2"
    assert len(aborted_alerts(sink.calls)) == 1


def test_an_exhausted_lease_ended_by_the_sweeper_decides(clock: ManualClock) -> None:
    services, sink, messages = fleet(clock, abort={"failure_percent": 50, "min_executed": 2})
    run_batch(services, messages[1:2], "a")  # shard 1 fails
    # shard 2's only attempt's worker dies: its lease expires with no attempt left
    taken = services.instances.take_lease(
        FLEET,
        2,
        bounds={"n": 2},
        worker="dead",
        now=clock.now(),
        lease_until=clock.now() + 20 * S,
        max_attempts=1,
        indexed=True,
    )
    assert taken.taken
    clock.advance(120 * S)
    report = sweep(services)
    assert f"{FLEET}#2" in report.timed_out_shards
    ended = the_instance(services)
    assert ended.status is InstanceStatus.ABORTED
    assert ended.reason == "2 of 2 ended shards failed (100%): at or above 50% after at least 2"
    assert len(aborted_alerts(sink.calls)) == 1


def test_the_aborted_alert_lists_the_failures_not_the_shards_the_abort_cancelled(
    clock: ManualClock,
) -> None:
    from iotsched.services.notices.alerts import instance_alert

    services, _sink, messages = fleet(clock)
    run_batch(services, messages[:10], "a")
    ended = the_instance(services)
    shards_now = shards(services)
    cancelled = shards_now[0].model_copy(update={"index": 10, "status": ShardStatus.CANCELLED})
    alert = instance_alert(ended, [*shards_now, cancelled])
    assert alert.type == "instance_aborted" and alert.failed_shard_count == 3
    assert [s["shard"] for s in alert.failed_shards] == [1, 4, 7]


def test_an_aborted_instances_failed_shards_count_no_shard_the_abort_cancelled(
    clock: ManualClock,
) -> None:
    """Two shards run when the abort lands; their handlers see the cancel and end `cancelled`:
    the instance's `failed_shards` (the abort's figure, the API's, the alert's) is the three
    shards that failed, not five."""
    services, _, messages = fleet(clock)
    running = [
        services.instances.take_lease(
            FLEET,
            n,
            bounds={"n": n},
            worker="slow",
            now=clock.now(),
            lease_until=clock.now() + 300 * S,
            max_attempts=1,
        )
        for n in (10, 11)
    ]
    run_batch(services, messages[:10], "decider")
    assert the_instance(services).status is InstanceStatus.ABORTED
    for lease in running:  # what the slow worker writes once `ctx.cancelled()` turned true
        attempt = lease.shard.attempts[-1].model_copy(
            update={"ended_at": clock.now(), "duration_ms": 0, "outcome": "cancelled"}
        )
        services.instances.complete_shard(
            FLEET, lease.shard.index, status=ShardStatus.CANCELLED, attempt=attempt
        )
    aborted = the_instance(services)
    assert (aborted.failed_shards, aborted.remaining) == (3, SHARDS - 12)


def test_a_shard_dead_lettered_before_it_ran_fails_its_instance_but_no_abort(
    clock: ManualClock,
) -> None:
    """Two messages reach the DLQ before any worker ran them (a hot key throttled each try of
    their start, under the previous version): the devices did not fail, so the abort at 50 %
    after 2 does not fire; the instance, whose work was not all done, ends `failed`."""
    services, sink, messages = fleet(
        clock, params={}, abort={"failure_percent": 50, "min_executed": 2}
    )
    for m in messages[:2]:
        assert handle_dead_letter(m.model_dump_json(), services) == "dead_lettered"
    waiting = the_instance(services)
    assert waiting.status is InstanceStatus.RUNNING
    assert (waiting.failed_shards, waiting.unrun_shards) == (2, 2)
    run_batch(services, messages[2:], "rest")
    ended = the_instance(services)
    assert ended.status is InstanceStatus.FAILED
    assert aborted_alerts(sink.calls) == []


def test_a_batch_that_found_the_fence_closed_starts_nothing_more_of_that_instance(
    clock: ManualClock,
) -> None:
    """The racer's batch reads the instance open (its shared read), finds the fence closed at
    its first start after the decision: its later messages of that instance take no lease."""
    services, _, messages = fleet(clock)
    racer = ShardBatch(services, worker="racer", timer=Timers())
    assert isinstance(racer.run(Delivery(messages[19].model_dump_json(), "r-19")), PendingShard)
    run_batch(services, messages[0:10], "decider")
    leases: list[int] = []
    take = services.instances.take_lease

    def counted(*args: Any, **kwargs: Any) -> Any:
        leases.append(args[1])
        return take(*args, **kwargs)

    setattr(services.instances, "take_lease", counted)  # noqa: B010
    outcomes = [racer.run(Delivery(m.model_dump_json(), f"r-{m.shard}")) for m in messages[10:14]]
    assert outcomes == [ShardOutcome.NOT_STARTED] * 4
    assert leases == [10]  # the first found the fence closed; the others took no lease
