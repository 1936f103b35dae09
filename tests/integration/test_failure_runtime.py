"""Failure semantics on the emulator (docs/guarantees.md, "Leases", "Completion").

* The key scenarios of `tests/unit/test_failure_semantics.py` (fencing, the dead-letter handler)
  run again on the moto server: DynamoDB conditions and transactions, SQS and SNS instead of the
  fakes. (The sweeper's run on the fakes there; each store, queue and alert operation it uses is
  a contract test on moto and the adversarial backend.)
* The retry backoff really hides the SQS message.
* `iotsched cancel` through the CLI.
* Heartbeats on a local runtime with real worker processes and a 6 s visibility timeout.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from iotsched import bootstrap
from iotsched.cli.main import cli
from iotsched.clock import ManualClock
from iotsched.context import Handler, ShardContext
from iotsched.core.decisions import backoff_delay_s
from iotsched.core.instance_record import InstanceStatus
from iotsched.core.shard_record import (
    ShardRecord,
    ShardStatus,
)
from iotsched.local.runtime import LocalRuntime
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.definitions.task_file import parse_task_file
from iotsched.services.execution.batch import run_shard
from iotsched.services.execution.outcomes import (
    Delivery,
    RetryShardError,
    ShardOutcome,
)
from iotsched.services.scheduling.tick import dispatch_tick
from iotsched.services.wiring import Wiring
from iotsched.tasklib import registry
from tests.support import (
    PATIENCE_S,
    T0,
    TEST_BUCKETS,
    AwsResources,
    read_alerts,
    receive_all,
    received_shard_messages,
    task,
)
from tests.unit.test_failure_semantics import (
    IID,
    Harness,
    scenario_dead_letters,
    scenario_fencing,
    scenario_malformed_dead_letter,
)

S = timedelta(seconds=1)


# -- the moto harness --------------------------------------------------------------------------


@pytest.fixture
def moto_harness(aws_resources: AwsResources, moto_services: Wiring, clock: ManualClock) -> Harness:
    """The scenarios' harness on DynamoDB, SQS and SNS (moto server)."""
    handlers: dict[str, Handler] = dict(registry())
    services = dataclasses.replace(moto_services, handlers=handlers)
    sqs = aws_resources.client("sqs")

    def take_messages() -> list[Any]:
        return received_shard_messages(receive_all(sqs, aws_resources.shard_queue_url))

    def take_alerts() -> list[Any]:
        return [alert for alert, _ in read_alerts(sqs, aws_resources.alert_tap_url)]

    return Harness(services, clock, handlers, take_messages, take_alerts)


@pytest.mark.moto
def test_moto_a_stalled_attempt_is_fenced_out_after_a_takeover(moto_harness: Harness) -> None:
    scenario_fencing(moto_harness)


@pytest.mark.moto
@pytest.mark.parametrize("first_state", ["unstarted", "running"])
def test_moto_dead_lettered_shards_end_failed_once_and_alert_once(
    moto_harness: Harness, first_state: str
) -> None:
    scenario_dead_letters(moto_harness, first_state)


@pytest.mark.moto
def test_moto_a_malformed_dead_letter_is_alerted_once(moto_harness: Harness) -> None:
    scenario_malformed_dead_letter(moto_harness)


# -- retries: the backoff hides the SQS message ------------------------------------------------


@pytest.mark.moto
def test_a_failed_attempt_hides_its_sqs_message_for_the_backoff(
    aws_resources: AwsResources, moto_services: Wiring, clock: ManualClock
) -> None:
    """Backoff 6 s on a queue whose visibility timeout is 2 s: the message stays hidden 6 s.

    Judged from when each receive was asked, never from how long a step took: a loaded machine
    only delays the polls."""
    backoff_s = 6
    apply_tasks(
        [
            task(
                "t",
                trigger={"rate": "15m"},
                params={"fail": True},
                retry={"max_attempts": 3, "backoff_s": backoff_s},
                timeout_s=60,
            )
        ],
        moto_services.tasks,
        now=T0 - 7 * 60 * S,
    )
    clock.set(T0 + 3 * S)
    assert dispatch_tick(T0, moto_services).claimed == [IID]
    sqs = aws_resources.client("sqs")
    url = aws_resources.shard_queue_url

    def receive() -> list[dict[str, Any]]:
        out = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["All"])
        return list(out.get("Messages", []))

    (first,) = receive()
    assert first["Attributes"]["ApproximateReceiveCount"] == "1"
    before = time.monotonic()
    with pytest.raises(RetryShardError):
        run_shard(
            Delivery(body=first["Body"], receipt_handle=first["ReceiptHandle"]),
            moto_services,
            worker="w1",
        )
    failed_at = time.monotonic()  # the backoff was set between `before` and now
    assert backoff_delay_s(1, backoff_s) == backoff_s
    (shard,) = moto_services.instances.list_shards(IID)
    assert (shard.status, shard.attempt) == (ShardStatus.PENDING, 1)

    hidden_at: list[float] = []  # when each receive that found nothing was asked
    again: list[dict[str, Any]] = []
    while not again and time.monotonic() < failed_at + PATIENCE_S:
        if hidden_at and hidden_at[-1] - failed_at < 2.5 < backoff_s:
            time.sleep(max(0.0, failed_at + 2.5 - time.monotonic()))  # ask past the 2 s too
        asked = time.monotonic()
        again = receive()
        answered = time.monotonic()
        if not again:
            hidden_at.append(asked)
        time.sleep(0.2)
    assert len(again) == 1, "the message never came back"
    assert again[0]["MessageId"] == first["MessageId"]
    assert again[0]["Attributes"]["ApproximateReceiveCount"] == "2"
    # hidden past the queue's own 2 s visibility timeout ...
    assert max(hidden_at) - failed_at >= 2.5
    # ... shown again once the backoff passed: no receive asked after it found nothing
    assert max(hidden_at) - failed_at <= backoff_s + 0.5
    assert answered - before >= backoff_s - 0.5


# -- cancellation through the CLI --------------------------------------------------------------


def _runner(aws: AwsResources) -> CliRunner:
    return CliRunner(
        env={
            "IOTSCHED_TABLE": aws.table,
            "IOTSCHED_SHARD_QUEUE_URL": aws.shard_queue_url,
            "IOTSCHED_ALERT_TOPIC_ARN": aws.alert_topic_arn,
            "AWS_ENDPOINT_URL": aws.endpoint_url,
        }
    )


@pytest.mark.moto
def test_cli_cancel_ends_the_instance_and_stops_its_shards(
    aws_resources: AwsResources, clock: ManualClock
) -> None:
    started, go = threading.Event(), threading.Event()
    calls: list[int] = []

    def careful(ctx: ShardContext) -> Mapping[str, Any] | None:
        calls.append(ctx.shard)
        started.set()
        if not go.wait(30):
            raise TimeoutError("never released")
        for _ in range(300):  # between units of work
            if ctx.cancelled():
                return {"stopped": True}
            time.sleep(0.01)
        return None

    services = bootstrap.build(
        aws_resources.settings,
        clock=clock,
        clients=aws_resources.clients(),
        handlers={**registry(), "careful": careful},
    )
    apply_tasks(
        [
            task(
                "t",
                handler="careful",
                trigger={"rate": "15m"},
                sharding={"strategy": "static", "shards": [{"n": 0}, {"n": 1}, {"n": 2}]},
            ),
            task("done", trigger={"rate": "15m"}),
        ],
        services.tasks,
        now=T0 - 7 * 60 * S,
    )
    clock.set(T0 + 3 * S)
    assert sorted(dispatch_tick(T0, services).claimed) == ["done@2026-11-29T12:00Z", IID]
    messages = received_shard_messages(
        receive_all(aws_resources.client("sqs"), aws_resources.shard_queue_url, expect=4)
    )
    done_message, m0, m1, m2 = messages
    assert (
        run_shard(
            Delivery(body=done_message.model_dump_json(), receipt_handle="rh-done"),
            services,
            worker="w9",
        )
        is ShardOutcome.SUCCEEDED
    )

    outcome: list[ShardOutcome | BaseException] = []

    def run_shard_0() -> None:
        try:
            delivery = Delivery(body=m0.model_dump_json(), receipt_handle="rh-0")
            outcome.append(run_shard(delivery, services, worker="w0"))
        except BaseException as exc:  # surfaced by the assertions below
            outcome.append(exc)

    thread = threading.Thread(target=run_shard_0, name="shard-0")
    thread.start()
    runner = _runner(aws_resources)
    try:
        assert started.wait(30)
        result = runner.invoke(cli, ["cancel", IID, "--json", "--reason", "maintenance"])
    finally:
        go.set()
        thread.join(30)
    assert result.exit_code == 0, result.output
    view = json.loads(result.output)
    assert (view["instance_id"], view["status"], view["reason"]) == (
        IID,
        "cancelled",
        "maintenance",
    )
    assert view["finished_at"] is not None

    # The running handler saw ctx.cancelled(); the unstarted shards never run.
    assert outcome == [ShardOutcome.CANCELLED]
    for n, message in ((1, m1), (2, m2)):
        delivery = Delivery(body=message.model_dump_json(), receipt_handle=f"rh-{n}")
        assert run_shard(delivery, services, worker=f"w{n}") is ShardOutcome.NOT_STARTED
    assert calls == [0]
    shards = runner.invoke(cli, ["shards", IID, "--json"])
    assert shards.exit_code == 0, shards.output
    listed = json.loads(shards.output)
    assert listed["instance"]["status"] == "cancelled"
    assert [(s["index"], s["status"], s["attempt"]) for s in listed["shards"]] == [
        (0, "cancelled", 1),
        (1, "cancelled", 0),
        (2, "cancelled", 0),
    ]
    assert read_alerts(aws_resources.client("sqs"), aws_resources.alert_tap_url) == []

    # Cancelling an instance that has ended: exit 1, one clear line, nothing changes.
    for instance_id, status in ((IID, "cancelled"), ("done@2026-11-29T12:00Z", "succeeded")):
        before = services.instances.get_instance(instance_id)
        again = runner.invoke(cli, ["cancel", instance_id])
        assert again.exit_code == 1, again.output
        lines = again.output.strip().splitlines()
        assert len(lines) == 1, again.output
        assert f"already ended ({status})" in lines[0]
        assert "Traceback" not in again.output
        assert services.instances.get_instance(instance_id) == before

    # An unknown instance: exit 2.
    unknown = runner.invoke(cli, ["cancel", "t@2031-01-01T00:00Z"])
    assert unknown.exit_code == 2, unknown.output
    assert "no instance" in unknown.output
    assert len(unknown.output.strip().splitlines()) == 1


# -- heartbeats on real worker processes -------------------------------------------------------

TEMPLATE = Path(__file__).resolve().parents[2] / "template.yaml"
#: The lease (the template's minimum): the worker renews it every second.
LEASE_S = 3
#: The shard runs over three leases.
SHARD_S = 10
#: The task's timeout_s: the handler is interrupted after timeout_s since its last heartbeat,
#: so it covers the whole shard.
TIMEOUT_S = SHARD_S + 5


@pytest.fixture(scope="module")
def hb_runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRuntime]:
    """A runtime whose shard leases last 3 s (6x rule kept); three workers, a manual clock."""
    rt = LocalRuntime(
        TEMPLATE,
        manual_clock=True,
        workers=3,
        dispatchers=1,
        parameter_overrides={
            "WorkerTimeoutSeconds": "30",  # the runtime kills a worker busy longer than this
            "ShardVisibilityTimeoutSeconds": "180",
            "ShardLeaseSeconds": str(LEASE_S),
            "MaxReceiveCount": "10",
            "IndexBuckets": TEST_BUCKETS,
        },
        env_overrides={"IOTSCHED_LEASE_MARGIN_S": "1", "POWERTOOLS_LOG_LEVEL": "WARNING"},
        log_dir=tmp_path_factory.mktemp("heartbeat-logs"),
    )
    rt.start()
    try:
        yield rt
    finally:
        rt.stop()


@dataclasses.dataclass
class LongShardRun:
    shard: ShardRecord
    status: InstanceStatus
    receives: int  # how many times the shard queue handed the message to a worker
    leases: list[datetime]  # lease deadlines seen while the shard ran


def _run_long_shard(
    rt: LocalRuntime, task_id: str, day: int, *, heartbeat_s: float
) -> LongShardRun:
    services = bootstrap.build(rt.settings())
    params: dict[str, Any] = {"seconds": SHARD_S}
    if heartbeat_s:
        params["heartbeat_s"] = heartbeat_s
    definition = {
        "id": task_id,
        "handler": "noop",
        "trigger": {"at": f"2026-03-{day:02d}T10:00:00Z"},  # fires once: never due again
        "timeout_s": TIMEOUT_S,
        "retry": {"max_attempts": 3, "backoff_s": 0},
        "params": params,
    }
    apply_tasks(
        parse_task_file({"tasks": [definition]}, handlers=registry()),
        services.tasks,
        now=datetime(2026, 3, day, 9, 58, tzinfo=UTC),
    )
    assert rt.wait_for(lambda: all(w.state in ("ready", "idle") for w in rt.workers), PATIENCE_S)
    batches_before = sum(w.batches for w in rt.workers)
    (result,) = rt.tick(datetime(2026, 3, day, 10, 0, tzinfo=UTC))
    instance_id = f"{task_id}@2026-03-{day:02d}T10:00Z"
    assert result.report["claimed"] == [instance_id]

    leases: list[datetime] = []

    def final() -> bool:
        inst = services.instances.get_instance(instance_id)
        for shard in services.instances.list_shards(instance_id):
            if shard.status is ShardStatus.RUNNING and shard.lease_until is not None:
                leases.append(shard.lease_until)
        return inst is not None and inst.status.final

    assert rt.wait_for(final, PATIENCE_S, 0.5), f"{instance_id} did not end"
    # Every batch that received the message has been handled and reported.
    assert rt.wait_for(lambda: all(w.state in ("ready", "idle") for w in rt.workers), PATIENCE_S)
    inst = services.instances.get_instance(instance_id)
    assert inst is not None
    (shard,) = services.instances.list_shards(instance_id)
    return LongShardRun(
        shard=shard,
        status=inst.status,
        receives=sum(w.batches for w in rt.workers) - batches_before,
        leases=leases,
    )


@pytest.mark.slow
@pytest.mark.moto
def test_a_shard_of_three_leases_keeps_its_lease_and_runs_once(hb_runtime: LocalRuntime) -> None:
    """Without a heartbeat from its handler, the worker renews the lease while the attempt runs:
    no other worker takes the shard, its message is received once. (Heartbeats between the
    renewals: tests/unit/test_batch_failover.py and test_failure_semantics.py.)"""
    run = _run_long_shard(hb_runtime, "silent", 3, heartbeat_s=0)
    assert run.status is InstanceStatus.SUCCEEDED
    assert (run.shard.status, run.shard.attempt) == (ShardStatus.SUCCEEDED, 1)
    (attempt,) = run.shard.attempts
    assert attempt.outcome == "succeeded"
    assert attempt.duration_ms is not None and attempt.duration_ms >= SHARD_S * 1000
    assert run.receives == 1
    # And the lease moved with the renewals.
    assert len(set(run.leases)) >= 3
    assert max(run.leases) - min(run.leases) >= timedelta(seconds=SHARD_S / 2)
