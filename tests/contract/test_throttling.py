"""Throttling and transient errors on DynamoDB, SQS and SNS lose nothing and double nothing.

The services' boto3 clients use botocore's `standard` retry mode with 10 attempts in all
(`RETRY_CONFIG` in src/iotsched/adapters/aws.py: `retries={"mode": "standard",
"total_max_attempts": 10}`: the first try and 9 retries). A throttled or failed call is retried with
exponential backoff and jitter (about 1 s scale for throttling, 25-50 ms for 5xx), and the
scheduler relies on every write being conditional or idempotent for those retries to be safe.

Faults are injected with botocore event hooks on the very clients the services use (a fresh
`AwsClients`, so that no other test sees them): a `before-send` handler answers some calls itself
with a 400 throttling error or a 5xx, before they reach the moto server, so the retry is the
first request that reaches it; or it forwards a call to the server and then answers 500, as when
DynamoDB applied a write and its response was lost (a read timeout, a reset connection), so the
retry repeats a write that landed.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, cast

import pytest
from botocore.awsrequest import AWSPreparedRequest, AWSResponse
from botocore.httpsession import URLLib3Session

from iotsched import bootstrap
from iotsched.adapters.aws import AwsClients
from iotsched.clock import ManualClock
from iotsched.core.instance_record import InstanceStatus
from iotsched.core.shard_record import ShardStatus
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.execution.batch import run_shard
from iotsched.services.execution.outcomes import (
    Delivery,
    RetryShardError,
    ShardOutcome,
)
from iotsched.services.scheduling.tick import dispatch_tick
from iotsched.services.wiring import Wiring
from tests.support import T0, AwsResources, read_alerts, receive_all, task

pytestmark = pytest.mark.moto

S = timedelta(seconds=1)
IID = "t@2026-11-29T12:00Z"


# -- fault injection ---------------------------------------------------------------------------


class _Body:
    """The raw body of an injected response."""

    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **kwargs: Any) -> Iterator[bytes]:
        yield self._body


@dataclass(frozen=True)
class Fault:
    """An error response: a code (as the service's protocol carries it) and an HTTP status."""

    code: str
    status: int

    def response(self, service: str, url: str) -> AWSResponse:
        headers = {"x-amzn-RequestId": "injected-by-test"}
        if service == "sns":  # the query protocol: XML
            body = (
                "<ErrorResponse><Error><Type>Receiver</Type>"
                f"<Code>{self.code}</Code><Message>injected</Message></Error>"
                "<RequestId>injected-by-test</RequestId></ErrorResponse>"
            ).encode()
            headers["Content-Type"] = "text/xml"
        else:  # DynamoDB and SQS speak JSON 1.0
            namespace = {
                "dynamodb": "com.amazonaws.dynamodb.v20120810#",
                "sqs": "com.amazonaws.sqs#",
            }[service]
            body = json.dumps({"__type": namespace + self.code, "message": "injected"}).encode()
            headers["Content-Type"] = "application/x-amz-json-1.0"
            if service == "sqs":
                side = "Sender" if self.status < 500 else "Receiver"
                headers["x-amzn-query-error"] = f"{self.code};{side}"
        return AWSResponse(url, self.status, cast("Any", headers), _Body(body))


PTEE = Fault("ProvisionedThroughputExceededException", 400)
THROTTLING = Fault("ThrottlingException", 400)
INTERNAL = Fault("InternalServerError", 500)
UNAVAILABLE = Fault("ServiceUnavailable", 503)
SNS_THROTTLED = Fault("Throttling", 400)
SNS_INTERNAL = Fault("InternalFailure", 500)


@dataclass
class Injector:
    """Answers every `period`-th call of each service with the next fault of its cycle.

    A call after an injected fault is never injected (period > 1): each fault costs one retry.
    `retries` collects botocore's `RetryAttempts` of every call that came back.
    """

    cycles: dict[str, list[Fault]]
    period: int = 4
    calls: Counter[str] = field(default_factory=Counter)
    injected: list[tuple[str, str, str]] = field(default_factory=list)
    retries: list[int] = field(default_factory=list)

    def install(self, clients: AwsClients) -> None:
        for service, client in (
            ("dynamodb", clients.dynamodb()),
            ("sqs", clients.sqs()),
            ("sns", clients.sns()),
        ):
            client.meta.events.register(f"before-send.{service}", cast("Any", self.before_send))
            client.meta.events.register(f"after-call.{service}", self.after_call)

    def before_send(
        self, request: AWSPreparedRequest, event_name: str, **kwargs: Any
    ) -> AWSResponse | None:
        _, service, operation = event_name.split(".")
        self.calls[service] += 1
        cycle = self.cycles.get(service)
        if not cycle or self.calls[service] % self.period != 2:
            return None
        fault = cycle[len([i for i in self.injected if i[0] == service]) % len(cycle)]
        self.injected.append((service, operation, fault.code))
        return fault.response(service, request.url)

    def after_call(self, parsed: dict[str, Any], **kwargs: Any) -> None:
        self.retries.append(int(parsed.get("ResponseMetadata", {}).get("RetryAttempts", 0)))


@dataclass
class LostResponse:
    """Forwards the first matching call to the server, then answers 500: the write landed."""

    operation: str
    marker: str
    armed: bool = True
    landed: int = 0
    then: Callable[[], None] | None = None  # what others do between the landing and the retry
    _http: URLLib3Session = field(default_factory=URLLib3Session)

    def install(self, clients: AwsClients) -> None:
        hook = cast("Any", self.before_send)  # a before-send handler may answer the call
        clients.dynamodb().meta.events.register("before-send.dynamodb", hook)
        clients.sqs().meta.events.register("before-send.sqs", hook)

    def before_send(
        self, request: AWSPreparedRequest, event_name: str, **kwargs: Any
    ) -> AWSResponse | None:
        body = request.body.decode() if isinstance(request.body, bytes) else str(request.body)
        if not self.armed or not event_name.endswith(f".{self.operation}"):
            return None
        if self.marker not in body:
            return None
        self.armed = False
        real = self._http.send(request)
        assert real.status_code == 200, real.content
        self.landed += 1
        if self.then is not None:
            self.then()
        return INTERNAL.response(event_name.split(".")[1], request.url)


def faulty_services(
    aws: AwsResources, clock: ManualClock, install: Callable[[AwsClients], None]
) -> tuple[Wiring, AwsClients]:
    """Wiring on fresh clients (their own session) with the faults installed."""
    clients = aws.new_clients()
    install(clients)
    return bootstrap.build(aws.settings, clock=clock, clients=clients), clients


def work_off_the_queue(
    services: Wiring, clients: AwsClients, url: str, *, done: Callable[[], bool]
) -> list[ShardOutcome]:
    """Act as the event source mapping: receive, run, delete unless the attempt is retried."""
    sqs = clients.sqs()
    outcomes: list[ShardOutcome] = []
    deadline = time.monotonic() + 60
    while not done():
        assert time.monotonic() < deadline, f"stuck; outcomes so far {outcomes}"
        received = sqs.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["All"]
        ).get("Messages", [])
        if not received:
            time.sleep(0.1)
        for message in received:
            delivery = Delivery(
                body=message["Body"],
                receipt_handle=message["ReceiptHandle"],
                receive_count=int(message["Attributes"]["ApproximateReceiveCount"]),
            )
            try:
                outcomes.append(run_shard(delivery, services, worker="w"))
            except RetryShardError:
                continue  # a batch item failure: the message comes back after the backoff
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    return outcomes


def apply_at_t0(services: Wiring, clock: ManualClock, *definitions: Any) -> None:
    apply_tasks(list(definitions), services.tasks, now=T0 - 7 * 60 * S)
    clock.set(T0 + 3 * S)


def instance_final(services: Wiring, *ids: str) -> Callable[[], bool]:
    def check() -> bool:
        found = [services.instances.get_instance(i) for i in ids]
        return all(i is not None and i.status.final for i in found)

    return check


# -- throttling and 5xx before the request lands -----------------------------------------------


def test_the_clients_retry_in_standard_mode_with_ten_attempts(aws_resources: AwsResources) -> None:
    clients = aws_resources.new_clients()
    for client in (clients.dynamodb(), clients.sqs(), clients.sns()):
        # `total_max_attempts: 10` in RETRY_CONFIG: the first try and 9 retries.
        retries = getattr(client.meta.config, "retries")  # noqa: B009 (not in the stubs)
        assert retries == {"mode": "standard", "total_max_attempts": 10}


@pytest.mark.load
def test_a_full_flow_under_throttling_and_5xx_loses_nothing_and_doubles_nothing(
    aws_resources: AwsResources, clock: ManualClock
) -> None:
    injector = Injector(
        cycles={
            # Throttling backs off on a 1 s scale, 5xx on 25-50 ms: few throttles keep it fast.
            "dynamodb": [PTEE, INTERNAL, UNAVAILABLE, INTERNAL, THROTTLING, INTERNAL, INTERNAL],
            "sqs": [INTERNAL, THROTTLING, INTERNAL, INTERNAL],
            "sns": [SNS_INTERNAL, SNS_THROTTLED],
        },
        period=4,
    )
    services, clients = faulty_services(aws_resources, clock, injector.install)
    statics = {"strategy": "static", "shards": [{"n": 0}, {"n": 1}, {"n": 2}]}
    apply_at_t0(
        services,
        clock,
        task("t", trigger={"rate": "15m"}, sharding=statics),
        task(
            "bad",
            trigger={"rate": "15m"},
            sharding={"strategy": "static", "shards": [{"n": 0}, {"n": 1}]},
            params={"fail": [1]},
            retry={"max_attempts": 2, "backoff_s": 0},
        ),
    )
    bad_id = "bad@2026-11-29T12:00Z"

    # The tick, delivered twice.
    # (the second finds the tasks advanced: nothing due, nothing claimed, nothing sent)
    first, second = (dispatch_tick(T0 + 20 * S, services) for _ in range(2))
    assert (sorted(first.claimed), first.messages_sent) == ([bad_id, IID], 5)
    assert (second.claimed, second.resumed, second.messages_sent) == ([], [], 0)

    outcomes = work_off_the_queue(
        services, clients, aws_resources.shard_queue_url, done=instance_final(services, IID, bad_id)
    )
    assert sorted(outcomes) == sorted([ShardOutcome.SUCCEEDED] * 4 + [ShardOutcome.FAILED]), (
        outcomes
    )

    # Nothing lost, nothing doubled.
    instances = {i.instance_id: i for i in services.instances.list_instances()}
    assert set(instances) == {IID, bad_id}
    good, bad = instances[IID], instances[bad_id]
    assert (good.status, good.remaining, good.failed_shards) == (InstanceStatus.SUCCEEDED, 0, 0)
    assert (bad.status, bad.remaining, bad.failed_shards) == (InstanceStatus.FAILED, 0, 1)
    for shard in services.instances.list_shards(IID):
        assert (shard.status, shard.attempt) == (ShardStatus.SUCCEEDED, 1)
        assert [a.outcome for a in shard.attempts] == ["succeeded"]
    ok_shard, failed_shard = services.instances.list_shards(bad_id)
    assert (ok_shard.status, ok_shard.attempt) == (ShardStatus.SUCCEEDED, 1)
    assert (failed_shard.status, failed_shard.attempt) == (ShardStatus.FAILED, 2)
    assert [a.outcome for a in failed_shard.attempts] == ["failed", "failed"]
    for task_id in ("t", "bad"):
        advanced = services.tasks.get_task(task_id)
        assert advanced is not None
        assert (advanced.last_slot, advanced.next_fire) == (T0, T0 + 15 * 60 * S)
    assert receive_all(aws_resources.client("sqs"), aws_resources.shard_queue_url) == []
    alerts = read_alerts(aws_resources.client("sqs"), aws_resources.alert_tap_url, expect=1)
    assert [(a.type, a.instance_id) for a, _ in alerts] == [("instance_failed", bad_id)]
    assert read_alerts(aws_resources.client("sqs"), aws_resources.alert_tap_url) == []

    # ... while the faults really happened and every one of them was retried.
    by_service = Counter(service for service, _, _ in injector.injected)
    codes = {code for _, _, code in injector.injected}
    assert by_service["dynamodb"] >= 10 and by_service["sqs"] >= 2, injector.injected
    assert {PTEE.code, THROTTLING.code, INTERNAL.code, UNAVAILABLE.code} <= codes
    operations = {op for service, op, _ in injector.injected if service == "dynamodb"}
    # the leases (a first attempt's lease is a conditional PutItem) and the completions
    assert {"PutItem", "TransactWriteItems"} <= operations, operations
    assert sum(injector.retries) == len(injector.injected)


# -- a write that landed, then lost its response -----------------------------------------------


def test_a_claim_whose_response_was_lost_is_still_this_dispatchers_claim(
    aws_resources: AwsResources, clock: ManualClock
) -> None:
    """The retried claim finds its own write token: it won the claim and sends at once."""
    lost = LostResponse("PutItem", "attribute_not_exists(pk)")
    services, clients = faulty_services(aws_resources, clock, lost.install)
    apply_at_t0(services, clock, task("t", trigger={"rate": "15m"}))
    first = dispatch_tick(T0, services)
    assert lost.landed == 1
    assert (first.claimed, first.duplicate_claims, first.messages_sent) == ([IID], 0, 1)
    outcomes = work_off_the_queue(
        services, clients, aws_resources.shard_queue_url, done=instance_final(services, IID)
    )
    assert outcomes == [ShardOutcome.SUCCEEDED]
    assert len(services.instances.list_instances()) == 1


def test_a_message_batch_sent_twice_runs_each_shard_once(
    aws_resources: AwsResources, clock: ManualClock
) -> None:
    """SendMessageBatch landed and is retried: every shard message arrives twice."""
    lost = LostResponse("SendMessageBatch", IID)
    services, clients = faulty_services(aws_resources, clock, lost.install)
    apply_at_t0(
        services,
        clock,
        task("t", trigger={"rate": "15m"}, sharding={"strategy": "static", "shards": [{}, {}]}),
    )
    assert dispatch_tick(T0, services).claimed == [IID]
    assert lost.landed == 1
    final = instance_final(services, IID)
    outcomes = work_off_the_queue(
        services,
        clients,
        aws_resources.shard_queue_url,
        done=lambda: final() and not _visible(aws_resources),  # the late copies too
    )
    assert len(outcomes) == 4, outcomes
    assert outcomes.count(ShardOutcome.SUCCEEDED) == 2
    assert set(outcomes) - {ShardOutcome.SUCCEEDED} <= {
        ShardOutcome.DUPLICATE,
        ShardOutcome.NOT_STARTED,
    }
    for shard in services.instances.list_shards(IID):
        assert (shard.status, shard.attempt) == (ShardStatus.SUCCEEDED, 1)
    inst = services.instances.get_instance(IID)
    assert inst is not None and (inst.status, inst.remaining) == (InstanceStatus.SUCCEEDED, 0)


def _visible(aws: AwsResources) -> bool:
    attrs = aws.client("sqs").get_queue_attributes(
        QueueUrl=aws.shard_queue_url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return any(int(v) > 0 for v in attrs.values())


@pytest.mark.parametrize(
    ("lost", "fields", "attempts"),
    [
        # a first attempt's lease: the conditional PutItem of the new shard record
        (LostResponse("PutItem", "SHARD#"), {"retry": {"max_attempts": 1}}, 1),
        # a retry's lease: the conditional UpdateItem of the released record
        (
            LostResponse("UpdateItem", "if_not_exists(attempt"),
            {"params": {"fail_attempts": 1}, "retry": {"max_attempts": 2, "backoff_s": 0}},
            2,
        ),
    ],
    ids=["first-attempt", "retry"],
)
def test_a_lease_whose_response_was_lost_still_runs_the_shard(
    aws_resources: AwsResources,
    clock: ManualClock,
    lost: LostResponse,
    fields: dict[str, Any],
    attempts: int,
) -> None:
    services, clients = faulty_services(aws_resources, clock, lost.install)
    apply_at_t0(services, clock, task("t", trigger={"rate": "15m"}, **fields))
    assert dispatch_tick(T0, services).claimed == [IID]
    outcomes = work_off_the_queue(
        services,
        clients,
        aws_resources.shard_queue_url,
        done=lambda: lost.landed == 1 and not _visible(aws_resources),
    )
    assert lost.landed == 1
    assert outcomes == [ShardOutcome.SUCCEEDED]
    (shard,) = services.instances.list_shards(IID)
    assert (shard.status, shard.attempt) == (ShardStatus.SUCCEEDED, attempts)


def test_a_release_whose_response_was_lost_still_retries_the_shard(
    aws_resources: AwsResources, clock: ManualClock
) -> None:
    lost = LostResponse("UpdateItem", "#st = :pending")
    services, clients = faulty_services(aws_resources, clock, lost.install)
    apply_at_t0(
        services,
        clock,
        task(
            "t",
            trigger={"rate": "15m"},
            params={"fail_attempts": 1},
            retry={"max_attempts": 2, "backoff_s": 0},
        ),
    )
    assert dispatch_tick(T0, services).claimed == [IID]
    outcomes = work_off_the_queue(
        services,
        clients,
        aws_resources.shard_queue_url,
        done=lambda: instance_final(services, IID)() or not _visible(aws_resources),
    )
    assert lost.landed == 1
    assert outcomes == [ShardOutcome.SUCCEEDED]  # the second attempt ran


def test_a_finalize_whose_response_was_lost_still_alerts_once(
    aws_resources: AwsResources, clock: ManualClock
) -> None:
    lost = LostResponse("UpdateItem", "#st IN (:planning, :running)")
    services, clients = faulty_services(aws_resources, clock, lost.install)
    apply_at_t0(
        services,
        clock,
        task("t", trigger={"rate": "15m"}, params={"fail": True}, retry={"max_attempts": 1}),
    )
    assert dispatch_tick(T0, services).claimed == [IID]
    outcomes = work_off_the_queue(
        services, clients, aws_resources.shard_queue_url, done=instance_final(services, IID)
    )
    assert lost.landed == 1
    assert outcomes == [ShardOutcome.FAILED]
    alerts = read_alerts(aws_resources.client("sqs"), aws_resources.alert_tap_url)
    assert [a.type for a, _ in alerts] == ["instance_failed"]
