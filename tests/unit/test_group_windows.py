"""Maintenance windows per device group (`window.group_attribute`) on the in-memory services,
the manual clock and a worker loop: each group's shard starts only inside its own group's
window, in the group's own timezone, across a daylight-saving night; groups without the
attribute and malformed attributes; the firing itself is never moved."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from iotsched.adapters.memory.devices import MemoryDeviceDirectory
from iotsched.core.decisions import Firing
from iotsched.core.fires import fires_after, start_clock
from iotsched.core.group_windows import GroupFacts, plan_group_windows, resolve_group_window
from iotsched.core.instance_record import (
    InstanceStatus,
    TriggerKind,
)
from iotsched.core.shard_record import ShardStatus
from iotsched.core.sharding import PlanningError
from iotsched.core.task_definition import TaskDefinition
from iotsched.core.task_fleet_safety import Window
from iotsched.core.task_record import TaskRecord
from iotsched.ports.devices import (
    DeviceGroup,
    Tenant,
)
from iotsched.services.definitions.task_file import (
    TaskFileError,
    parse_task_file,
)
from iotsched.services.operations.views import shard_views
from iotsched.services.scheduling.build import build_instance
from tests.unit.test_rollout_starts import WorkerLoop

M = timedelta(minutes=1)
T = datetime(2026, 3, 27, 12, 0, tzinfo=UTC)
NIGHTLY = {"cron": "0 2 * * *", "duration": "2h"}
TENANTS = [Tenant("fleet", "UTC")]


def utc(year: int, month: int, day: int, hour: int, minute: int) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=UTC)


def group(name: str, n: int, zone: str, **attributes: Any) -> DeviceGroup:
    return DeviceGroup(
        "fleet", name, f"dev-{n * 100:06d}", f"dev-{(n + 1) * 100:06d}", zone, attributes
    )


BERLIN = group("berlin", 0, "Europe/Berlin", maintenance_window=NIGHTLY)
NEW_YORK = group("new-york", 1, "America/New_York", maintenance_window=NIGHTLY)


def group_task(window: Mapping[str, Any], **fields: Any) -> dict[str, Any]:
    return {
        "id": "fw",
        "tenant": "fleet",
        "handler": "noop",
        # Every day at 12:00 UTC: each instance's shards wait for their groups' next night.
        "trigger": {"rate": "1d", "anchor": "2026-01-01T12:00:00Z"},
        "sharding": {"strategy": "groups", "source": "device_directory"},
        "window": dict(window),
        "instance_timeout_s": 86_400,
        **fields,
    }


def loop_for(
    groups: list[DeviceGroup], window: Mapping[str, Any], start: datetime, **fields: Any
) -> WorkerLoop:
    directory = MemoryDeviceDirectory(TENANTS, groups)
    return WorkerLoop(group_task(window, **fields), start=start - M, directory=directory)


def starts_by_group(loop: WorkerLoop, instance_id: str) -> dict[str, list[datetime]]:
    out: dict[str, list[datetime]] = {}
    for shard in loop.services.instances.list_shards(instance_id):
        out[shard.bounds["group"]] = [a.started_at.replace(second=0) for a in shard.attempts]
    return out


# Per slot day (fired at 12:00 UTC): the UTC instant Berlin's shard starts, then New York's.
SPRING = {
    # Europe/Berlin springs forward in the night of 29 March 2026: 02:00 does not exist and
    # the window opens at 03:00 CEST. New York is on EDT since the 8th.
    "2026-03-27": (utc(2026, 3, 28, 1, 0), utc(2026, 3, 28, 6, 0)),  # 02:00 CET, 02:00 EDT
    "2026-03-28": (utc(2026, 3, 29, 1, 0), utc(2026, 3, 29, 6, 0)),  # 03:00 CEST (the gap)
    "2026-03-29": (utc(2026, 3, 30, 0, 0), utc(2026, 3, 30, 6, 0)),  # 02:00 CEST
}
BERLIN_AUTUMN = {
    # Berlin falls back in the night of 25 October: 02:00-03:00 happens twice; the window
    # opens once, at the first 02:00 (CEST).
    "2026-10-23": (utc(2026, 10, 24, 0, 0), utc(2026, 10, 24, 6, 0)),
    "2026-10-24": (utc(2026, 10, 25, 0, 0), utc(2026, 10, 25, 6, 0)),
    "2026-10-25": (utc(2026, 10, 26, 1, 0), utc(2026, 10, 26, 6, 0)),  # 02:00 CET
}
NEW_YORK_AUTUMN = {
    # New York falls back in the night of 1 November (01:00-02:00 twice); 02:00 is EST then.
    "2026-10-30": (utc(2026, 10, 31, 1, 0), utc(2026, 10, 31, 6, 0)),
    "2026-10-31": (utc(2026, 11, 1, 1, 0), utc(2026, 11, 1, 7, 0)),
    "2026-11-01": (utc(2026, 11, 2, 1, 0), utc(2026, 11, 2, 7, 0)),
}


@pytest.mark.parametrize("expected", [SPRING, BERLIN_AUTUMN, NEW_YORK_AUTUMN])
def test_each_group_starts_only_in_its_own_window_in_its_own_zone_across_dst_nights(
    expected: dict[str, tuple[datetime, datetime]],
) -> None:
    first = datetime.fromisoformat(f"{min(expected)}T12:00:00+00:00")
    loop = loop_for([BERLIN, NEW_YORK], {"group_attribute": "maintenance_window"}, first)
    loop.fire(first)
    loop.run_until(first + timedelta(days=3), ticks=True)
    for day, (berlin, new_york) in expected.items():
        instance_id = f"fw@{day}T12:00Z"
        # Fired on its trigger, not moved to any window: the firing is the slot.
        instance = loop.instance(instance_id)
        assert instance.fire_at in (None, instance.slot)
        assert instance.status is InstanceStatus.SUCCEEDED, instance.reason
        starts = starts_by_group(loop, instance_id)
        assert starts == {"berlin": [berlin], "new-york": [new_york]}, day
    # The waits were hops of at most 15 minutes on the queue: one copy of the message per
    # 15 minutes of wait (the hop into the opening's first minute included), no more.
    assert max(loop.queue.delays) <= 900
    copies = Counter((m.instance_id, m.bounds["group"]) for m in loop.queue.sent)
    for day, (berlin, new_york) in expected.items():
        fired = datetime.fromisoformat(f"{day}T12:00:00+00:00")
        for name, opens in (("berlin", berlin), ("new-york", new_york)):
            hops = copies[(f"fw@{day}T12:00Z", name)] - 1
            least = math.ceil((opens - fired).total_seconds() / 900)
            assert least <= hops <= least + 1, (day, name, hops)


def test_each_shards_window_is_fixed_in_its_bounds_at_the_claim() -> None:
    first = utc(2026, 3, 27, 12, 0)
    loop = loop_for([BERLIN, NEW_YORK], {"group_attribute": "maintenance_window"}, first)
    loop.fire(first)
    instance = loop.instance("fw@2026-03-27T12:00Z")
    assert [b["window"] for b in instance.plan.all_bounds()] == [
        {"cron": "0 2 * * *", "duration": "2h", "timezone": "Europe/Berlin"},
        {"cron": "0 2 * * *", "duration": "2h", "timezone": "America/New_York"},
    ]
    # Not paced: every shard message went out with the claim; the worker sent each back with
    # a delay (a hop towards its window) rather than starting it.
    assert [m.shard for m in loop.queue.sent] == [0, 1, 0, 1]
    assert loop.queue.delays[2:] == [900, 900]
    assert instance.status is InstanceStatus.RUNNING
    # A later change in the directory does not move the stored windows.
    directory = loop.services.directory
    assert isinstance(directory, MemoryDeviceDirectory)
    directory.put_groups([group("berlin", 0, "Asia/Tokyo", maintenance_window=NIGHTLY)])
    loop.run_until(utc(2026, 3, 28, 7, 0))
    assert starts_by_group(loop, instance.instance_id)["berlin"] == [utc(2026, 3, 28, 1, 0)]


def test_the_shard_grid_shows_a_shard_waiting_while_its_groups_window_is_closed() -> None:
    first = utc(2026, 3, 27, 12, 0)
    loop = loop_for([BERLIN, NEW_YORK], {"group_attribute": "maintenance_window"}, first)
    loop.fire(first)
    instance = loop.instance("fw@2026-03-27T12:00Z")

    def grid(now: datetime | None) -> list[str]:
        return [v["status"] for v in shard_views(instance, [], now)]

    assert grid(first) == ["waiting", "waiting"]  # both nights are hours away
    # 01:30 UTC: 02:30 in Berlin (open), 21:30 in New York (closed)
    assert grid(utc(2026, 3, 28, 1, 30)) == ["pending", "waiting"]
    assert grid(None) == ["pending", "pending"]  # no clock, no window's hold


def test_an_attribute_timezone_overrides_the_groups_own() -> None:
    berlin_in_utc = group(
        "berlin", 0, "Europe/Berlin", maintenance_window={**NIGHTLY, "timezone": "UTC"}
    )
    first = utc(2026, 3, 27, 12, 0)
    loop = loop_for([berlin_in_utc], {"group_attribute": "maintenance_window"}, first)
    loop.fire(first)
    loop.run_until(utc(2026, 3, 28, 5, 0))
    assert starts_by_group(loop, "fw@2026-03-27T12:00Z") == {"berlin": [utc(2026, 3, 28, 2, 0)]}


def test_a_group_without_the_attribute_takes_the_tasks_default_in_its_own_zone() -> None:
    bare = group("tokyo", 2, "Asia/Tokyo")
    first = utc(2026, 3, 27, 12, 0)
    window = {"group_attribute": "maintenance_window", "cron": "0 4 * * *", "duration": "1h"}
    loop = loop_for([BERLIN, bare], window, first)
    loop.fire(first)
    loop.run_until(utc(2026, 3, 28, 3, 0))
    # 04:00 JST on the 28th is 19:00 UTC on the 27th; Berlin keeps its own attribute.
    assert starts_by_group(loop, "fw@2026-03-27T12:00Z") == {
        "berlin": [utc(2026, 3, 28, 1, 0)],
        "tokyo": [utc(2026, 3, 27, 19, 0)],
    }


def test_a_group_without_the_attribute_and_no_default_fails_the_plan() -> None:
    bare = group("tokyo", 2, "Asia/Tokyo")
    first = utc(2026, 3, 27, 12, 0)
    loop = loop_for([BERLIN, bare], {"group_attribute": "maintenance_window"}, first)
    loop.fire(first)
    instance = loop.instance("fw@2026-03-27T12:00Z")
    assert instance.status is InstanceStatus.FAILED
    assert instance.reason == (
        "planning_failed: window.group_attribute: group fleet/tokyo: no 'maintenance_window' "
        "attribute, and the task's window gives no default cron and duration"
    )
    assert loop.queue.sent == []  # nothing touched any group
    assert loop.services.instances.list_shards(instance.instance_id) == []


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (
            "0 2 * * *",
            "maintenance_window: expected a mapping {cron, duration[, timezone]}, got str",
        ),
        ({"cron": "0 2 * * *"}, "maintenance_window: missing duration"),
        ({**NIGHTLY, "durration": "1h"}, "maintenance_window: unknown field(s) durration"),
        ({"cron": "0 25 * * *", "duration": "2h"}, "maintenance_window: invalid cron"),
        ({"cron": "0 2 * * *", "duration": "2x"}, "maintenance_window: invalid rate '2x'"),
        ({**NIGHTLY, "timezone": "Mars/Olympus"}, "unknown timezone 'Mars/Olympus'"),
        ({"cron": "0 2 * * *", "duration": 120}, "must be strings"),
    ],
)
def test_a_malformed_attribute_fails_the_instance_with_a_clear_reason(value: Any, why: str) -> None:
    bad = group("bad", 2, "UTC", maintenance_window=value)
    first = utc(2026, 3, 27, 12, 0)
    loop = loop_for([BERLIN, bad], {"group_attribute": "maintenance_window"}, first)
    loop.fire(first)
    instance = loop.instance("fw@2026-03-27T12:00Z")
    assert instance.status is InstanceStatus.FAILED
    assert instance.reason is not None
    assert instance.reason.startswith("planning_failed: window.group_attribute: group fleet/bad: ")
    assert why in instance.reason
    assert loop.queue.sent == []


def test_a_groups_own_zone_that_is_unknown_fails_the_plan() -> None:
    facts = GroupFacts("fleet/x", "Nowhere/Else", {"maintenance_window": NIGHTLY})
    window = Window(group_attribute="maintenance_window")
    with pytest.raises(ValueError, match="unknown timezone 'Nowhere/Else'"):
        resolve_group_window(window, facts)


def test_a_plan_names_at_most_five_bad_groups_and_counts_the_rest() -> None:
    window = Window(group_attribute="maintenance_window")
    facts = [GroupFacts(f"t/g{n}", "UTC", {}) for n in range(8)]
    with pytest.raises(PlanningError) as caught:
        plan_group_windows(window, facts)
    message = str(caught.value)
    assert message.count("group t/g") == 5 and message.endswith("(and 3 more groups)")


def test_cancel_waits_for_a_groups_first_opening_then_ends_the_instance_when_it_closes() -> None:
    first = utc(2026, 3, 27, 12, 0)
    window = {"group_attribute": "maintenance_window", "on_close": "cancel"}
    # Berlin's shard fails its first attempt at 01:00 UTC and retries two hours later, after
    # its window closed at 03:00 UTC; New York's has not opened yet then.
    loop = loop_for(
        [BERLIN, NEW_YORK],
        window,
        first,
        params={"fail_attempts": 1},
        retry={"max_attempts": 2, "backoff_s": 7200},
    )
    loop.fire(first)
    # Before any window opened, both shards waited (a cancel window has not closed on them).
    loop.run_until(utc(2026, 3, 28, 0, 59))
    assert loop.instance("fw@2026-03-27T12:00Z").status is InstanceStatus.RUNNING
    loop.run_until(utc(2026, 3, 28, 3, 30))
    instance = loop.instance("fw@2026-03-27T12:00Z")
    assert instance.status is InstanceStatus.CANCELLED
    assert instance.reason == (
        "window_closed: group fleet/berlin's window closed before shard 0 started"
    )
    shards = {
        s.bounds["group"]: s for s in loop.services.instances.list_shards(instance.instance_id)
    }
    assert [a.started_at for a in shards["berlin"].attempts] == [utc(2026, 3, 28, 1, 0)]
    assert shards["berlin"].status is not ShardStatus.SUCCEEDED
    assert "new-york" not in shards  # never started: the instance ended before its window


def test_a_cancel_window_open_at_the_claim_runs_its_shard_at_once() -> None:
    first = utc(2026, 3, 27, 12, 0)
    noon = group("noon", 0, "UTC", maintenance_window={"cron": "0 12 * * *", "duration": "1h"})
    window = {"group_attribute": "maintenance_window", "on_close": "cancel"}
    loop = loop_for([noon], window, first)
    loop.fire(first)
    loop.run_until(first + 5 * M)
    instance = loop.instance("fw@2026-03-27T12:00Z")
    assert instance.status is InstanceStatus.SUCCEEDED
    assert starts_by_group(loop, instance.instance_id) == {"noon": [first]}


def test_a_rollout_with_group_windows_paces_its_sends_but_not_by_any_window() -> None:
    groups = [group(f"g{n}", n, "Europe/Berlin", maintenance_window=NIGHTLY) for n in range(4)]
    first = utc(2026, 3, 27, 12, 0)
    loop = loop_for(
        groups,
        {"group_attribute": "maintenance_window"},
        first,
        rollout={"max_shards_per_minute": 2},
    )
    loop.fire(first)
    # The minute's rate went out although no window is open (and came back delayed).
    assert [m.shard for m in loop.queue.sent] == [0, 1, 0, 1]
    assert loop.instance("fw@2026-03-27T12:00Z").status is InstanceStatus.PLANNING
    loop.run_until(first + 2 * M)
    assert sorted({m.shard for m in loop.queue.sent}) == [0, 1, 2, 3]
    loop.run_until(utc(2026, 3, 28, 1, 10))
    starts = starts_by_group(loop, "fw@2026-03-27T12:00Z")
    # All four wait for 01:00 UTC (02:00 CET); the rate still holds them to two a minute.
    assert sorted(s for (s,) in starts.values()) == [
        utc(2026, 3, 28, 1, 0),
        utc(2026, 3, 28, 1, 0),
        utc(2026, 3, 28, 1, 1),
        utc(2026, 3, 28, 1, 1),
    ]


# -- the task file ---------------------------------------------------------------------------


def parse(**fields: Any) -> list[TaskDefinition]:
    return parse_task_file({"tasks": [group_task(**fields)]}, handlers=["noop"])


def test_group_attribute_needs_groups_sharding() -> None:
    task = group_task(
        {"group_attribute": "maintenance_window"},
        sharding={"strategy": "id_range", "shards": 4, "id_max": 400},
    )
    with pytest.raises(TaskFileError, match=r"window\.group_attribute: .*needs sharding: groups"):
        parse_task_file({"tasks": [task]}, handlers=["noop"])


@pytest.mark.parametrize(
    ("window", "why"),
    [
        ({"group_attribute": "w", "cron": "0 2 * * *"}, "give both or neither"),
        ({"group_attribute": "w", "timezone": "Europe/Berlin"}, "leave timezone out"),
        ({"cron": "0 2 * * *"}, "a window needs cron and duration"),
        ({"group_attribute": "bad name"}, "group_attribute"),
    ],
)
def test_a_malformed_group_window_is_refused_at_apply(window: dict[str, Any], why: str) -> None:
    with pytest.raises(TaskFileError, match=why):
        parse(window=window)


def test_a_group_window_task_fires_on_its_trigger() -> None:
    (definition,) = parse(window={"group_attribute": "maintenance_window"})
    after = utc(2026, 3, 27, 11, 0)
    fires = fires_after(definition, after)
    fire = next(iter(fires))
    assert fire.fire_at == fire.slot == utc(2026, 3, 27, 12, 0)
    # Its clock starts as a windowless task's does (no slot recorded as passed).
    assert start_clock(definition, after) == (utc(2026, 3, 27, 12, 0), None)


def test_a_stored_group_window_without_groups_sharding_fails_its_plan_not_runs_unrestricted() -> (
    None
):
    # Refused at apply; a definition that reached the store another way still never runs its
    # shards without their windows.
    definition = TaskDefinition.model_validate(
        group_task(
            {"group_attribute": "maintenance_window"},
            sharding={"strategy": "id_range", "shards": 2, "id_max": 200},
        )
    )
    record = TaskRecord(definition=definition, version=1, next_fire=None, updated_at=T)
    firing = Firing(slot=T, kind=TriggerKind.SCHEDULED, status=InstanceStatus.PLANNING)
    instance = build_instance(record, firing, claimed_at=T, dispatch_lease_s=60)
    assert instance.status is InstanceStatus.FAILED
    assert instance.reason == ("planning_failed: window.group_attribute needs sharding: groups")


def test_a_shard_waiting_for_its_groups_window_writes_nothing() -> None:
    first = utc(2026, 3, 27, 12, 0)
    loop = loop_for([BERLIN, NEW_YORK], {"group_attribute": "maintenance_window"}, first)
    loop.fire(first)
    calls: list[str] = []
    for store in (loop.services.instances, loop.services.tasks):
        for name in dir(store):
            method = getattr(store, name)
            if name.startswith("_") or not callable(method):
                continue

            def counted(*args: Any, _m: Any = method, _n: str = name, **kwargs: Any) -> Any:
                calls.append(_n)
                return _m(*args, **kwargs)

            setattr(store, name, counted)
    before = len(loop.queue.sent)
    loop.run_until(utc(2026, 3, 28, 0, 59))  # Berlin opens at 01:00 UTC
    hops = len(loop.queue.sent) - before
    assert hops >= 2 * 12 * 4  # both shards hopped every 15 minutes for 12 hours and more
    # Each delivery read its instance (a worker reads it anyway); nothing was written, and
    # the sweeper found nothing to do with a running instance whose shards are on the queue.
    write_prefixes = (
        "advance_", "claim_", "close_", "complete_", "dead_letter", "delete_", "end_",
        "enqueue_", "extend_", "finalize_", "mark_", "put_", "record_", "release_", "set_",
        "settle_", "start_", "take_",
    )  # fmt: skip
    assert "get_instance" in calls
    assert [c for c in calls if c.startswith(write_prefixes)] == []
