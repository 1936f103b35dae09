"""The demo's adverse tick deliveries, and the guarantee figures they leave in the records.

`plan` makes the at-least-once hazards happen with real processes: every due minute delivered
twice at once; some delivered a third time, late (after the next due minute's); some raced by a
second dispatcher (`Racer`, in the demo's own process) that claims a bucket's due slots with the
same code but skips the bucket lease. The figures are counted from what happened: the duplicate
claims the store refused (each dispatcher's `TickReport.duplicate_claims`) and the duplicate
ticks absorbed, at the bucket lease or finding nothing due any more (`absorbed_copies`).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from iotsched.core.buckets import bucket_of
from iotsched.core.decisions import plan_firing
from iotsched.core.instance_record import instance_id_for
from iotsched.core.task_record import TaskRecord
from iotsched.local.delivery import TickResult
from iotsched.services.scheduling.report import TickReport
from iotsched.services.scheduling.tick import dispatch_tick
from iotsched.services.wiring import Wiring

#: About this many due minutes are delivered late, and as many raced, whatever the days: each
#: costs the replay a few tenths of a second.
TIMES = 6
#: How long the racer waits for a bucket dispatcher's first claim of a bucket before it
#: claims anyway (the race is then one it may win outright).
RACE_WAIT_S = 20.0
RACE_POLL_S = 0.02

#: What each guarantee figure is, one line each, as the demo prints them.
MEANINGS = {
    "duplicate_claims_rejected": (
        "a second dispatcher tried to claim a fire slot already claimed; the conditional write "
        "refused it"
    ),
    "duplicate_ticks_absorbed": (
        "a minute delivered again (a copy, or late: after the next minute's) found its work "
        "claimed and did nothing"
    ),
    "effects_applied_twice": (
        "effects found twice in the accounts, the bucket's object versions, the reminder "
        "topic's deliveries and the devices' offline marks"
    ),
}


@dataclass(frozen=True)
class Delivery:
    """What the replay does at one due minute."""

    at: datetime
    race: bool  # a second dispatcher races the bucket dispatchers over this minute
    late: datetime | None  # a due minute delivered again after this one's ticks


def plan(minutes: list[datetime]) -> list[Delivery]:
    """The replay's deliveries: every minute twice; at regular steps one minute is raced, and
    the minute after it is followed by a late copy of it."""
    every = max(3, len(minutes) // TIMES)
    return [
        Delivery(
            at=at,
            race=n % every == 1,
            late=minutes[n - 1] if n % every == 2 else None,
        )
        for n, at in enumerate(minutes)
    ]


@dataclass
class Racer:
    """A second dispatcher over one minute, in the demo's process (see the module docstring).

    `start` reads the minute's due tasks (call it before the tick is delivered) and races on
    a thread of its own; `join` waits for it.
    """

    services: Wiring
    at: datetime
    buckets: int
    reports: list[TickReport] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        """Read the due tasks now, as the bucket dispatchers are about to, then race."""
        due: dict[int, list[TaskRecord]] = {}
        for task in self.services.tasks.due_tasks(self.at):
            due.setdefault(bucket_of(task.task_id, self.buckets), []).append(task)
        self._thread = threading.Thread(
            target=self._race, args=(due,), name=f"racer@{self.at:%H:%M}", daemon=True
        )
        self._thread.start()

    def join(self, timeout: float) -> None:
        """Wait for the race to end (at most `timeout` s)."""
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def claimed(self) -> list[str]:
        """The instances the racer claimed (it won their slots)."""
        return [i for r in self.reports for i in r.claimed]

    @property
    def opened(self) -> list[str]:
        """The instances the racer started or queued: those the demo waits for."""
        return [i for r in self.reports for i in (*r.claimed, *r.queued)]

    @property
    def duplicate_claims(self) -> int:
        """The racer's claims the store refused."""
        return sum(r.duplicate_claims for r in self.reports)

    def _race(self, due: dict[int, list[TaskRecord]]) -> None:
        for bucket, tasks in sorted(due.items()):
            # A bucket dispatcher that claimed a slot has read its due list: from then on
            # every slot of the bucket is contested, whoever wins each, and each contest ends
            # with exactly one claim refused.
            self._wait_first_claim([i for t in tasks for i in _slots(t, self.at)])
            try:
                self.reports.append(dispatch_tick(self.at, self.services, bucket=bucket, due=tasks))
            except Exception as exc:  # reported in the summary; the demo goes on
                self.errors.append(f"bucket {bucket}: {type(exc).__name__}: {exc}")

    def _wait_first_claim(self, instance_ids: list[str]) -> None:
        deadline = time.monotonic() + RACE_WAIT_S
        while time.monotonic() < deadline:
            if any(self.services.instances.get_instance(i) is not None for i in instance_ids):
                return
            time.sleep(RACE_POLL_S)


def _slots(task: TaskRecord, at: datetime) -> list[str]:
    """The instance ids of the firings a dispatcher at `at` claims for `task` as read."""
    firing_plan = plan_firing(
        task.definition,
        next_fire=task.next_fire,
        last_slot=task.last_slot,
        now=at,
        calendars=task.calendars,
        runs=task.runs,
    )
    return [instance_id_for(task.task_id, f.slot, task.incarnation) for f in firing_plan.firings]


def absorbed_copies(ticks: list[TickResult]) -> dict[str, int]:
    """Bucket messages that did nothing because another message of the same minute and bucket
    dispatched its work: absorbed at the bucket's lease, or finding nothing due any more."""
    outcomes: list[dict[str, Any]] = [o for t in ticks for o in t.report.get("outcomes", [])]
    worked = {
        (o["minute"], o["bucket"])
        for o in outcomes
        if o["verdict"] == "dispatched" and o["due_tasks"] > 0
    }
    at_the_lease = sum(1 for o in outcomes if o["verdict"] == "absorbed")
    nothing_due = sum(
        1
        for o in outcomes
        if o["verdict"] == "dispatched"
        and o["due_tasks"] == 0
        and (o["minute"], o["bucket"]) in worked
    )
    return {"at_the_lease": at_the_lease, "nothing_due": nothing_due}


def guarantee_figures(ticks: list[TickResult], racers: list[Racer]) -> dict[str, Any]:
    """The summary's guarantee figures, from the ticks' reports and the racers'."""
    absorbed = absorbed_copies(ticks)
    by_ticks = sum(int(t.report.get("duplicate_claims", 0)) for t in ticks)
    by_racer = sum(r.duplicate_claims for r in racers)
    tick_claims = [c for t in ticks for c in t.report.get("claimed", [])]
    racer_claims = [c for r in racers for c in r.claimed]
    every_claim = tick_claims + racer_claims
    return {
        "duplicate_claims_rejected": by_ticks + by_racer,
        "duplicate_claims_rejected_by": {"bucket_dispatchers": by_ticks, "racer": by_racer},
        "duplicate_ticks_absorbed": sum(absorbed.values()),
        "duplicate_ticks_absorbed_by": absorbed,
        "claims_by_ticks": len(tick_claims),
        "distinct_claims_by_ticks": len(set(tick_claims)),
        "claims_by_racer": len(racer_claims),
        # A slot claimed by two dispatchers (or twice by one) would be counted here.
        "slots_claimed_twice": len(every_claim) - len(set(every_claim)),
        "racer": {
            "minutes_raced": len(racers),
            "claimed": len(racer_claims),
            "duplicate_claims": by_racer,
            "errors": [e for r in racers for e in r.errors],
        },
    }
