"""Fixtures shared by every test ring.

AWS is only ever reached through an emulator: the environment below carries dummy credentials and
no profile, and every client the fixtures build is aimed at the embedded moto server.
"""

from __future__ import annotations

import os
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

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

import boto3  # noqa: E402  (after the environment above)

from iotsched import bootstrap  # noqa: E402
from iotsched.adapters.aws import AwsClients  # noqa: E402
from iotsched.clock import ManualClock  # noqa: E402
from iotsched.services import Services  # noqa: E402
from iotsched.settings import Settings  # noqa: E402
from tests.support import (  # noqa: E402
    T0,
    create_alert_topic,
    create_shard_queue,
    create_table,
)

REGION = "us-east-1"


@pytest.fixture(scope="session")
def moto_server() -> Iterator[str]:
    """An embedded moto server (real HTTP, threaded) for the whole session; yields its URL."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@dataclass(frozen=True)
class AwsResources:
    """The scheduler's resources on the moto server, created fresh for one test.

    Attributes:
        endpoint_url: the moto server.
        settings: scheduler settings aimed at these resources.
        table: DynamoDB table name.
        shard_queue_url: the shard queue (visibility 2 s, DLQ after 3 receives).
        shard_dlq_url: its dead-letter queue.
        alert_topic_arn: the SNS alert topic.
        alert_tap_url: an SQS queue subscribed to the topic (SNS envelope kept), to read alerts.
    """

    endpoint_url: str
    settings: Settings
    table: str
    shard_queue_url: str
    shard_dlq_url: str
    alert_topic_arn: str
    alert_tap_url: str

    def client(self, service: str) -> Any:
        """A new boto3 client for `service` on the moto server (one per thread, please)."""
        return boto3.session.Session(region_name=REGION).client(
            service,  # type: ignore[call-overload]
            endpoint_url=self.endpoint_url,
        )

    def clients(self) -> AwsClients:
        """A new iotsched client factory on the moto server."""
        return AwsClients(region=REGION, endpoint_url=self.endpoint_url)


def reset_moto(endpoint_url: str) -> None:
    """Drop every resource the server holds."""
    request = urllib.request.Request(f"{endpoint_url}/moto-api/reset", method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        response.read()


@pytest.fixture
def aws_resources(moto_server: str) -> AwsResources:
    """A clean moto server holding the table, the shard queue + DLQ and the alert topic + tap."""
    reset_moto(moto_server)
    session = boto3.session.Session(region_name=REGION)
    ddb = session.client("dynamodb", endpoint_url=moto_server)
    sqs = session.client("sqs", endpoint_url=moto_server)
    sns = session.client("sns", endpoint_url=moto_server)
    table = create_table(ddb, "iotsched-test")
    shard_url, dlq_url = create_shard_queue(sqs, "iotsched-shards")
    topic_arn, tap_url = create_alert_topic(sns, sqs, "iotsched-alerts")
    settings = Settings(
        table=table,
        shard_queue_url=shard_url,
        alert_topic_arn=topic_arn,
        region=REGION,
        endpoint_url=moto_server,
        worker_id="test-worker",
    )
    return AwsResources(
        endpoint_url=moto_server,
        settings=settings,
        table=table,
        shard_queue_url=shard_url,
        shard_dlq_url=dlq_url,
        alert_topic_arn=topic_arn,
        alert_tap_url=tap_url,
    )


@pytest.fixture
def clock() -> ManualClock:
    """A manual clock at `tests.support.T0`; move it with `advance()` or `set()`."""
    return ManualClock(T0)


@pytest.fixture
def memory_services(clock: ManualClock) -> Services:
    """Services on the in-memory fakes, on the `clock` fixture, with the built-in handlers."""
    return bootstrap.build_memory(clock=clock)


@pytest.fixture
def moto_services(aws_resources: AwsResources, clock: ManualClock) -> Services:
    """Services on the moto server's resources, on the `clock` fixture."""
    return bootstrap.build(aws_resources.settings, clock=clock, clients=aws_resources.clients())
