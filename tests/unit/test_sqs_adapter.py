"""SQSShardQueue's batching and entry retries, against a scripted stand-in for the SQS client.

moto never reports per-entry failures, so this is where the retry path is exercised; the moto
contract suite covers what really reaches a queue.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest

from iotsched.adapters.sqs import ENTRY_RETRIES, SendError, SQSShardQueue
from iotsched.services.scheduling.send import shard_messages
from tests.support import instance


class ScriptedSQS:
    """Answers SendMessageBatch from a script: per call, the entry ids to fail (and how)."""

    def __init__(self, script: list[dict[str, bool]]) -> None:
        self.script = script  # per call: {entry id: sender fault?}
        self.calls: list[list[str]] = []
        self.accepted: list[str] = []

    def send_message_batch(self, *, QueueUrl: str, Entries: list[dict[str, Any]]) -> Any:
        assert QueueUrl == "https://sqs/q"
        assert len(Entries) <= 10
        self.calls.append([e["Id"] for e in Entries])
        failing = self.script.pop(0) if self.script else {}
        failed = [
            {"Id": e["Id"], "SenderFault": failing[e["Id"]], "Code": "X", "Message": "nope"}
            for e in Entries
            if e["Id"] in failing
        ]
        self.accepted += [e["MessageBody"] for e in Entries if e["Id"] not in failing]
        return {"Successful": [], "Failed": failed}


@pytest.fixture(autouse=True)
def _no_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(time, "sleep", lambda _s: None)  # the adapter backs off between tries


def queue_with(client: ScriptedSQS) -> SQSShardQueue:
    return SQSShardQueue(client, "https://sqs/q")  # type: ignore[arg-type]


def test_transient_entry_failures_are_retried_until_sent() -> None:
    messages = shard_messages(instance(shards=12))
    client = ScriptedSQS([{"3": False, "7": False}, {"7": False}, {}])
    assert queue_with(client).send(messages) == 4  # 3 requests for the first ten, 1 for two
    assert client.calls == [[str(i) for i in range(10)], ["3", "7"], ["7"], ["0", "1"]]
    assert sorted(client.accepted) == sorted(m.model_dump_json() for m in messages)


def test_entries_failing_every_retry_raise() -> None:
    client = ScriptedSQS([{"0": False}] * ENTRY_RETRIES)
    with pytest.raises(SendError, match="1 shard messages unsent"):
        queue_with(client).send(shard_messages(instance(shards=3)))
    assert len(client.calls) == ENTRY_RETRIES


def test_a_sender_fault_is_not_retried() -> None:
    client = ScriptedSQS([{"1": True}])
    with pytest.raises(SendError, match="nope"):
        queue_with(client).send(shard_messages(instance(shards=3)))
    assert len(client.calls) == 1


class ScriptedVisibility:
    """Answers ChangeMessageVisibilityBatch: the receipts in `refuse` fail (sender fault)."""

    def __init__(self, refuse: set[str]) -> None:
        self.refuse = refuse
        self.calls: list[list[tuple[str, int]]] = []

    def change_message_visibility_batch(
        self, *, QueueUrl: str, Entries: list[dict[str, Any]]
    ) -> Any:
        assert QueueUrl == "https://sqs/q"
        assert len(Entries) <= 10
        assert len({e["Id"] for e in Entries}) == len(Entries)
        self.calls.append([(e["ReceiptHandle"], e["VisibilityTimeout"]) for e in Entries])
        failed = [
            {"Id": e["Id"], "SenderFault": True, "Code": "ReceiptHandleIsInvalid", "Message": "x"}
            for e in Entries
            if e["ReceiptHandle"] in self.refuse
        ]
        return {"Successful": [], "Failed": failed}


def test_a_hold_changes_ten_receipts_a_request_and_reports_those_refused() -> None:
    handles = [f"rh-{n}" for n in range(12)]
    client = ScriptedVisibility({"rh-3", "rh-11"})
    refused = SQSShardQueue(client, "https://sqs/q").hold_visibility(handles, 20)  # type: ignore[arg-type]
    assert refused == {"rh-3", "rh-11"}
    assert client.calls == [[(h, 20) for h in handles[:10]], [(h, 20) for h in handles[10:]]]


@pytest.mark.moto
def test_a_hold_on_moto_makes_received_messages_visible_after_its_seconds() -> None:
    import boto3
    from moto import mock_aws

    with mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1")
        url = sqs.create_queue(QueueName="q", Attributes={"VisibilityTimeout": "1800"})["QueueUrl"]
        queue = SQSShardQueue(sqs, url)
        queue.send(shard_messages(instance(shards=3)))
        received = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
        assert len(received) == 3
        handles = [m["ReceiptHandle"] for m in received]
        assert queue.hold_visibility([*handles, "not-a-receipt"], 1) == {"not-a-receipt"}
        again: list[Any] = []
        deadline = time.monotonic() + 30
        while len(again) < 3 and time.monotonic() < deadline:  # 1 s, not 1,800
            again += sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
            threading.Event().wait(0.1)  # time.sleep is stubbed here
        assert sorted(m["Body"] for m in again) == sorted(m["Body"] for m in received)


def test_messages_take_the_open_span_s_carrier_and_keep_their_own() -> None:
    from iotsched.adapters.spans import LocalTracer, SpanStore
    from iotsched.clock import ManualClock
    from tests.support import T0

    tracer = LocalTracer(SpanStore(), ManualClock(T0))
    client = ScriptedSQS([])
    queue = SQSShardQueue(client, "https://sqs/q", tracer=tracer)  # type: ignore[arg-type]
    first, second = shard_messages(instance(shards=2))
    resent = second.model_copy(update={"trace": "t0:s0"})  # a body received, sent again
    queue.send([first])  # no span open: nothing to carry
    with tracer.span("claim") as span:
        queue.send([first, resent])
    bodies = [json.loads(b) for b in client.accepted]
    assert "trace" not in bodies[0]
    assert bodies[1]["trace"] == span.carrier  # the sender's span
    assert bodies[2]["trace"] == "t0:s0"  # the firing's own, kept
