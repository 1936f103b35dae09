"""Priority: an instance takes its priority at claim (the request's, else the task's; a backfill
is low unless asked), every message it sends carries it, and the SQS router puts each message
on its priority's queue."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date, timedelta
from typing import Any, cast

import pytest

from iotsched import bootstrap
from iotsched.adapters.memory.queues import MemoryShardQueue
from iotsched.adapters.sqs import PriorityShardQueue, SQSShardQueue
from iotsched.clock import ManualClock
from iotsched.context import ShardContext
from iotsched.core.decisions import Firing
from iotsched.core.instance_record import (
    InstanceStatus,
    TriggerKind,
)
from iotsched.core.messages import message_of, reduce_message, shard_messages
from iotsched.core.shard_message import ShardMessage
from iotsched.core.task_definition import Priority
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.execution.batch import run_shard
from iotsched.services.execution.outcomes import (
    Delivery,
    RetryShardError,
    ShardOutcome,
)
from iotsched.services.execution.sweep import sweep
from iotsched.services.operations.actions import rerun_instance
from iotsched.services.operations.on_demand import (
    backfill_slots,
    plan_backfill,
    run_now,
    submit,
)
from iotsched.services.scheduling.build import build_instance
from iotsched.services.scheduling.tick import dispatch_tick
from iotsched.services.wiring import Wiring
from iotsched.tasklib import registry
from tests.support import T0, task, task_record

S = timedelta(seconds=1)


def memory(handlers: Mapping[str, Any] | None = None) -> tuple[Wiring, ManualClock]:
    clock = ManualClock(T0)
    services = bootstrap.build_memory(clock=clock, handlers={**registry(), **(handlers or {})})
    return services, clock


def sent(services: Wiring) -> list[ShardMessage]:
    return list(cast("MemoryShardQueue", services.queue).sent)


def apply(services: Wiring, **fields: Any) -> None:
    definition = task(
        "t",
        trigger={"cron": "0 12 * * *", "timezone": "UTC"},
        sharding={"strategy": "static", "shards": [{"n": i} for i in range(3)]},
        **fields,
    )
    apply_tasks([definition], services.tasks, now=T0 - timedelta(minutes=1))


# -- claim ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("on_task", "asked", "expected"),
    [
        (None, None, Priority.NORMAL),
        ("high", None, Priority.HIGH),
        ("high", Priority.LOW, Priority.LOW),
        (None, Priority.HIGH, Priority.HIGH),
    ],
)
def test_an_instance_takes_the_requests_priority_else_the_tasks(
    on_task: str | None, asked: Priority | None, expected: Priority
) -> None:
    fields = {"priority": on_task} if on_task else {}
    record = task_record(
        task("t", sharding={"strategy": "static", "shards": [{"n": 0}, {"n": 1}]}, **fields),
        next_fire=T0,
    )
    firing = Firing(
        slot=T0, kind=TriggerKind.MANUAL, status=InstanceStatus.PLANNING, priority=asked
    )
    instance = build_instance(record, firing, claimed_at=T0, dispatch_lease_s=60)
    assert instance.priority is expected
    assert {m.priority for m in shard_messages(instance)} == {expected}


def test_a_task_file_refuses_an_unknown_priority() -> None:
    with pytest.raises(ValueError, match="priority"):
        task("t", priority="urgent")


def test_a_backfill_is_low_unless_asked_otherwise() -> None:
    services, _ = memory()
    apply(services, priority="high")  # the task's own priority does not apply to a backfill
    plan = plan_backfill("t", services, start=date(2026, 11, 20), end=date(2026, 11, 21))
    assert [what for _, what in backfill_slots(plan, services)] == ["claimed", "claimed"]
    assert {m.priority for m in sent(services)} == {Priority.LOW}
    for instance in services.instances.list_instances(task_id="t"):
        assert instance.priority is Priority.LOW

    plan = plan_backfill("t", services, start=date(2026, 11, 10), end=date(2026, 11, 10))
    before = len(sent(services))
    list(backfill_slots(plan, services, priority=Priority.NORMAL))
    assert {m.priority for m in sent(services)[before:]} == {Priority.NORMAL}


def test_a_run_and_a_submission_take_the_priority_asked() -> None:
    services, clock = memory()
    apply(services)
    instance, _ = run_now("t", services, priority=Priority.HIGH, request_id="r1")
    assert instance.priority is Priority.HIGH
    assert {m.priority for m in sent(services)} == {Priority.HIGH}

    later = submit("t", services, at=T0 + timedelta(minutes=2), priority=Priority.LOW)
    assert later.priority is Priority.LOW
    before = len(sent(services))
    clock.set(T0 + timedelta(minutes=2))
    dispatch_tick(clock.now(), services)  # the tick fires the submission as it was stored
    fired = [m for m in sent(services)[before:] if m.instance_id == later.instance_id]
    assert len(fired) == 3
    assert {m.priority for m in fired} == {Priority.LOW}

    default, _ = run_now("t", services, request_id="r2")
    assert default.priority is Priority.NORMAL


# -- every sender -----------------------------------------------------------------------------


class Fleet:
    """Handlers whose shards fail once or whose workers die, as the test says."""

    def __init__(self) -> None:
        self.fail: set[int] = set()
        self.die: set[int] = set()

    def work(self, ctx: ShardContext) -> Mapping[str, Any]:
        if ctx.shard in self.die:
            ctx.heartbeat()  # its lease enters the sweeper's index, then the process dies
            raise KeyboardInterrupt
        if ctx.shard in self.fail:
            raise RuntimeError("boom")
        return {"n": 1}

    def total(self, ctx: ShardContext) -> Mapping[str, Any]:
        return {"n": len(ctx.partials())}


def deliver(services: Wiring, message: ShardMessage) -> str:
    try:
        return run_shard(
            Delivery(body=message.model_dump_json(), receipt_handle="rh"), services, worker="w"
        ).value
    except RetryShardError:
        return "retried"
    except KeyboardInterrupt:
        return "died"


def test_every_sender_copies_the_instances_priority() -> None:
    """The dispatcher, the sweeper's fresh message, the reduce, a rerun: each message carries
    the instance's priority (the router's only input)."""
    fleet = Fleet()
    services, clock = memory({"work": fleet.work, "total": fleet.total})
    definition = task(
        "t",
        handler="work",
        reduce="total",
        priority="high",
        retry={"max_attempts": 2, "backoff_s": 1},
        sharding={"strategy": "static", "shards": [{"n": i} for i in range(3)]},
    )
    apply_tasks([definition], services.tasks, now=T0 - timedelta(minutes=1))
    dispatch_tick(T0, services)
    first = sent(services)
    assert [m.shard for m in first] == [0, 1, 2]

    fleet.die = {1}
    fleet.fail = {2}
    outcomes = [deliver(services, m) for m in first]
    assert outcomes == [ShardOutcome.SUCCEEDED.value, "died", "retried"]
    assert deliver(services, first[2]) == ShardOutcome.FAILED.value  # its message, back
    # The dead worker's lease ends: the sweeper sends a fresh message of shard 1.
    clock.set(T0 + timedelta(minutes=2))
    fleet.die = set()
    before = len(sent(services))
    sweep(services)
    fresh = sent(services)[before:]
    assert [m.shard for m in fresh] == [1]
    assert deliver(services, fresh[0]) == ShardOutcome.SUCCEEDED.value

    instance_id = first[0].instance_id
    ended = services.instances.get_instance(instance_id)
    assert ended is not None and ended.status is InstanceStatus.FAILED  # shard 2

    fleet.fail = set()
    before = len(sent(services))
    rerun = rerun_instance(instance_id, services, failed_only=True)
    again = sent(services)[before:]
    assert [m.shard for m in again] == [2]
    assert deliver(services, again[0]) == ShardOutcome.SUCCEEDED.value
    reduce = sent(services)[-1]
    assert reduce.reduce and reduce.instance_id == rerun.instance_id

    everything = sent(services)
    assert len(everything) == 6
    assert {m.priority for m in everything} == {Priority.HIGH}
    assert message_of(rerun, 2) is not None and message_of(rerun, 2).priority is Priority.HIGH  # type: ignore[union-attr]
    assert reduce_message(rerun).priority is Priority.HIGH


# -- the SQS router ---------------------------------------------------------------------------


class RecordingSQS:
    """Records each request by queue URL (a stand-in for the SQS client)."""

    def __init__(self) -> None:
        self.sent: dict[str, list[tuple[str, int]]] = {}
        self.visibility: list[tuple[str, str]] = []

    def send_message_batch(self, *, QueueUrl: str, Entries: list[dict[str, Any]]) -> Any:
        for e in Entries:
            body = ShardMessage.model_validate_json(e["MessageBody"])
            self.sent.setdefault(QueueUrl, []).append(
                (body.priority.value, e.get("DelaySeconds", 0))
            )
        return {"Successful": [{"Id": e["Id"]} for e in Entries], "Failed": []}

    def change_message_visibility(self, *, QueueUrl: str, ReceiptHandle: str, **_: Any) -> None:
        self.visibility.append((QueueUrl, ReceiptHandle))

    def change_message_visibility_batch(self, *, QueueUrl: str, Entries: list[Any]) -> Any:
        self.visibility += [(QueueUrl, e["ReceiptHandle"]) for e in Entries]
        return {"Successful": [], "Failed": []}


URLS = {
    Priority.HIGH: "https://sqs/123/stack-ShardHighQueue",
    Priority.NORMAL: "https://sqs/123/stack-ShardQueue",
    Priority.LOW: "https://sqs/123/stack-ShardLowQueue",
}


def router(client: RecordingSQS, priorities: tuple[Priority, ...] = tuple(Priority)) -> Any:
    return PriorityShardQueue(
        {p: SQSShardQueue(client, URLS[p]) for p in priorities}  # type: ignore[arg-type]
    )


def messages(*priorities: Priority) -> list[ShardMessage]:
    record = task_record(
        task("t", sharding={"strategy": "static", "shards": [{"n": 0}]}), next_fire=T0
    )
    base = shard_messages(
        build_instance(
            record,
            Firing(slot=T0, kind=TriggerKind.MANUAL, status=InstanceStatus.PLANNING),
            claimed_at=T0,
            dispatch_lease_s=60,
        )
    )[0]
    return [base.model_copy(update={"priority": p, "shard": n}) for n, p in enumerate(priorities)]


def test_the_router_sends_each_message_to_its_prioritys_queue_with_its_delay() -> None:
    client = RecordingSQS()
    batch = messages(Priority.LOW, Priority.HIGH, Priority.NORMAL, Priority.LOW)
    requests = router(client).send(batch, delays=[5, 0, 7, 9])
    assert requests == 3  # one SendMessageBatch per queue that has messages
    assert client.sent == {
        URLS[Priority.LOW]: [("low", 5), ("low", 9)],
        URLS[Priority.HIGH]: [("high", 0)],
        URLS[Priority.NORMAL]: [("normal", 7)],
    }


def test_a_priority_without_a_queue_of_its_own_goes_to_the_normal_queue() -> None:
    client = RecordingSQS()
    router(client, (Priority.NORMAL, Priority.LOW)).send(messages(Priority.HIGH, Priority.LOW))
    assert client.sent == {URLS[Priority.NORMAL]: [("high", 0)], URLS[Priority.LOW]: [("low", 0)]}


def test_visibility_changes_go_to_the_queue_the_batch_came_from() -> None:
    client = RecordingSQS()
    queue = router(client)
    low = queue.receiving_from("arn:aws:sqs:us-east-1:123:stack-ShardLowQueue")
    low.extend_visibility("r1", 30)
    low.hold_visibility(["r2", "r3"], 20)
    queue.receiving_from("arn:aws:sqs:us-east-1:123:stack-ShardHighQueue").extend_visibility(
        "r4", 30
    )
    queue.extend_visibility("r5", 30)  # no source named: the normal queue's
    assert client.visibility == [
        (URLS[Priority.LOW], "r1"),
        (URLS[Priority.LOW], "r2"),
        (URLS[Priority.LOW], "r3"),
        (URLS[Priority.HIGH], "r4"),
        (URLS[Priority.NORMAL], "r5"),
    ]


def test_the_worker_uses_its_batchs_queue_and_one_queue_deployments_keep_one() -> None:
    from iotsched.adapters.aws import AwsClients
    from iotsched.settings import Settings

    clients = AwsClients(region="us-east-1", endpoint_url="http://127.0.0.1:9")
    one = Settings(table="t", shard_queue_url=URLS[Priority.NORMAL], alert_topic_arn="a")
    assert isinstance(bootstrap.shard_queue(one, clients), SQSShardQueue)
    lanes = Settings(
        table="t",
        shard_queue_url=URLS[Priority.NORMAL],
        shard_queue_high_url=URLS[Priority.HIGH],
        shard_queue_low_url=URLS[Priority.LOW],
        alert_topic_arn="a",
    )
    queue = bootstrap.shard_queue(lanes, clients)
    assert isinstance(queue, PriorityShardQueue)
    assert queue.queue_of(Priority.LOW).url == URLS[Priority.LOW]
    env = {
        "IOTSCHED_TABLE": "t",
        "IOTSCHED_SHARD_QUEUE_URL": URLS[Priority.NORMAL],
        "IOTSCHED_SHARD_QUEUE_HIGH_URL": URLS[Priority.HIGH],
        "IOTSCHED_SHARD_QUEUE_LOW_URL": URLS[Priority.LOW],
        "IOTSCHED_ALERT_TOPIC_ARN": "a",
    }
    assert Settings.from_env(env).shard_queue_low_url == URLS[Priority.LOW]


def test_a_copy_sent_from_a_received_body_keeps_its_priority() -> None:
    """A give-back, a retry's copy and a deferred start send the message parsed from the
    delivery's body again: its priority survives the round trip."""
    for message in messages(Priority.LOW, Priority.HIGH):
        again = ShardMessage.model_validate_json(message.model_dump_json())
        assert again.priority is message.priority
    legacy = messages(Priority.NORMAL)[0].model_dump(mode="json")
    del legacy["priority"]  # sent before priorities existed: the normal queue's
    assert ShardMessage.model_validate(legacy).priority is Priority.NORMAL
