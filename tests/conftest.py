"""Fixtures shared by every test ring.

AWS is only ever reached through an emulator: the environment below carries dummy credentials and
no profile, and every client the fixtures build is aimed at the embedded moto server.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from typing import Any, cast

import pytest
from botocore.retries.standard import ExponentialBackoff
from xdist.scheduler import LoadGroupScheduling

# Before anything builds a boto3 session: dummy credentials, one region, no profile, no config
# file, no instance metadata. A client built without an endpoint would sign with "testing" and
# fail; it could never act on a real account.
for _name in (
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_DYNAMODB",
    "AWS_ENDPOINT_URL_SQS",
    "AWS_ENDPOINT_URL_SNS",
    "AWS_REGION",
):
    os.environ.pop(_name, None)
os.environ.update(
    {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        "AWS_EC2_METADATA_DISABLED": "true",
    }
)
# pytest-xdist's workers set COLUMNS=80 and LINES=24; a rich Console created at import would
# keep that size for good, and the tests that set COLUMNS for one command would not be heard.
for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)

from iotsched import bootstrap  # noqa: E402  (after the environment above)
from iotsched.adapters.aws import AwsClients  # noqa: E402
from iotsched.adversary.middleware import Adversary  # noqa: E402
from iotsched.adversary.schedule import AdversaryConfig  # noqa: E402
from iotsched.clock import ManualClock  # noqa: E402
from iotsched.local.emulator import EmulatorServer  # noqa: E402
from iotsched.services.wiring import Wiring  # noqa: E402
from iotsched.settings import Settings  # noqa: E402
from tests.support import (  # noqa: E402
    REGION,
    T0,
    TEST_BUCKETS,
    TEST_INDEX_BUCKETS,
    AwsResources,
    create_alert_topic,
    create_shard_queue,
    create_table,
    reset_moto,
)

# The test deployment's IndexBuckets, for every CLI process a test starts (tests.support).
os.environ["IOTSCHED_INDEX_BUCKETS"] = TEST_BUCKETS

#: How many real-process tests run at once under xdist (each lane is one xdist group, so one
#: worker): two runtimes side by side keep the machine's two cores busy while most of their time
#: is spent waiting on leases and visibility timeouts. `make test` runs two workers more than the
#: lanes.
REAL_PROCESS_LANES = int(os.environ.get("IOTSCHED_TEST_LANES", "2"))
#: Relative cost of the heaviest real-process modules (seconds of one run, rounded), only to
#: balance the lanes; a module not named costs DEFAULT_COST. A wrong figure costs balance, never
#: correctness.
MODULE_COST = {
    "test_console.py": 70,
    "test_local_lambda_like.py": 70,
    "test_local_up.py": 60,
    "test_client_runtime.py": 55,
    "test_demo.py": 50,
    "test_readme_commands.py": 50,
    "test_hostile_pages.py": 40,
    "test_local_processes.py": 35,
    "test_priority_runtime.py": 35,
    "test_quota_runtime.py": 35,
    "test_batch_failover_runtime.py": 30,
    "test_console_overview.py": 30,
    "test_failover_runtime.py": 30,
    "test_given_back.py": 30,
    "test_scaffold_project.py": 30,
    "test_failure_runtime.py": 20,
    "test_local_runtime.py": 20,
    "test_tenant_isolation_runtime.py": 20,
    "test_abort_runtime.py": 15,
    "test_cli_first_hour.py": 15,
}
DEFAULT_COST = 8


def real_process_lanes(modules: set[str], lanes: int) -> dict[str, int]:
    """Each module's lane: the costliest first, each to the lane with the least so far (a
    module keeps its runtime fixture on one worker)."""
    load = [0] * max(lanes, 1)
    lane_of: dict[str, int] = {}
    for module in sorted(modules, key=lambda m: (-MODULE_COST.get(m, DEFAULT_COST), m)):
        lane = load.index(min(load))
        lane_of[module] = lane
        load[lane] += MODULE_COST.get(module, DEFAULT_COST)
    return lane_of


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under `pytest -n N --dist loadgroup` (make test), the real-process tests run in
    REAL_PROCESS_LANES lanes, each lane's modules one after another on one worker: they wait on
    wall-clock timeouts and spawn processes of their own, so at most that many share the
    machine with the in-process tests at once, and each module's runtime starts once."""
    # xdist's scheduler reads a test's group from the end of its node id ("...@group"); its
    # own hook names it there by setting an attribute pytest 9 no longer reads, so it is named
    # here (on xdist's workers, which collect; never where a group would mean nothing).
    grouped = bool(getattr(config.option, "loadgroup", False))
    slow = {
        item.path.name
        for item in items
        if item.get_closest_marker("slow") is not None
        and item.get_closest_marker("wall_minutes") is None
    }
    lanes = real_process_lanes(slow, REAL_PROCESS_LANES)
    if grouped:
        # xdist hands out its largest groups first (the lanes), then the others in collection
        # order: the minutes-long waits go first among those, onto a worker of their own,
        # rather than last, onto a lane's worker as its lane ends.
        items.sort(key=lambda item: item.get_closest_marker("wall_minutes") is None)
    for item in items:
        # schemathesis names its items by operation (`test_x[GET /tasks]`) but gives them all
        # the function's node id; xdist's scheduler keys items by node id and would run one.
        if not item.nodeid.endswith(item.name) and item.parent is not None:
            item._id = item.parent.id.child(item.name)
        if not grouped:
            continue
        if item.get_closest_marker("wall_minutes") is not None:
            # Idle most of its run (a rate lets a few shards start each real minute): it waits
            # beside the others rather than adding its minutes to a lane's.
            group = "wall-minutes"
        elif item.get_closest_marker("slow") is not None:
            group = f"real-processes-{lanes[item.path.name]}"
        else:
            continue
        item.add_marker(pytest.mark.xdist_group(group))
        if not item.nodeid.endswith(f"@{group}"):
            item._id = type(item._id).parse(f"{item.nodeid}@{group}")
        # As the scheduler will read it, or the lanes silently become no lanes.
        if LoadGroupScheduling._split_scope(cast("Any", None), item.nodeid) != group:
            raise pytest.UsageError(f"{item.nodeid}: xdist does not read its group {group}")
    # Two items with one node id would silently run once under xdist: refuse the session.
    counts = Counter(item.nodeid for item in items)
    if twice := sorted(nodeid for nodeid, n in counts.items() if n > 1):
        raise pytest.UsageError(f"tests collected under one node id: {twice[:5]}")


@pytest.fixture(scope="session", autouse=True)
def quick_throttle_backoff() -> Iterator[None]:
    """botocore waits up to 1 s x 2^n (at most 20 s) before retrying a throttled request; the
    session's own clients wait a twentieth of that. The adversarial backend counts its
    throttles in requests, not time, so every retry sees what it would have seen: only the
    sleeps between them are shorter (they were most of the adversarial tests' minutes)."""
    scaled = {**ExponentialBackoff._DEFAULT_BACKOFF_CONFIG, "throttling_base_scale": 0.05}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ExponentialBackoff, "_DEFAULT_BACKOFF_CONFIG", scaled)
        yield


@pytest.fixture(scope="session")
def moto_server() -> Iterator[str]:
    """The embedded emulator (moto server, one request at a time) for the whole session."""
    server = EmulatorServer()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture(scope="session")
def moto_clients(moto_server: str) -> AwsClients:
    """Clients on the moto server, built once: resetting the server does not invalidate them."""
    return AwsClients(region=REGION, endpoint_url=moto_server)


@pytest.fixture(scope="session")
def adversarial_emulator() -> Iterator[EmulatorServer]:
    """A second emulator with the adversarial DynamoDB before moto (`.adversary`), for the
    session. moto's state is per process: it shares its backends with `moto_server`."""
    server = EmulatorServer(adversary=AdversaryConfig())
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def adversarial_clients(adversarial_emulator: EmulatorServer) -> AwsClients:
    """Clients on the adversarial emulator, built once."""
    return AwsClients(region=REGION, endpoint_url=adversarial_emulator.url)


@pytest.fixture
def adversary(adversarial_emulator: EmulatorServer) -> Adversary:
    """The adversarial emulator's adversary, started over with no faults (scripts only)."""
    assert adversarial_emulator.adversary is not None
    adversarial_emulator.adversary.configure(AdversaryConfig())
    return adversarial_emulator.adversary


@pytest.fixture
def adversarial_resources(
    aws_resources: AwsResources,
    adversarial_emulator: EmulatorServer,
    adversarial_clients: AwsClients,
) -> AwsResources:
    """`aws_resources` reached through the adversarial emulator (the same moto backends), its
    adversary started over at a moderate seeded fault rate."""
    assert adversarial_emulator.adversary is not None
    adversarial_emulator.adversary.configure(AdversaryConfig.moderate(seed=14))
    url = adversarial_emulator.url
    return replace(
        aws_resources,
        endpoint_url=url,
        settings=aws_resources.settings.with_endpoint(url),
        shared_clients=adversarial_clients,
    )


@pytest.fixture
def aws_resources(moto_server: str, moto_clients: AwsClients) -> AwsResources:
    """A clean moto server holding the table, the shard queue + DLQ and the alert topic + tap."""
    return _resources(moto_server, moto_clients)


def _resources(moto_server: str, moto_clients: AwsClients) -> AwsResources:
    reset_moto(moto_server)
    sqs = moto_clients.sqs()
    table = create_table(moto_clients.dynamodb(), "iotsched-test")
    shard_url, dlq_url = create_shard_queue(sqs, "iotsched-shards")
    topic_arn, tap_url = create_alert_topic(moto_clients.sns(), sqs, "iotsched-alerts")
    settings = Settings(
        table=table,
        shard_queue_url=shard_url,
        alert_topic_arn=topic_arn,
        region=REGION,
        endpoint_url=moto_server,
        worker_id="test-worker",
        index_buckets=TEST_INDEX_BUCKETS,
    )
    return AwsResources(
        endpoint_url=moto_server,
        settings=settings,
        table=table,
        shard_queue_url=shard_url,
        shard_dlq_url=dlq_url,
        alert_topic_arn=topic_arn,
        alert_tap_url=tap_url,
        shared_clients=moto_clients,
    )


@pytest.fixture
def clock() -> ManualClock:
    """A manual clock at `tests.support.T0`; move it with `advance()` or `set()`."""
    return ManualClock(T0)


@pytest.fixture
def memory_services(clock: ManualClock) -> Wiring:
    """Wiring on the in-memory fakes, on the `clock` fixture, with the built-in handlers."""
    return bootstrap.build_memory(clock=clock)


@pytest.fixture
def moto_services(aws_resources: AwsResources, clock: ManualClock) -> Wiring:
    """Wiring on the moto server's resources, on the `clock` fixture."""
    return bootstrap.build(aws_resources.settings, clock=clock, clients=aws_resources.clients())
