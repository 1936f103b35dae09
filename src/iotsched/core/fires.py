"""Fire instants: when each slot of a task fires (its jitter and its maintenance window move
it) and which slots never fire (an excluded local date, after `end_at`, beyond `max_runs`).

A slot stays the trigger's grid point: the instance id, the business date and the data interval
follow it. Every answer is computed from the task, the slot and the calendars' dates alone, so
every dispatcher computes the same one (docs/design.md, "Fires").
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta

from iotsched.core.task_definition import TaskDefinition
from iotsched.core.task_fleet_safety import Window
from iotsched.core.task_policies import MisfirePolicy
from iotsched.core.timeutil import floor_minute, require_aware, slot_text
from iotsched.core.triggers import load_zone
from iotsched.core.windows import closes_at, next_open

_MINUTE = timedelta(minutes=1)
#: How an inline exclusion names itself; a named calendar's is `calendar:<name>`.
INLINE_EXCLUSION = "exclude.dates"


@dataclass(frozen=True)
class Fire:
    """One slot of a task with its fire instant.

    `jittered` is the slot plus its jitter offset, rounded up to the minute; `fire_at` the
    instant it fires (later than `jittered` when it waits for the window). `excluded_by` names
    what excludes its date (`exclude.dates`, `calendar:<name>`); an excluded slot never fires
    and its instants are left unmoved.
    """

    slot: datetime
    offset_s: int
    jittered: datetime
    fire_at: datetime
    excluded_by: str | None = None

    @property
    def window_wait(self) -> timedelta:
        """How long the slot waits for its maintenance window."""
        return self.fire_at - self.jittered


def jitter_offset(task_id: str, slot: datetime, cap_s: int) -> int:
    """The slot's offset in `[0, cap_s]` seconds: a stable hash of (task id, slot), the same on
    every node and every run (never Python's salted `hash`)."""
    if cap_s <= 0:
        return 0
    digest = hashlib.blake2b(f"{task_id}@{slot_text(slot)}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % (cap_s + 1)


def ceil_minute(at: datetime) -> datetime:
    """`at` rounded up to the whole minute."""
    floored = at.replace(second=0, microsecond=0)
    return floored if floored == at else floored + _MINUTE


def exclusions(
    task: TaskDefinition, calendars: Mapping[str, Sequence[date]] | None = None
) -> dict[date, str]:
    """The dates `task` never fires on, each with what excludes it: its inline dates first,
    then its named calendars in the order it names them (`calendars`: their dates by name;
    a name missing from it excludes nothing)."""
    excluded = dict.fromkeys(task.exclude.dates, INLINE_EXCLUSION)
    for name in task.exclude.calendars:
        for day in (calendars or {}).get(name, ()):
            excluded.setdefault(day, f"calendar:{name}")
    return excluded


def fire_window(task: TaskDefinition) -> Window | None:
    """The window that moves the task's fire instants: its `window`, unless that is per device
    group (`group_attribute`), which holds back shard starts only: such a task fires on its
    trigger and each shard waits for its own group's window."""
    window = task.window
    return None if window is None or window.per_group else window


def fire_of(
    task: TaskDefinition,
    slot: datetime,
    following: datetime | None,
    excluded: Mapping[date, str] | None = None,
) -> Fire:
    """The fire instant of `slot`; `following` is the trigger's next grid slot (None if none).

    A slot waiting for its window waits for an opening on a date `excluded` does not name
    (in the task's timezone): a holiday stops what would fire on it, not only its own slots.
    """
    cap = task.jitter_s
    if following is not None:
        cap = min(cap, int((following - slot).total_seconds()) - 60)
    offset = jitter_offset(task.id, slot, cap)
    jittered = ceil_minute(slot + timedelta(seconds=offset)) if offset else slot
    fire_at = jittered
    window = fire_window(task)
    if window is not None:
        fire_at = next_open(window, jittered)
        if excluded:
            zone = load_zone(task.timezone)
            for _ in range(MAX_SKIPPED_OPENINGS):
                if fire_at.astimezone(zone).date() not in excluded:
                    break
                # The rest of an opening on an excluded date is excluded too: the next one.
                fire_at = next_open(window, closes_at(window, fire_at) or fire_at)
    return Fire(slot=slot, offset_s=offset, jittered=jittered, fire_at=fire_at)


#: Window openings on excluded dates a waiting slot passes over before it takes one anyway.
MAX_SKIPPED_OPENINGS = 1_000


def fires_after(
    task: TaskDefinition, after: datetime, excluded: Mapping[date, str] | None = None
) -> Iterator[Fire]:
    """The task's slots strictly after `after`, ascending, with their fire instants.

    An excluded date yields its first slot only (marked `excluded_by`), then the grid goes on
    from the next local midnight, so a long run of excluded days costs one step per day. Fire
    instants of the slots not excluded never decrease. Ends where the trigger's grid ends; it
    knows nothing of `end_at` and `max_runs` (`next_fire_after` and the plan do).
    """
    zone = load_zone(task.timezone) if excluded else None
    cursor = require_aware(after)
    while True:
        slots = iter(task.trigger.slots_after(cursor))
        slot = next(slots, None)
        while slot is not None:
            if zone is not None and excluded:
                day = slot.astimezone(zone).date()
                if day in excluded:
                    yield Fire(slot, 0, slot, slot, excluded[day])
                    # The next local midnight, less a minute: grids are "strictly after".
                    midnight = datetime.combine(day + timedelta(days=1), time(0), tzinfo=zone)
                    cursor = max(slot, require_aware(midnight) - _MINUTE)
                    break
            following = next(slots, None) if task.jitter_s else None
            yield fire_of(task, slot, following, excluded)
            slot = following if task.jitter_s else next(slots, None)
        else:
            return


def next_fire_after(
    task: TaskDefinition,
    after: datetime,
    *,
    calendars: Mapping[str, Sequence[date]] | None = None,
    runs: int = 0,
) -> datetime | None:
    """The fire instant of the task's first slot after `after` that may fire: not excluded,
    not after `end_at`; None if there is none, or `runs` reached `max_runs`."""
    if task.max_runs is not None and runs >= task.max_runs:
        return None
    for fire in fires_after(task, after, exclusions(task, calendars)):
        if task.end_at is not None and fire.slot > task.end_at:
            return None
        if fire.excluded_by is None:
            return fire.fire_at
    return None


def stop_reason(task: TaskDefinition, runs: int, next_fire: datetime | None) -> str | None:
    """Why a task with no next fire instant stops, in words (None while it fires)."""
    if next_fire is not None:
        return None
    if task.max_runs is not None and runs >= task.max_runs:
        return f"max_runs reached ({runs} of {task.max_runs} runs fired)"
    if task.end_at is not None:
        return f"end_at passed (no slot after {slot_text(task.end_at)})"
    return None


def upcoming(
    task: TaskDefinition,
    *,
    next_fire: datetime | None,
    last_slot: datetime | None,
    runs: int = 0,
    calendars: Mapping[str, Sequence[date]] | None = None,
) -> Iterator[Fire]:
    """The slots the task's clock fires next, in order, excluded ones included (marked), as
    the plan would take them: from its last slot (from `next_fire` less the jitter when nothing
    was claimed), ending after `end_at` and once the slots listed make `max_runs` runs. Ticks on
    time are assumed: under `fire_once` the slots that share a fire instant (waiting for one
    window opening) are one run, otherwise each slot is one."""
    if next_fire is None:
        return
    left = None if task.max_runs is None else task.max_runs - runs
    collapse = task.misfire.policy is MisfirePolicy.FIRE_ONCE
    start = last_slot or next_fire - timedelta(seconds=task.jitter_s, minutes=1)
    previous: datetime | None = None
    for fire in fires_after(task, start, exclusions(task, calendars)):
        if task.end_at is not None and fire.slot > task.end_at:
            return
        if last_slot is None and fire.fire_at < next_fire:
            continue
        if fire.excluded_by is None and left is not None:
            if not (collapse and fire.fire_at == previous):
                if left <= 0:
                    return
                left -= 1
            previous = fire.fire_at
        yield fire


def runs_of(task: TaskDefinition, fires: Sequence[Fire]) -> int:
    """The runs `fires` (in order, from `upcoming`) make when ticks are on time: each slot not
    excluded, or under `fire_once` each distinct fire instant."""
    instants = [f.fire_at for f in fires if f.excluded_by is None]
    if task.misfire.policy is MisfirePolicy.FIRE_ONCE:
        return len(set(instants))
    return len(instants)


def start_clock(
    task: TaskDefinition,
    at: datetime,
    *,
    calendars: Mapping[str, Sequence[date]] | None = None,
    runs: int = 0,
    last_slot: datetime | None = None,
) -> tuple[datetime | None, datetime | None]:
    """A task's clock started at `at` (applied, its trigger changed): its next fire instant and
    the last slot it is past. The slots owed are those after `at`; with a window, the first of
    them may wait for an opening far beyond its slot, so the clock records `at` as the slot it
    is past (the plan would otherwise start its grid at the fire instant, less the jitter)."""
    at = floor_minute(at)
    next_fire = next_fire_after(task, at, calendars=calendars, runs=runs)
    if fire_window(task) is not None and last_slot is None:
        last_slot = at
    return next_fire, last_slot
