"""The HTTP Device Management System adapter against a local REST server: pagination, a page
that fails once, a timeout, the clear error after the last retry, and no retry of a bad request."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest

from iotsched import bootstrap
from iotsched.adapters.dms_http import MAX_RETRY_AFTER_S, HttpDeviceDirectory
from iotsched.adapters.memory.devices import MemoryDeviceDirectory
from iotsched.clock import ManualClock
from iotsched.ports.devices import DirectoryError
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.scheduling.tick import dispatch_tick
from iotsched.tasklib import resources
from tests.iot.dms_server import DmsServer, Fault, dms_server
from tests.iot.support import GROUPS, TENANTS, fleet
from tests.support import T0, task


@pytest.fixture
def server() -> Iterator[DmsServer]:
    with dms_server(MemoryDeviceDirectory(TENANTS, GROUPS, fleet())) as running:
        yield running


def client(server: DmsServer, **kwargs: float) -> tuple[HttpDeviceDirectory, list[float]]:
    slept: list[float] = []
    options = {"timeout_s": 2.0, "page_size": 100, **kwargs}
    return (
        HttpDeviceDirectory(
            server.url,
            timeout_s=options["timeout_s"],
            page_size=int(options["page_size"]),
            attempts=int(options.get("attempts", 4)),
            backoff_s=0.01,
            sleep=slept.append,
        ),
        slept,
    )


def test_devices_come_page_by_page_in_id_order(server: DmsServer) -> None:
    directory, _ = client(server)
    devices = list(directory.devices("acme", "dev-000000", "dev-000600"))
    assert [d.device_id for d in devices] == [f"dev-{n:06d}" for n in range(600)]
    pages = [r for r in server.requests if "/devices" in r]
    assert len(pages) == 6 and "cursor=500" in pages[-1] and "limit=100" in pages[0]


def test_a_page_that_fails_once_is_retried_with_backoff(server: DmsServer) -> None:
    directory, slept = client(server)
    server.fail(Fault(match="cursor=300", times=1, status=503))
    devices = list(directory.devices("acme", "dev-000000", "dev-000600"))
    assert len(devices) == 600  # nothing lost, nothing twice
    assert len({d.device_id for d in devices}) == 600
    assert sum("cursor=300" in r for r in server.requests) == 2
    assert slept == [0.01]


def test_a_timeout_is_retried(server: DmsServer) -> None:
    directory, slept = client(server, timeout_s=0.3)
    server.fail(Fault(match="/groups", times=1, status=None, delay_s=1.0))
    assert [g.group for g in directory.groups("acme")] == ["north", "south"]
    assert slept == [0.01]


def test_the_last_failure_is_a_clear_error(server: DmsServer) -> None:
    directory, slept = client(server, attempts=3)
    server.fail(Fault(match="/tenants", times=10, status=502))
    with pytest.raises(DirectoryError) as caught:
        directory.tenants()
    message = str(caught.value)
    assert "did not answer after 3 attempts" in message and "HTTP 502" in message
    assert slept == [0.01, 0.02]  # doubling backoff between the three attempts


def test_repeated_timeouts_name_the_timeout(server: DmsServer) -> None:
    directory, _ = client(server, timeout_s=0.2, attempts=2)
    server.fail(Fault(match="/tenants", times=2, status=None, delay_s=0.6))
    with pytest.raises(DirectoryError, match=r"after 2 attempts; last error: timed out"):
        directory.tenants()


def test_a_bad_request_is_not_retried(server: DmsServer) -> None:
    directory, slept = client(server)
    server.fail(Fault(match="/devices", times=1, status=400))
    with pytest.raises(DirectoryError, match="HTTP 400"):
        list(directory.devices("acme", "dev-000000", "dev-000010"))
    assert slept == []


def test_retry_after_is_honoured_and_capped(server: DmsServer) -> None:
    directory, slept = client(server)
    server.fail(Fault(match="/groups", times=1, status=429, retry_after="3"))
    server.fail(Fault(match="/tenants?", times=1, status=503, retry_after="86400"))
    assert [g.group for g in directory.groups("acme")] == ["north", "south"]
    assert [t.tenant_id for t in directory.tenants()]
    assert slept == [3.0, MAX_RETRY_AFTER_S]  # the server's wait, never hours in a Lambda


def test_a_repeated_cursor_is_an_error_not_an_endless_loop(server: DmsServer) -> None:
    directory, _ = client(server)
    server.stuck_cursor = "100"
    with pytest.raises(DirectoryError, match="repeated the cursor '100'"):
        list(directory.devices("acme", "dev-000000", "dev-000600"))
    assert len([r for r in server.requests if "/devices" in r]) == 2  # the first, then cursor 100


def test_one_connection_serves_every_page(server: DmsServer) -> None:
    directory, _ = client(server)
    list(directory.devices("acme", "dev-000000", "dev-000600"))
    assert len([r for r in server.requests if "/devices" in r]) == 6
    assert server.connections == 1  # kept alive: a warm Lambda does not reconnect per page


def test_nobody_listening_is_a_clear_error() -> None:
    directory = HttpDeviceDirectory(
        "http://127.0.0.1:9/v1", timeout_s=0.5, attempts=2, backoff_s=0, sleep=lambda s: None
    )
    with pytest.raises(DirectoryError, match="connection failed"):
        directory.tenants()


def test_only_http_urls_are_accepted() -> None:
    with pytest.raises(ValueError, match="must be http"):
        HttpDeviceDirectory("file:///etc/passwd")


def test_a_retried_mark_is_made_once(server: DmsServer) -> None:
    directory, _ = client(server)
    server.fail(Fault(match="/offline", times=1, status=503))
    assert directory.mark_offline("acme", "dev-000010", since=T0) is True
    assert directory.mark_offline("acme", "dev-000010", since=T0) is False
    assert directory.mark_offline("acme", "dev-999999", since=T0) is False  # unknown: 404


def test_the_dispatcher_reads_groups_over_http_at_fire_time(server: DmsServer) -> None:
    directory, _ = client(server)
    clock = ManualClock(T0 - timedelta(minutes=7))
    services = bootstrap.build_memory(clock=clock, directory=directory)
    definition = task(
        "scan",
        trigger={"rate": "15m"},
        sharding={"strategy": "groups", "source": "device_directory"},
    )
    apply_tasks([definition], services.tasks, now=clock.now())
    dispatch_tick(T0, services)
    (instance,) = services.instances.list_instances(task_id="scan")
    assert [b["group"] for b in instance.plan.all_bounds()] == ["north", "south", "all"]


def test_group_windows_are_fixed_from_the_attributes_the_service_sends(server: DmsServer) -> None:
    directory, _ = client(server)
    clock = ManualClock(T0 - timedelta(minutes=7))
    services = bootstrap.build_memory(clock=clock, directory=directory)
    definition = task(
        "scan",
        trigger={"rate": "15m"},
        sharding={"strategy": "groups", "source": "device_directory"},
        window={"group_attribute": "maintenance_window", "cron": "0 3 * * *", "duration": "1h"},
    )
    apply_tasks([definition], services.tasks, now=clock.now())
    dispatch_tick(T0, services)
    (instance,) = services.instances.list_instances(task_id="scan")
    assert [(b["group"], b["window"]) for b in instance.plan.all_bounds()] == [
        ("north", {"cron": "0 2 * * *", "duration": "2h", "timezone": "Asia/Shanghai"}),
        # No attribute: the task's default, in the group's own timezone.
        ("south", {"cron": "0 3 * * *", "duration": "1h", "timezone": "Asia/Shanghai"}),
        # The attribute names its own timezone over the group's (Europe/Berlin).
        ("all", {"cron": "0 2 * * *", "duration": "2h", "timezone": "UTC"}),
    ]


def test_settings_choose_the_http_directory() -> None:
    from iotsched.adapters.aws import AwsClients
    from iotsched.settings import Settings

    settings = Settings.from_env(
        {
            "IOTSCHED_TABLE": "t",
            "IOTSCHED_SHARD_QUEUE_URL": "q",
            "IOTSCHED_ALERT_TOPIC_ARN": "a",
            "IOTSCHED_DMS_URL": "https://dms.example.com/v1",
            "IOTSCHED_DEVICE_TABLE": "devices",
            "IOTSCHED_DMS_TIMEOUT_S": "2.5",
        }
    )
    chosen = resources.device_directory(settings, AwsClients(region="us-east-1"))
    assert isinstance(chosen, HttpDeviceDirectory)
