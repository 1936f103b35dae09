"""What the console reads beside each task: the trigger in words, the next fires, the newest
instance's outcome."""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any, cast

from iotsched.api import app as api_app
from iotsched.api.app import create_app
from iotsched.core.instance_record import InstanceRecord
from iotsched.services.wiring import Wiring
from tests.api.conftest import DEVICE_SCAN, Client

INSTANCE = "device-scan@2026-11-29T12:00Z"


def test_tasks_carry_words_next_fires_and_the_last_outcome(api: Client) -> None:
    daily = {
        **DEVICE_SCAN,
        "id": "close",
        "trigger": {"cron": "5 0 * * *", "timezone": "Asia/Shanghai"},
    }
    assert api.post("/tasks", {"tasks": [DEVICE_SCAN, daily]}).status == 200
    listed = {t["id"]: t for t in api.get("/tasks").body}
    scan, close = listed["device-scan"], listed["close"]
    assert scan["trigger_text"] == "every hour"
    assert close["trigger_text"] == "every day at 00:05 (Asia/Shanghai)"
    # the clock is at T0 = 2026-11-29T12:00Z: the next hours, and 00:05 Shanghai = 16:05 UTC
    assert scan["next_fires"][:3] == [
        "2026-11-29T13:00:00.000Z",
        "2026-11-29T14:00:00.000Z",
        "2026-11-29T15:00:00.000Z",
    ]
    assert len(close["next_fires"]) == 5
    assert all(f.endswith("T16:05:00.000Z") for f in close["next_fires"])
    assert scan["last_instance"] is None

    api.post("/tasks/device-scan/runs", {"business_date": "2026-11-28"})
    last: dict[str, Any] = api.get("/tasks/device-scan").body["last_instance"]
    assert last == {
        "instance_id": INSTANCE,
        "status": "running",
        "trigger_kind": "manual",
        "business_date": "2026-11-28",
        "finished_at": None,
        "failed_shards": 0,
    }
    paused = api.post("/tasks/device-scan/pause").body
    assert paused["paused"] is True
    assert paused["next_fires"] == []  # a paused task fires nothing
    assert paused["last_instance"]["instance_id"] == INSTANCE


class SlowReads:
    """Wraps the instance store: each `list_instances` takes 20 ms; counts those in flight."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self._lock = threading.Lock()
        self.in_flight = self.most_in_flight = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def list_instances(self, **query: Any) -> list[InstanceRecord]:
        with self._lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            time.sleep(0.02)
            found: list[InstanceRecord] = self._store.list_instances(**query)
            return found
        finally:
            with self._lock:
                self.in_flight -= 1


def test_many_tasks_are_listed_in_order_each_with_its_own_newest_instance(
    memory_services: Wiring,
) -> None:
    slow = SlowReads(memory_services.instances)
    svc = dataclasses.replace(memory_services, instances=cast("Any", slow))
    api = Client(create_app(lambda: svc), svc)
    ids = [f"scan-{n:02d}" for n in range(40)]
    assert api.post("/tasks", {"tasks": [{**DEVICE_SCAN, "id": i} for i in ids]}).status == 200
    for n, task_id in enumerate(ids[::3]):  # every third task has run, each for its own day
        runs = api.post(f"/tasks/{task_id}/runs", {"business_date": f"2026-11-{n + 1:02d}"})
        assert runs.status in (200, 201, 202), runs.body

    listed = api.get("/tasks").body

    assert [t["id"] for t in listed] == sorted(ids)
    for task in listed:
        last = task["last_instance"]
        if task["id"] in ids[::3]:
            n = ids[::3].index(task["id"])
            assert last["instance_id"].startswith(f"{task['id']}@")
            assert last["business_date"] == f"2026-11-{n + 1:02d}"
        else:
            assert last is None
    # the newest-instance reads overlapped, bounded by TASK_READS_IN_FLIGHT
    assert 1 < slow.most_in_flight <= api_app.TASK_READS_IN_FLIGHT
