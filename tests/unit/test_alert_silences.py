"""Silences hold every alert of their task, the dispatcher's too: a `catch_up_dropped` alert
raised during a silence waits in the log and is published by the sweeper once it ends."""

from __future__ import annotations

from datetime import timedelta
from typing import cast

from iotsched import bootstrap
from iotsched.adapters.memory.queues import MemoryAlertSink
from iotsched.clock import ManualClock
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.definitions.task_file import parse_task_file
from iotsched.services.execution.sweep import sweep
from iotsched.services.scheduling.tick import dispatch_tick
from tests.support import T0

M = timedelta(minutes=1)


def test_a_dispatchers_alert_in_a_silence_is_published_when_it_ends() -> None:
    clock = ManualClock(T0 - M)
    services = bootstrap.build_memory(clock=clock)
    tasks = parse_task_file(
        {
            "tasks": [
                {
                    "id": "meter",
                    "handler": "noop",
                    "trigger": {"rate": "1m"},
                    "misfire": {"policy": "catch_up", "max_catch_up": 1},
                    "alerts": {
                        "silence": [{"start": "2026-11-29T12:00Z", "end": "2026-11-29T12:30Z"}]
                    },
                },
                {
                    "id": "loud",
                    "handler": "noop",
                    "trigger": {"rate": "1m"},
                    "misfire": {"policy": "catch_up", "max_catch_up": 1},
                },
            ]
        },
        handlers=services.handlers,
    )
    apply_tasks(tasks, services.tasks, now=clock.now())
    clock.set(T0 + 10 * M)  # an outage of 10 minutes: catch-up drops slots of both tasks
    dispatch_tick(clock.now(), services)
    sink = cast("MemoryAlertSink", services.alerts)
    assert [(a.task_id, a.type) for a in sink.published] == [("loud", "catch_up_dropped")]
    (held,) = sink.held.values()
    assert held.task_id == "meter" and held.silenced_until == T0 + 30 * M
    assert held.attributes()["silenced"] == "yes"
    republished = []
    while clock.now() < T0 + 31 * M:  # the dispatcher and the sweeper, every minute
        clock.advance(M)
        dispatch_tick(clock.now(), services)
        republished.append((clock.now(), sweep(services).republished_alerts))
    # held through the silence and the sweeper's grace after it, then published once
    assert [at for at, ids in republished if ids] == [T0 + 31 * M]
    assert republished[-1][1] == [held.alert_id]
    assert len(sink.published) == 2
    assert [(a.task_id, a.type) for a in sink.published][1] == ("meter", "catch_up_dropped")
    assert sink.held == {}
