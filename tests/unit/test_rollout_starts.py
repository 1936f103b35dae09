"""Shard starts on the in-memory services, the manual clock and a worker loop: rollout rates
(shards and devices per minute), ramps, maintenance windows at shard start, paced sends and
shard spread. Every message reaches a worker once it is visible (its delay on the clock), the
sweeper runs every minute, and the starts are read back from the shard records."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest

from iotsched import bootstrap
from iotsched.adapters.memory.queues import MemoryShardQueue
from iotsched.api.models import ShardView
from iotsched.clock import ManualClock
from iotsched.core.instance_record import (
    InstanceRecord,
    InstanceStatus,
)
from iotsched.core.shard_record import ShardStatus
from iotsched.core.task_fleet_safety import (
    Ramp,
    Rollout,
)
from iotsched.core.timeutil import floor_minute
from iotsched.ports.devices import DeviceDirectory
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.definitions.task_file import parse_task_file
from iotsched.services.execution.batch import run_shard
from iotsched.services.execution.outcomes import (
    Delivery,
    RetryShardError,
)
from iotsched.services.execution.sweep import sweep
from iotsched.services.fleet.rollout import (
    device_count,
    rate_limit,
    start_weight,
)
from iotsched.services.operations.views import shard_views
from iotsched.services.scheduling.send import shard_messages
from iotsched.services.scheduling.tick import (
    BATCH_FROM,
    dispatch_tick,
)
from iotsched.services.wiring import Wiring

T = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
S = timedelta(seconds=1)
M = timedelta(minutes=1)


class WorkerLoop:
    """The memory queue's messages delivered to `run_shard` as they become visible, and the
    sweeper every minute, on a manual clock."""

    def __init__(
        self,
        task: Mapping[str, Any],
        *,
        start: datetime = T - M,
        directory: DeviceDirectory | None = None,
    ) -> None:
        self.clock = ManualClock(start)
        self.services: Wiring = bootstrap.build_memory(clock=self.clock, directory=directory)
        definitions = parse_task_file({"tasks": [dict(task)]}, handlers=self.services.handlers)
        apply_tasks(definitions, self.services.tasks, now=self.clock.now())
        self.queue = cast("MemoryShardQueue", self.services.queue)
        self.delivered = 0  # messages of `queue.sent` handed to a worker
        self.later: list[tuple[datetime, int]] = []  # retried deliveries: (visible at, message)
        self.outcomes: Counter[str] = Counter()
        self.receives: Counter[int] = Counter()  # deliveries of each message, as SQS counts

    def fire(self, at: datetime) -> None:
        self.clock.set(at)
        dispatch_tick(at, self.services)
        self.work()

    def work(self) -> None:
        """Deliver every message visible now (and those they make visible now)."""
        now = self.clock.now()
        progressed = True
        while progressed:
            progressed = False
            for n in range(self.delivered, len(self.queue.sent)):
                visible = self.queue.visible_at[n]
                if visible is not None and visible > now:
                    continue
                self._deliver(n)
                progressed = True
            due = [item for item in self.later if item[0] <= now]
            for item in due:
                self.later.remove(item)
                self._deliver(item[1])
                progressed = True

    def _deliver(self, n: int) -> None:
        # Out of order is fine: a later message may be visible before an earlier delayed one.
        sent = self.queue.sent
        if n >= self.delivered:
            # Move it into the delivered prefix by swapping (keeps delays aligned).
            for lst in (sent, self.queue.delays, self.queue.visible_at):
                lst.insert(self.delivered, lst.pop(n))
            n = self.delivered
            self.delivered += 1
        message = sent[n]
        receipt = f"r{n}-{self.clock.now().isoformat()}"
        self.receives[n] += 1
        try:
            outcome = run_shard(
                Delivery(
                    body=message.model_dump_json(),
                    receipt_handle=receipt,
                    receive_count=self.receives[n],
                ),
                self.services,
                worker="w",
            )
            self.outcomes[outcome.value] += 1
        except RetryShardError:
            self.outcomes["retried"] += 1
            delay = self.queue.visibility.get(receipt, 0)
            self.later.append((self.clock.now() + delay * S, n))

    def run_until(self, end: datetime, *, ticks: bool = False) -> None:
        """Minute by minute (a sweep each, and a tick if `ticks`; deliveries at every visible
        instant between)."""
        while self.clock.now() < end:
            now = self.clock.now()
            following = floor_minute(now) + M
            pending = [
                v
                for v in self.queue.visible_at[self.delivered :]
                if v is not None and now < v < following
            ] + [at for at, _ in self.later if now < at < following]
            self.clock.set(min([following, *pending]))
            if self.clock.now() == following:
                if ticks:
                    dispatch_tick(following, self.services)
                sweep(self.services)
            self.work()

    def instance(self, instance_id: str) -> InstanceRecord:
        found = self.services.instances.get_instance(instance_id)
        assert found is not None
        return found

    def starts_per_minute(self, instance_id: str) -> dict[datetime, int]:
        counts: Counter[datetime] = Counter()
        for shard in self.services.instances.list_shards(instance_id):
            for attempt in shard.attempts:
                counts[floor_minute(attempt.started_at)] += 1
        return dict(sorted(counts.items()))

    def devices_per_minute(self, instance_id: str) -> dict[datetime, int]:
        counts: Counter[datetime] = Counter()
        for shard in self.services.instances.list_shards(instance_id):
            for attempt in shard.attempts:
                counts[floor_minute(attempt.started_at)] += (
                    shard.bounds["end"] - shard.bounds["start"]
                )
        return dict(sorted(counts.items()))

    def runs_per_shard(self, instance_id: str) -> list[int]:
        return [len(s.attempts) for s in self.services.instances.list_shards(instance_id)]


def fleet_task(**fields: Any) -> dict[str, Any]:
    return {
        "id": "fw",
        "handler": "noop",
        "trigger": {"rate": "1d", "anchor": fields.pop("anchor", "2026-01-01T12:00:00Z")},
        "sharding": fields.pop("sharding", {"strategy": "id_range", "shards": 20, "id_max": 2000}),
        **fields,
    }


ID = "fw@2026-11-29T12:00Z"


def test_twenty_shards_at_five_a_minute_start_over_four_minutes() -> None:
    loop = WorkerLoop(fleet_task(rollout={"max_shards_per_minute": 5}))
    loop.fire(T)
    # Paced: the dispatch sent the first minute's five, and the rest waits for the sweeper.
    assert len(loop.queue.sent) == 5
    assert loop.instance(ID).status is InstanceStatus.PLANNING
    loop.run_until(T + 10 * M)
    assert loop.starts_per_minute(ID) == {T + n * M: 5 for n in range(4)}
    assert loop.runs_per_shard(ID) == [1] * 20
    assert loop.instance(ID).status is InstanceStatus.SUCCEEDED
    assert len(loop.queue.sent) == 20  # no message waited on the queue: nothing was re-sent
    assert loop.outcomes == Counter({"succeeded": 20})


def test_shards_all_on_the_queue_at_once_wait_for_their_minute() -> None:
    loop = WorkerLoop(fleet_task(rollout={"max_shards_per_minute": 5}))
    loop.fire(T)
    # Every shard's message sent again at once (a duplicated send): the gate holds the rate.
    instance = loop.instance(ID)
    loop.services.queue.send(shard_messages(instance)[5:])
    loop.work()
    loop.run_until(T + 10 * M)
    per_minute = loop.starts_per_minute(ID)
    assert max(per_minute.values()) <= 5
    assert per_minute == {T + n * M: 5 for n in range(4)}
    assert loop.runs_per_shard(ID) == [1] * 20
    assert loop.outcomes["deferred"] > 0
    # A deferred copy comes back at its seat's minute (at most SQS's 900 s away).
    assert all(0 < d <= 900 for d in loop.queue.delays if d)


def test_a_ramp_doubles_the_rate_after_each_k_successes() -> None:
    loop = WorkerLoop(
        fleet_task(
            rollout={
                "max_shards_per_minute": 8,
                "ramp": {"base": 1, "factor": 2, "every_succeeded": 2},
            }
        )
    )
    loop.fire(T)
    loop.run_until(T + 15 * M)
    # 0 and 1 succeeded: 1 a minute; 2: 2; 4: 4; 8: 8 (the cap); then the last 4.
    assert list(loop.starts_per_minute(ID).values()) == [1, 1, 2, 4, 8, 4]
    assert loop.runs_per_shard(ID) == [1] * 20
    assert loop.instance(ID).status is InstanceStatus.SUCCEEDED


SIZES = [100, 300, 50, 500, 200, 250, 1200]


def static_ranges(sizes: list[int]) -> list[dict[str, int]]:
    bounds, start = [], 0
    for size in sizes:
        bounds.append({"start": start, "end": start + size})
        start += size
    return bounds


def test_a_device_rate_counts_each_shards_devices() -> None:
    loop = WorkerLoop(
        fleet_task(
            rollout={"max_devices_per_minute": 600},
            sharding={"strategy": "static", "shards": static_ranges(SIZES)},
        )
    )
    loop.fire(T)
    loop.run_until(T + 10 * M)
    # 100+300+50 (500 more would pass 600); 500; 200+250; 1200 alone (heavier than the rate,
    # in a minute of its own).
    assert list(loop.devices_per_minute(ID).values()) == [450, 500, 450, 1200]
    assert loop.runs_per_shard(ID) == [1] * 7


def test_a_device_rate_over_id_range_shards_of_different_sizes() -> None:
    loop = WorkerLoop(
        fleet_task(
            rollout={"max_devices_per_minute": 5},
            sharding={"strategy": "id_range", "shards": 4, "id_max": 10},  # 2, 3, 2, 3 ids
        )
    )
    loop.fire(T)
    loop.run_until(T + 10 * M)
    assert list(loop.devices_per_minute(ID).values()) == [5, 5]
    assert list(loop.starts_per_minute(ID).values()) == [2, 2]


# -- windows at shard start ------------------------------------------------------------------

WINDOW = {"cron": "0 2 * * *", "duration": "2h", "timezone": "UTC"}
LATE = datetime(2026, 11, 29, 3, 58, tzinfo=UTC)
LATE_ID = "fw@2026-11-29T03:58Z"


def window_task(on_close: str, **fields: Any) -> dict[str, Any]:
    return fleet_task(
        anchor="2026-01-01T03:58:00Z",
        window={**WINDOW, "on_close": on_close},
        instance_timeout_s=3 * 86_400,
        **fields,
    )


def test_a_deferred_rollout_waits_for_the_next_opening_without_sending() -> None:
    loop = WorkerLoop(window_task("defer", rollout={"max_shards_per_minute": 5}), start=LATE - M)
    writes: list[tuple[str, datetime]] = []
    store = loop.services.instances
    for name in ("take_dispatch", "advance_dispatch"):
        method = getattr(store, name)

        def counted(*args: Any, _m: Any = method, _n: str = name, **kwargs: Any) -> Any:
            writes.append((_n, loop.clock.now()))
            return _m(*args, **kwargs)

        setattr(store, name, counted)
    loop.fire(LATE)
    loop.run_until(LATE + 24 * 60 * M)
    # The instance item is written at 03:59 (the next five), at 04:00 (closed: the lease moved
    # to the opening), then not at all until 02:00: no sweep in between tries to take it.
    closed = [
        at for _, at in writes if LATE + 3 * M <= at < datetime(2026, 11, 30, 2, 0, tzinfo=UTC)
    ]
    assert closed == []
    opens = datetime(2026, 11, 30, 2, 0, tzinfo=UTC)
    assert loop.starts_per_minute(LATE_ID) == {
        LATE: 5,
        LATE + M: 5,
        opens: 5,
        opens + M: 5,
    }
    assert loop.instance(LATE_ID).status is InstanceStatus.SUCCEEDED
    # While closed, nothing was on the queue: the 20 messages are the shards, sent once each.
    assert len(loop.queue.sent) == 20


def test_shards_reaching_a_worker_after_the_close_wait_in_hops() -> None:
    # No rollout: every message is sent at once, spread over 5 minutes (shard_spread_s), so
    # those delayed past 04:00 reach a worker with the window closed.
    loop = WorkerLoop(window_task("defer", shard_spread_s=300), start=LATE - M)
    loop.fire(LATE)
    loop.run_until(LATE + 24 * 60 * M)
    opens = datetime(2026, 11, 30, 2, 0, tzinfo=UTC)
    starts = loop.starts_per_minute(LATE_ID)
    assert sum(starts.values()) == 20
    assert all(m < LATE + 2 * M or opens <= m < opens + M for m in starts)
    late = sum(n for m, n in starts.items() if m >= opens)
    assert 0 < late < 20
    assert loop.runs_per_shard(LATE_ID) == [1] * 20
    # Each waiting shard hopped at most 900 s at a time: 22 h closed is 88 hops, each one
    # copy sent (and one receive, one delete) per 15 minutes of wait.
    copies = len(loop.queue.sent) - 20
    assert late * 80 <= copies <= late * 89
    assert max(loop.queue.delays) <= 900


def test_on_close_cancel_ends_the_instance_with_the_window() -> None:
    loop = WorkerLoop(window_task("cancel", rollout={"max_shards_per_minute": 5}), start=LATE - M)
    loop.fire(LATE)
    loop.run_until(LATE + 10 * M)
    instance = loop.instance(LATE_ID)
    assert (instance.status, instance.reason) == (InstanceStatus.CANCELLED, "window_closed")
    assert loop.starts_per_minute(LATE_ID) == {LATE: 5, LATE + M: 5}
    shards = loop.services.instances.list_shards(LATE_ID)
    assert [s.status for s in shards] == [ShardStatus.SUCCEEDED] * 10
    assert len(loop.queue.sent) == 10  # the other ten were never sent


def test_a_message_reaching_a_worker_after_a_cancel_window_closed_ends_the_instance() -> None:
    loop = WorkerLoop(window_task("cancel", shard_spread_s=300), start=LATE - M)
    loop.fire(LATE)
    loop.run_until(LATE + 10 * M)
    instance = loop.instance(LATE_ID)
    assert (instance.status, instance.reason) == (InstanceStatus.CANCELLED, "window_closed")
    started = sum(loop.starts_per_minute(LATE_ID).values())
    assert 0 < started < 20
    assert loop.outcomes["not_started"] == 20 - started


# -- shard spread ----------------------------------------------------------------------------


def test_shard_spread_delays_each_message_deterministically() -> None:
    loop = WorkerLoop(fleet_task(shard_spread_s=120))
    loop.fire(T)
    delays = list(loop.queue.delays)
    assert len(delays) == 20 and all(0 <= d <= 120 for d in delays)
    assert len(set(delays)) > 5  # spread, not one delay
    again = WorkerLoop(fleet_task(shard_spread_s=120))
    again.fire(T)
    assert again.queue.delays == delays  # every sender computes the same
    loop.run_until(T + 5 * M)
    assert loop.runs_per_shard(ID) == [1] * 20


def seat_writes(loop: WorkerLoop) -> list[int]:
    """The weight of each seat the loop's store sells from now on."""
    store = loop.services.instances
    sold: list[int] = []
    take = store.take_seat

    def counted(gate: str, **kwargs: Any) -> datetime | None:
        sold.append(kwargs.get("weight", 1))
        return take(gate, **kwargs)

    setattr(store, "take_seat", counted)  # noqa: B010
    return sold


def test_a_rollouts_minute_of_sends_takes_its_seats_in_one_write_and_its_starts_none() -> None:
    loop = WorkerLoop(
        fleet_task(
            rollout={"max_shards_per_minute": 50},
            abort={"failure_percent": 50, "min_executed": 10},
            sharding={"strategy": "id_range", "shards": 200, "id_max": 20_000},
        )
    )
    sold = seat_writes(loop)
    loop.fire(T)
    loop.run_until(T + 10 * M)
    assert loop.starts_per_minute(ID) == {T + n * M: 50 for n in range(4)}
    assert sold == [50] * 4  # a write a minute, not one a start
    assert loop.instance(ID).status is InstanceStatus.SUCCEEDED


def test_a_retry_takes_a_seat_of_its_own_so_no_minute_holds_more_than_the_rate() -> None:
    # Every shard's first attempt fails and is retried at once, inside its seat's minute: the
    # retries are starts, each counted, and never start on the seat their first attempt used.
    loop = WorkerLoop(
        fleet_task(
            rollout={"max_shards_per_minute": 5},
            retry={"max_attempts": 2, "backoff_s": 0},
            params={"fail_attempts": 1},
        )
    )
    loop.fire(T)
    loop.run_until(T + 20 * M)
    per_minute = loop.starts_per_minute(ID)
    assert sum(per_minute.values()) == 40  # 20 shards, two attempts each
    assert max(per_minute.values()) == 5
    assert loop.runs_per_shard(ID) == [2] * 20


def test_a_task_without_these_fields_sends_everything_at_once_undelayed() -> None:
    loop = WorkerLoop(fleet_task())
    gate_calls: list[object] = []
    store = loop.services.instances
    setattr(store, "take_seat", lambda *a, **k: gate_calls.append(a))  # noqa: B010
    setattr(store, "starts_closed", lambda *a, **k: gate_calls.append(a))  # noqa: B010
    loop.fire(T)
    assert gate_calls == []  # no gate read or write for a task without the policies
    assert len(loop.queue.sent) == 20 and set(loop.queue.delays) == {0}
    assert loop.starts_per_minute(ID) == {T: 20}


# -- the fence, a shared budget, what apply refuses -------------------------------------------


def test_an_abort_instance_passes_the_fence_and_starts_nothing_once_closed() -> None:
    loop = WorkerLoop(fleet_task(abort={"failure_percent": 20, "min_executed": 10}))
    loop.clock.set(T)
    dispatch_tick(T, loop.services)
    assert len(loop.queue.sent) == 20  # not paced: no rate
    for n in range(5):
        loop._deliver(n)
    loop.services.instances.close_starts(ID, "aborted: test")
    loop.work()
    assert loop.starts_per_minute(ID) == {T: 5}
    assert loop.outcomes == Counter({"succeeded": 5, "not_started": 15})
    # the 15 took their leases, read the fence closed and gave them back unused, unrun
    assert len(loop.services.instances.list_shards(ID)) == 5  # no record left after the close


def starts_of_every_instance(loop: WorkerLoop, minutes: int) -> dict[datetime, int]:
    per_minute: Counter[datetime] = Counter()
    for minute in range(minutes):
        instance_id = f"fw@{(T + minute * M).strftime('%Y-%m-%dT%H:%MZ')}"
        for at, n in loop.starts_per_minute(instance_id).items():
            per_minute[at] += n
    return dict(sorted(per_minute.items()))


@pytest.mark.parametrize(("scope", "most"), [("tenant", 5), ("instance", 8)])
def test_a_tenant_scope_shares_one_budget_between_the_tasks_instances(
    scope: str, most: int
) -> None:
    # An instance a minute, of 8 shards each, at 5 a minute: instances overlap.
    task = fleet_task(
        tenant="acme",
        trigger={"rate": "1m"},
        rollout={"max_shards_per_minute": 5, "scope": scope},
        sharding={"strategy": "id_range", "shards": 8, "id_max": 800},
    )
    loop = WorkerLoop(task)
    loop.fire(T)
    loop.run_until(T + 6 * M + 59 * S, ticks=True)  # through the seventh minute's seats
    per_minute = starts_of_every_instance(loop, 7)
    assert max(per_minute.values()) == most
    if scope == "tenant":  # the shared budget is spent every minute, never passed
        assert list(per_minute.values()) == [5] * 7


def test_the_shard_grid_shows_unsent_shards_waiting_for_their_turn() -> None:
    loop = WorkerLoop(fleet_task(rollout={"max_shards_per_minute": 5}))
    loop.clock.set(T)
    dispatch_tick(T, loop.services)
    instance = loop.instance(ID)
    views = shard_views(instance, loop.services.instances.list_shards(ID))
    assert [v["status"] for v in views] == ["pending"] * 5 + ["waiting"] * 15
    loop.work()
    loop.run_until(T + M)  # the sweep of 12:01 sends the next five
    views = shard_views(loop.instance(ID), loop.services.instances.list_shards(ID))
    assert [v["status"] for v in views] == ["succeeded"] * 10 + ["waiting"] * 10
    assert ShardView.model_validate(views[-1]).status == "waiting"  # the API's model says so


def test_a_reduce_is_held_by_neither_rate_nor_window() -> None:
    loop = WorkerLoop(
        window_task(
            "defer",
            rollout={"max_shards_per_minute": 2},
            reduce="noop",
            sharding={"strategy": "id_range", "shards": 6, "id_max": 600},
        ),
        start=LATE - M,
    )
    loop.fire(LATE)
    loop.run_until(LATE + 24 * 60 * M)
    instance = loop.instance(LATE_ID)
    assert instance.status is InstanceStatus.SUCCEEDED
    reduce = loop.services.instances.get_shard(LATE_ID, 6)
    assert reduce is not None and len(reduce.attempts) == 1
    # Its last shards started at the next opening; the reduce followed at once, its start not
    # counted against that minute's rate of 2.
    opens = datetime(2026, 11, 30, 2, 0, tzinfo=UTC)
    assert floor_minute(reduce.attempts[0].started_at) == opens
    assert loop.starts_per_minute(LATE_ID)[opens] == 3  # two shards and the reduce


def test_rates_ramps_and_device_counts() -> None:
    ramp = Rollout(max_shards_per_minute=100_000, ramp=Ramp(base=3, factor=1.5, every_succeeded=10))
    assert [rate_limit(ramp, s) for s in (0, 9, 10, 20, 30)] == [3, 3, 4, 6, 10]
    assert rate_limit(ramp, 10**12) == 100_000  # capped, however many succeeded
    assert device_count({"start": 10, "end": 250}) == 240
    assert device_count({"devices": ["a", "b", "c"]}) == 3
    assert device_count({"tenant": "acme", "device_count": 7}) == 7
    assert device_count({"tenant": "acme", "group": "g1"}) == 1
    devices = Rollout(max_devices_per_minute=1000)
    assert start_weight(devices, {"start": 0, "end": 0}) == 1  # every start counts
    assert start_weight(Rollout(max_shards_per_minute=5), {"start": 0, "end": 500}) == 1


# -- a batched tick ----------------------------------------------------------------------------


def test_a_batched_tick_paces_and_spreads_as_a_small_one_does() -> None:
    # BATCH_FROM due tasks or more take the batched path, whose pages share their sends: a
    # paced or spread instance is still sent on its own, its first minute's share, delayed.
    paced = [fleet_task(rollout={"max_shards_per_minute": 1}) | {"id": f"p{n}"} for n in range(6)]
    spread = [fleet_task(shard_spread_s=300) | {"id": f"s{n}"} for n in range(6)]
    for task in (*paced, *spread):
        task["sharding"] = {"strategy": "id_range", "shards": 5, "id_max": 500}
    loop = WorkerLoop(paced[0])
    definitions = parse_task_file({"tasks": [*paced, *spread]}, handlers=loop.services.handlers)
    assert len(definitions) >= BATCH_FROM
    apply_tasks(definitions, loop.services.tasks, now=loop.clock.now())
    loop.clock.set(T)
    report = dispatch_tick(T, loop.services)
    assert len(report.claimed) == 12
    sent = Counter(m.instance_id.partition("@")[0] for m in loop.queue.sent)
    assert {t: sent[t] for t in (f"p{n}" for n in range(6))} == dict.fromkeys(
        (f"p{n}" for n in range(6)), 1
    )  # one a minute: the first minute's share only
    spread_delays = [
        d for m, d in zip(loop.queue.sent, loop.queue.delays, strict=True) if m.task_id[0] == "s"
    ]
    assert len(spread_delays) == 30 and len(set(spread_delays)) > 5


def test_a_tenant_scope_starves_no_shard_of_an_older_instance() -> None:
    """An instance a minute for eight minutes, 8 shards each, one budget of 5 a minute: every
    shard starts within the minutes the shards claimed before it need, and a bit: none
    loses every minute to the shards of newer instances (the first instance's last shard
    does not wait while 40 newer start)."""
    task = fleet_task(
        tenant="acme",
        trigger={"rate": "1m"},
        rollout={"max_shards_per_minute": 5, "scope": "tenant"},
        sharding={"strategy": "id_range", "shards": 8, "id_max": 800},
    )
    loop = WorkerLoop(task)
    loop.fire(T)
    loop.run_until(T + 7 * M, ticks=True)  # eight instances, 64 shards
    loop.run_until(T + 30 * M)
    instances = sorted(
        (i for i in loop.services.instances.list_instances(task_id="fw")),
        key=lambda i: i.slot,
    )
    assert len(instances) == 8
    for n, instance in enumerate(instances):
        starts = [
            a.started_at
            for s in loop.services.instances.list_shards(instance.instance_id)
            for a in s.attempts
            if a.outcome is not None and a.outcome.value == "succeeded"
        ]
        assert len(starts) == 8, instance.instance_id
        ahead = 8 * (n + 1)  # its shards and those of the instances claimed before it
        bound = T + ((ahead + 4) // 5 + 2) * M
        assert max(starts) < bound, (instance.instance_id, max(starts), bound)
