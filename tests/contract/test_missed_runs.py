"""The missed-run alert on the in-memory services and on moto: with the dispatcher stopped for
10 minutes and the sweeper running every minute, each due task raises exactly one `missed_run`;
paused and disabled tasks raise none; and nothing is alerted twice once the dispatcher is back."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest

from iotsched.clock import ManualClock
from iotsched.core.alert_message import Alert
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.definitions.control import pause_task
from iotsched.services.definitions.task_file import parse_task_file
from iotsched.services.execution.sweep import sweep
from iotsched.services.scheduling.tick import dispatch_tick
from iotsched.services.wiring import Wiring
from tests.support import T0, AwsResources, read_alerts

M = timedelta(minutes=1)
TASKS = {
    "tasks": [
        {"id": "every", "handler": "noop", "trigger": {"rate": "1m"}},
        {
            "id": "strict",
            "handler": "noop",
            "trigger": {"rate": "5m"},
            "misfire": {"grace_s": 0, "policy": "skip"},
            "alerts": {"severity": "critical"},
        },
        {"id": "hourly", "handler": "noop", "trigger": {"rate": "1h"}},
        {"id": "paused", "handler": "noop", "trigger": {"rate": "1m"}},
        {"id": "off", "handler": "noop", "trigger": {"rate": "1m"}, "enabled": False},
    ]
}


@pytest.fixture(params=["memory", pytest.param("moto", marks=pytest.mark.moto)])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def services(backend: str, request: pytest.FixtureRequest) -> Wiring:
    fixture = "memory_services" if backend == "memory" else "moto_services"
    built: Wiring = request.getfixturevalue(fixture)
    return built


class Seen:
    """Every alert that reached the topic so far (read once: the queue hands each out once)."""

    def __init__(self, services: Wiring, backend: str, request: pytest.FixtureRequest) -> None:
        self.alerts: list[Alert] = []
        self._services, self._backend, self._request = services, backend, request

    def missed(self) -> Counter[str]:
        if self._backend == "memory":
            self.alerts = list(self._services.alerts.published)  # type: ignore[attr-defined]
        else:
            aws: AwsResources = self._request.getfixturevalue("aws_resources")
            self.alerts += [a for a, _ in read_alerts(aws.client("sqs"), aws.alert_tap_url)]
        return Counter(a.alert_id for a in self.alerts if a.type == "missed_run")


@pytest.mark.load
def test_a_stopped_dispatcher_raises_one_missed_run_per_due_task(
    services: Wiring, backend: str, request: pytest.FixtureRequest, clock: ManualClock
) -> None:
    clock.set(T0 - 10 * M)
    apply_tasks(parse_task_file(TASKS, handlers=services.handlers), services.tasks, now=clock.now())
    pause_task("paused", services)
    seen = Seen(services, backend, request)
    # the dispatcher and the sweeper both running, every minute: nothing is missed
    for _ in range(10):
        clock.advance(M)
        dispatch_tick(clock.now(), services)
        assert sweep(services).missed_runs == []
    assert clock.now() == T0
    # the dispatcher stops for 10 minutes; the sweeper goes on every minute
    raised: list[tuple[str, list[str]]] = []
    for _ in range(10):
        clock.advance(M)
        raised.append((clock.now().strftime("%H:%M"), sweep(services).missed_runs))
    every, strict = "every@2026-11-29T12:01Z#missed_run", "strict@2026-11-29T12:05Z#missed_run"
    # every: due 12:01, grace 300 s, so missed from 12:07; strict: due 12:05, grace 0, held to
    # the floor of 120 s, so missed from 12:08. Later sweeps raise the same ids again (deduplicated).
    assert next(minute for minute, ids in raised if every in ids) == "12:07"
    assert next(minute for minute, ids in raised if strict in ids) == "12:08"
    assert seen.missed() == Counter({every: 1, strict: 1})
    by_id = {a.alert_id: a for a in seen.alerts}
    assert by_id[strict].severity == "critical" and by_id[strict].fire_at == T0 + 5 * M
    assert by_id[every].instance_id == "every@2026-11-29T12:01Z"
    # the dispatcher resumes: the slots fire by their misfire policy, nothing alerts twice
    for _ in range(5):
        clock.advance(M)
        dispatch_tick(clock.now(), services)
        assert sweep(services).missed_runs == []
    assert seen.missed() == Counter({every: 1, strict: 1})
    task = services.tasks.get_task("every")
    assert task is not None and task.next_fire is not None and task.next_fire > clock.now()
