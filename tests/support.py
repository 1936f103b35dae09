"""Helpers shared by every test ring: AWS resources as template.yaml declares them, and builders.

Nothing here opens a socket by itself: the AWS helpers take clients that the caller aimed at an
emulator (the `moto_server` fixture in `tests/conftest.py`).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import boto3

from iotsched.adapters.aws import AwsClients
from iotsched.core.alert_message import Alert
from iotsched.core.decisions import Firing
from iotsched.core.instance_record import (
    InstanceRecord,
    InstanceStatus,
    TriggerKind,
)
from iotsched.core.shard_message import ShardMessage
from iotsched.core.task_definition import TaskDefinition
from iotsched.core.task_record import TaskRecord
from iotsched.local.template import load as load_template
from iotsched.services.scheduling.build import build_instance
from iotsched.settings import Settings

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_sns import SNSClient
    from mypy_boto3_sqs import SQSClient

    from iotsched.local.runtime import LocalRuntime

#: The instant most tests start at: a Sunday noon, UTC, on a whole minute.
T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)

#: The bound of a wait for something the system does (poll the condition until it holds): generous,
#: so that a loaded machine only makes a test slower, never makes it fail.
PATIENCE_S = 300

#: The region every emulated resource lives in.
REGION = "us-east-1"

#: Indexes of the scheduler's table (template.yaml `Table`): name -> (hash key, range key).
TABLE_INDEXES = {
    "by_due": ("due_pk", "due_sk"),
    "by_status": ("status_pk", "status_sk"),
    "by_deadline": ("open_pk", "open_sk"),
    "by_date": ("date_pk", "sk"),
}


def _template_projections() -> dict[str, dict[str, Any]]:
    """Each index's Projection as template.yaml declares it: the tests' table projects what
    the deployed one does, so a reader that needs an attribute the index leaves out fails."""
    template = load_template(Path(__file__).resolve().parents[1] / "template.yaml")
    indexes = template["Resources"]["Table"]["Properties"]["GlobalSecondaryIndexes"]
    return {i["IndexName"]: i["Projection"] for i in indexes}


#: Each index's projection (template.yaml's).
INDEX_PROJECTIONS = _template_projections()


# -- AWS resources (as template.yaml declares them) ---------------------------------------------


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
        shared_clients: clients on the server, built once per session (building one is slow).
    """

    endpoint_url: str
    settings: Settings
    table: str
    shard_queue_url: str
    shard_dlq_url: str
    alert_topic_arn: str
    alert_tap_url: str
    shared_clients: AwsClients

    def clients(self) -> AwsClients:
        """The session's iotsched client factory on the moto server (clients are cached)."""
        return self.shared_clients

    def client(self, service: str) -> Any:
        """The session's boto3 client for `service` (thread-safe; cached, fast)."""
        return self.shared_clients._client(service)

    def new_clients(self) -> AwsClients:
        """A fresh client factory: its own session and connections, as another process has."""
        return AwsClients(region=REGION, endpoint_url=self.endpoint_url)

    def new_client(self, service: str) -> Any:
        """A fresh boto3 client for `service` (about 0.1 s to build: prefer `client`)."""
        return boto3.session.Session(region_name=REGION).client(
            service,  # type: ignore[call-overload]
            endpoint_url=self.endpoint_url,
        )


def reset_moto(endpoint_url: str) -> None:
    """Drop every resource a moto server holds."""
    request = urllib.request.Request(f"{endpoint_url}/moto-api/reset", method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        response.read()


def create_table(client: DynamoDBClient, name: str) -> str:
    """Create the scheduler's table (pk/sk, three sparse GSIs, on demand); returns its name."""
    keys = list(dict.fromkeys(["pk", "sk", *(k for pair in TABLE_INDEXES.values() for k in pair)]))
    client.create_table(
        TableName=name,
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": k, "AttributeType": "S"} for k in keys],
        KeySchema=[
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"},
        ],
        GlobalSecondaryIndexes=[
            {
                "IndexName": index,
                "KeySchema": [
                    {"AttributeName": hash_key, "KeyType": "HASH"},
                    {"AttributeName": range_key, "KeyType": "RANGE"},
                ],
                "Projection": cast("Any", INDEX_PROJECTIONS[index]),
            }
            for index, (hash_key, range_key) in TABLE_INDEXES.items()
        ],
    )
    return name


def item_size(item: Mapping[str, Any]) -> int:
    """A DynamoDB item's size as DynamoDB counts it (names + values, in bytes; close enough)."""

    def value_size(value: Mapping[str, Any]) -> int:
        ((kind, inner),) = value.items()
        if kind in ("S", "N", "B"):
            return len(inner if isinstance(inner, bytes) else str(inner).encode())
        if kind in ("BOOL", "NULL"):
            return 1
        if kind == "L":
            return 3 + sum(1 + value_size(v) for v in inner)
        if kind == "M":
            return 3 + sum(len(k.encode()) + 1 + value_size(v) for k, v in inner.items())
        return sum(len(str(v).encode()) for v in inner)  # SS, NS, BS

    return sum(len(name.encode()) + value_size(value) for name, value in item.items())


def queue_arn(client: SQSClient, url: str) -> str:
    """The ARN of the queue at `url`."""
    attrs = client.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
    return attrs["Attributes"]["QueueArn"]


def create_shard_queue(
    client: SQSClient, name: str, *, visibility_timeout_s: int = 2, max_receive_count: int = 3
) -> tuple[str, str]:
    """Create the shard queue and its DLQ (RedrivePolicy); returns (queue url, dlq url)."""
    dlq_url = client.create_queue(QueueName=f"{name}-dlq")["QueueUrl"]
    redrive = {
        "deadLetterTargetArn": queue_arn(client, dlq_url),
        "maxReceiveCount": max_receive_count,
    }
    url = client.create_queue(
        QueueName=name,
        Attributes={
            "VisibilityTimeout": str(visibility_timeout_s),
            "RedrivePolicy": json.dumps(redrive),
        },
    )["QueueUrl"]
    return url, dlq_url


def create_alert_topic(sns: SNSClient, sqs: SQSClient, name: str) -> tuple[str, str]:
    """Create the alert topic and an SQS queue subscribed to it (SNS envelope kept).

    Returns (topic arn, subscribed queue url); read alerts back with `read_alerts`.
    """
    topic_arn = sns.create_topic(Name=name)["TopicArn"]
    tap_url = sqs.create_queue(QueueName=f"{name}-tap")["QueueUrl"]
    sns.subscribe(
        TopicArn=topic_arn,
        Protocol="sqs",
        Endpoint=queue_arn(sqs, tap_url),
        Attributes={"RawMessageDelivery": "false"},
    )
    return topic_arn, tap_url


def receive_all(
    client: SQSClient, url: str, *, expect: int | None = None, max_polls: int = 10
) -> list[dict[str, Any]]:
    """Receive (and delete) every message on the queue.

    Stops when a poll comes back empty, or once `expect` messages arrived; polls at most
    `max_polls` times so a missing message fails the caller's assertion instead of hanging.
    """
    got: list[dict[str, Any]] = []
    for _ in range(max_polls if expect != 0 else 1):
        out = client.receive_message(
            QueueUrl=url,
            MaxNumberOfMessages=10,
            WaitTimeSeconds=1 if expect else 0,
            AttributeNames=["All"],
            MessageAttributeNames=["All"],
        )
        messages = out.get("Messages", [])
        for message in messages:
            client.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
        got.extend(dict(m) for m in messages)
        if expect is not None and len(got) >= expect:
            break
        if expect is None and not messages:
            break
    return got


def received_shard_messages(messages: list[dict[str, Any]]) -> list[ShardMessage]:
    """Shard messages parsed from raw SQS messages, ordered by (instance, shard)."""
    parsed = [ShardMessage.model_validate_json(m["Body"]) for m in messages]
    return sorted(parsed, key=lambda m: (m.instance_id, m.shard))


def read_alerts(
    client: SQSClient, tap_url: str, *, expect: int | None = None
) -> list[tuple[Alert, dict[str, str]]]:
    """Alerts that reached the subscribed queue: (alert, SNS message attributes as strings)."""
    out = []
    for message in receive_all(client, tap_url, expect=expect):
        envelope = json.loads(message["Body"])
        attributes = {
            name: value["Value"] for name, value in envelope.get("MessageAttributes", {}).items()
        }
        out.append((Alert.model_validate_json(envelope["Message"]), attributes))
    return out


# -- builders -----------------------------------------------------------------------------------


class Timers:
    """A shard batch's timer nobody fires: the test commits the batch itself."""

    def __call__(self, delay_s: float, call: Any) -> Any:
        return self

    def cancel(self) -> None:
        """Nothing scheduled."""


def task(task_id: str = "t", **fields: Any) -> TaskDefinition:
    """A valid task definition (`noop`, hourly) with `fields` overriding the defaults."""
    data: dict[str, Any] = {"id": task_id, "handler": "noop", "trigger": {"rate": "1h"}}
    data.update(fields)
    return TaskDefinition.model_validate(data)


def task_record(
    definition: TaskDefinition,
    *,
    next_fire: datetime | None,
    last_slot: datetime | None = None,
    version: int = 1,
    updated_at: datetime = T0,
) -> TaskRecord:
    """A stored task with its dispatcher clock."""
    return TaskRecord(
        definition=definition,
        version=version,
        next_fire=next_fire,
        last_slot=last_slot,
        updated_at=updated_at,
    )


def instance(
    task_id: str = "t",
    slot: datetime = T0,
    *,
    shards: int | list[Mapping[str, Any]] = 1,
    status: InstanceStatus = InstanceStatus.PLANNING,
    claimed_at: datetime | None = None,
    dispatch_lease_s: int = 60,
    **fields: Any,
) -> InstanceRecord:
    """The instance the dispatcher would claim for `task_id` at `slot`.

    `shards` is a count (static shards `{"n": i}`) or the explicit bounds of each shard.
    """
    bounds = [{"n": i} for i in range(shards)] if isinstance(shards, int) else list(shards)
    definition = task(task_id, sharding={"strategy": "static", "shards": bounds}, **fields)
    return build_instance(
        task_record(definition, next_fire=slot),
        Firing(slot=slot, kind=TriggerKind.SCHEDULED, status=status),
        claimed_at=claimed_at or slot,
        dispatch_lease_s=dispatch_lease_s,
    )


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def local_up_argv(*, aws_port: int, port: int, clock: tuple[str, ...]) -> list[str]:
    """`iotsched local up` in a child interpreter; `clock` is `("--manual-clock",)` or a speed."""
    cli = [sys.executable, "-m", "iotsched.cli", "local", "up", *clock]
    return [*cli, "--aws-port", str(aws_port), "--port", str(port)]


def local_up_env() -> dict[str, str]:
    """This environment without anything that would aim `local up` at another deployment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("IOTSCHED_")}
    env.pop("AWS_ENDPOINT_URL", None)
    return env


@contextmanager
def local_up_logged(
    log_path: Path, *, aws_port: int, port: int, env: Mapping[str, str], args: tuple[str, ...] = ()
) -> Iterator[str]:
    """`iotsched local up --manual-clock` (and `args`) from the repository's root, its output
    in `log_path`: yields its banner once it serves. On the way out it is stopped with SIGINT
    (killed if it has not stopped within 60 s), and its output must hold no traceback."""
    argv = local_up_argv(aws_port=aws_port, port=port, clock=("--manual-clock",))
    log = log_path.open("w+")
    proc = subprocess.Popen(
        [*argv, *args],
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
        env=dict(env),
        cwd=Path(__file__).resolve().parents[1],
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            log.seek(0)
            if "Ctrl-C" in log.read():
                break
            time.sleep(0.2)
        log.seek(0)
        banner = log.read()
        assert "Ctrl-C" in banner, banner
        yield banner
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.seek(0)
        output = log.read()
        log.close()
    assert "Traceback" not in output, output


def wait_for_instances(
    api_url: str, task_id: str, done: Callable[[list[dict[str, Any]]], bool]
) -> list[dict[str, Any]]:
    """Poll `GET {api_url}/api/instances?task_id=` of a `local up` until `done(instances)`.

    A read over HTTP in this process: polling with a CLI process per look would start an
    interpreter a second, and the CPU that takes is what the runtime under test waits for.
    The caller asserts through the CLI once the wait is over."""
    from iotsched.local.supervisor import wait_until

    url = f"{api_url.rstrip('/')}/api/instances?task_id={task_id}"
    seen: list[dict[str, Any]] = []

    def looked() -> bool:
        nonlocal seen
        with urllib.request.urlopen(url, timeout=30) as answer:
            seen = json.loads(answer.read())
        return done(seen)

    wait_until(looked, PATIENCE_S, 0.5)
    return seen


TEMPLATE = Path(__file__).resolve().parents[1] / "template.yaml"


def wait_swept(
    runtime: LocalRuntime, predicate: Callable[[], bool], *, deaths: int, every_s: float = 5
) -> bool:
    """`runtime.wait_for(predicate, PATIENCE_S)`, delivering a sweep every `every_s` once a
    worker died after `deaths` (its `timeouts + respawns` before the work began).

    A worker whose invocation runs out of time (a short worker timeout on a loaded machine)
    may die between a shard's write and the finalize: the instance is left at zero for the
    sweeper, which a deployment runs every minute and a manual clock never does. Until a
    worker dies nothing is swept, so the workers' own path is what a passing test shows.
    """
    last_sweep = time.monotonic()

    def progress() -> bool:
        nonlocal last_sweep
        if predicate():
            return True
        died = runtime.timeouts + runtime.respawns > deaths
        if died and time.monotonic() > last_sweep + every_s:
            runtime.sweep()
            last_sweep = time.monotonic()
        return False

    return runtime.wait_for(progress, PATIENCE_S)


#: The index buckets of every test deployment: the stores the fixtures build, the CLI processes
#: (IOTSCHED_INDEX_BUCKETS, set in tests/conftest.py) and the local runtimes' IndexBuckets. Each
#: bucket is a query per read of a write-sharded index; the tests that are about bucket counts
#: (tests/contract/test_sharded_keys.py, test_lease_index.py, test_due_buckets.py) choose theirs.
TEST_INDEX_BUCKETS = 4
TEST_BUCKETS = str(TEST_INDEX_BUCKETS)


@contextmanager
def started_runtime(
    log_dir: Path,
    *,
    parameters: dict[str, str],
    env: dict[str, str],
    dispatchers: int,
    workers: int = 2,
    traces: bool = False,
) -> Iterator[LocalRuntime]:
    """A started LocalRuntime on the template with a manual clock and `workers` processes.

    It deploys `IndexBuckets` 4 unless `parameters` say otherwise: every bucket costs the
    emulator (one request at a time) a dispatcher invocation per tick and a query per index
    read; the contract tests cover bucket counts from 1 to 32."""
    from iotsched.local.runtime import LocalRuntime

    rt = LocalRuntime(
        TEMPLATE,
        manual_clock=True,
        workers=workers,
        dispatchers=dispatchers,
        parameter_overrides={"IndexBuckets": TEST_BUCKETS, **parameters},
        env_overrides=env,
        log_dir=log_dir,
        traces=traces,
    )
    rt.start()
    try:
        yield rt
    finally:
        rt.stop()
