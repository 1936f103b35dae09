"""SQS adapters: the shard queue (SendMessageBatch of 10, failed entries retried), the
fanned-out tick's dispatch queue, and the queues' depths for the overview."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from iotsched.core.shard_message import (
    ShardMessage,
    fair_group,
    with_trace,
)
from iotsched.core.task_definition import Priority
from iotsched.core.timeutil import iso
from iotsched.ports.messaging import BucketTick, MessageTooLargeError, QueueDepth
from iotsched.ports.tracing import (
    NoTracer,
    Tracer,
)

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_sqs.type_defs import SendMessageBatchRequestEntryTypeDef

BATCH = 10
#: SendMessageBatch carries at most 1 MiB in all; a margin for the request's own fields.
BATCH_BYTES = 1024 * 1024 - 16 * 1024
ENTRY_RETRIES = 5
#: The longest DelaySeconds SQS accepts on a message.
MAX_DELAY_S = 900


class SendError(Exception):
    """Some shard messages could not be sent after retries; the dispatch stays resumable."""


class SQSShardQueue:
    """ShardQueue on an SQS standard queue. A message sent without a trace takes the
    current span's carrier (the local tracer's; none under X-Ray, whose header the SDK adds)."""

    def __init__(self, client: SQSClient, queue_url: str, *, tracer: Tracer | None = None) -> None:
        self._sqs = client
        self._url = queue_url
        self._tracer = tracer or NoTracer()

    @property
    def url(self) -> str:
        """The queue's URL."""
        return self._url

    def send(self, messages: Sequence[ShardMessage], *, delays: Sequence[int] | None = None) -> int:
        requests = 0
        messages = with_trace(messages, self._tracer.carrier())
        bodies = [m.model_dump_json() for m in messages]
        delay_of = list(delays) if delays is not None else [0] * len(bodies)
        if len(delay_of) != len(bodies):
            raise ValueError(f"{len(delay_of)} delays for {len(bodies)} shard messages")
        # Each message names its tenant: on a standard queue SQS's fair queuing then serves a
        # quiet tenant's messages before a noisy one's backlog (docs/design.md, section 12).
        groups = [fair_group(m) for m in messages]
        entries = iter(zip(bodies, delay_of, groups, strict=True))
        for batch in _batches(bodies):
            pending: list[SendMessageBatchRequestEntryTypeDef] = []
            for n, (body, delay, group) in enumerate(next(entries) for _ in batch):
                entry: SendMessageBatchRequestEntryTypeDef = {
                    "Id": str(n),
                    "MessageBody": body,
                    "MessageGroupId": group,
                }
                if delay:  # per entry: SQS's DelaySeconds, 0 to 900
                    entry["DelaySeconds"] = min(MAX_DELAY_S, max(0, delay))
                pending.append(entry)
            for retry in range(ENTRY_RETRIES):
                requests += 1
                out = self._sqs.send_message_batch(QueueUrl=self._url, Entries=pending)
                failed = {f["Id"] for f in out.get("Failed", []) if not f.get("SenderFault")}
                sender = [f for f in out.get("Failed", []) if f.get("SenderFault")]
                if sender:
                    raise SendError(f"SQS rejected shard messages: {sender[0].get('Message')}")
                pending = [e for e in pending if e["Id"] in failed]
                if not pending:
                    break
                time.sleep(min(2.0, 0.05 * 2**retry))
            if pending:
                raise SendError(f"{len(pending)} shard messages unsent after {ENTRY_RETRIES} tries")
        return requests

    def extend_visibility(self, receipt_handle: str, seconds: int) -> None:
        self._sqs.change_message_visibility(
            QueueUrl=self._url, ReceiptHandle=receipt_handle, VisibilityTimeout=seconds
        )

    def hold_visibility(self, receipt_handles: Sequence[str], seconds: int) -> set[str]:
        # One request per 10; an entry SQS failed is reported, not retried: its message keeps
        # the visibility it had, and the caller treats it as possibly no longer held (SQS
        # refuses a change through a receipt that is not the message's current one).
        refused: set[str] = set()
        for start in range(0, len(receipt_handles), BATCH):
            chunk = list(receipt_handles[start : start + BATCH])
            out = self._sqs.change_message_visibility_batch(
                QueueUrl=self._url,
                Entries=[
                    {"Id": str(n), "ReceiptHandle": handle, "VisibilityTimeout": seconds}
                    for n, handle in enumerate(chunk)
                ],
            )
            refused.update(chunk[int(f["Id"])] for f in out.get("Failed", []))
        return refused


class PriorityShardQueue:
    """ShardQueue over one SQS queue per priority (docs/design.md, section 12).

    Each message goes to its own priority's queue (`ShardMessage.priority`, copied from its
    instance), so every sender routes alike: the dispatcher, the sweeper's fresh copies, a
    give-back, a retry's copy, a deferred start. A priority without a queue of its own goes to
    `normal`'s. A receipt handle is valid only on the queue that delivered it, so visibility
    changes go to the queue the worker's batch came from (`receiving_from`).
    """

    def __init__(
        self, queues: Mapping[Priority, SQSShardQueue], *, receiving: Priority = Priority.NORMAL
    ) -> None:
        if Priority.NORMAL not in queues:
            raise ValueError("a priority shard queue needs the normal queue")
        self._queues = dict(queues)
        self._receiving = receiving

    def queue_of(self, priority: Priority) -> SQSShardQueue:
        """The queue a message of `priority` is sent to."""
        return self._queues.get(priority) or self._queues[Priority.NORMAL]

    def receiving_from(self, source: str) -> PriorityShardQueue:
        """This router with its visibility changes on the queue `source` names (its ARN or
        URL: the last segment is the queue's name); the normal queue's if none matches."""
        name = source.rstrip("/").rsplit("/", 1)[-1].rsplit(":", 1)[-1]
        for priority, queue in self._queues.items():
            if queue.url.rstrip("/").rsplit("/", 1)[-1] == name:
                return PriorityShardQueue(self._queues, receiving=priority)
        return PriorityShardQueue(self._queues)

    def send(self, messages: Sequence[ShardMessage], *, delays: Sequence[int] | None = None) -> int:
        delay_of = list(delays) if delays is not None else [0] * len(messages)
        if len(delay_of) != len(messages):
            raise ValueError(f"{len(delay_of)} delays for {len(messages)} shard messages")
        by_queue: dict[Priority, list[int]] = {}
        for n, message in enumerate(messages):
            target = message.priority if message.priority in self._queues else Priority.NORMAL
            by_queue.setdefault(target, []).append(n)
        requests = 0
        for priority, positions in by_queue.items():
            requests += self._queues[priority].send(
                [messages[n] for n in positions],
                delays=[delay_of[n] for n in positions] if delays is not None else None,
            )
        return requests

    def extend_visibility(self, receipt_handle: str, seconds: int) -> None:
        self.queue_of(self._receiving).extend_visibility(receipt_handle, seconds)

    def hold_visibility(self, receipt_handles: Sequence[str], seconds: int) -> set[str]:
        return self.queue_of(self._receiving).hold_visibility(receipt_handles, seconds)


#: The attributes of a queue's depth, as `QueueDepth` names them.
DEPTH_ATTRIBUTES = {
    "visible": "ApproximateNumberOfMessages",
    "in_flight": "ApproximateNumberOfMessagesNotVisible",
    "delayed": "ApproximateNumberOfMessagesDelayed",
}


class SQSQueueGauge:
    """QueueGauge: GetQueueAttributes of each named queue (`{name: url}`, in that order)."""

    def __init__(self, client: SQSClient, queues: Mapping[str, str]) -> None:
        self._sqs = client
        self._queues = dict(queues)

    def depths(self) -> list[QueueDepth]:
        found = []
        for name, url in self._queues.items():
            attributes: dict[str, str] = dict(
                self._sqs.get_queue_attributes(
                    QueueUrl=url,
                    AttributeNames=list(DEPTH_ATTRIBUTES.values()),  # type: ignore[arg-type]
                ).get("Attributes", {})
            )
            counts = {k: int(attributes.get(a, "0")) for k, a in DEPTH_ATTRIBUTES.items()}
            found.append(QueueDepth(queue=name, **counts))
        return found


def _batches(bodies: list[str]) -> list[list[str]]:
    """Cut bodies into SendMessageBatch requests: at most 10 entries and 1 MiB each."""
    batches: list[list[str]] = []
    current: list[str] = []
    size = 0
    for body in bodies:
        length = len(body.encode())
        if length > BATCH_BYTES:
            raise MessageTooLargeError(
                f"a shard message of {length} bytes exceeds the SQS limit of {BATCH_BYTES}"
            )
        if current and (len(current) == BATCH or size + length > BATCH_BYTES):
            batches.append(current)
            current, size = [], 0
        current.append(body)
        size += length
    if current:
        batches.append(current)
    return batches


class SQSDispatchQueue:
    """DispatchQueue on an SQS standard queue: a tick's messages in SendMessageBatch calls of
    10 (4 requests for 32 buckets), entries SQS failed sent again; each with the current
    span's carrier, if any (as the shard queue)."""

    def __init__(self, client: SQSClient, queue_url: str, *, tracer: Tracer | None = None) -> None:
        self._sqs = client
        self._url = queue_url
        self._tracer = tracer or NoTracer()

    def send_ticks(self, ticks: Sequence[BucketTick]) -> list[str]:
        ids: list[str] = []
        carrier = self._tracer.carrier()
        if carrier is not None:
            ticks = [t if t.trace else dataclasses.replace(t, trace=carrier) for t in ticks]
        for start in range(0, len(ticks), BATCH):
            chunk = ticks[start : start + BATCH]
            pending: list[SendMessageBatchRequestEntryTypeDef] = [
                {"Id": str(n), "MessageBody": tick_body(t)} for n, t in enumerate(chunk)
            ]
            sent: dict[int, str] = {}
            for retry in range(ENTRY_RETRIES):
                out = self._sqs.send_message_batch(QueueUrl=self._url, Entries=pending)
                sent.update({int(ok["Id"]): ok["MessageId"] for ok in out.get("Successful", [])})
                failed = {f["Id"] for f in out.get("Failed", [])}
                pending = [e for e in pending if e["Id"] in failed]
                if not pending:
                    break
                time.sleep(min(2.0, 0.05 * 2**retry))
            if pending:
                raise SendError(f"{len(pending)} tick messages unsent after {ENTRY_RETRIES} tries")
            ids += [sent[n] for n in range(len(chunk))]
        return ids

    def hold(self, receipt_handle: str, seconds: int) -> None:
        self._sqs.change_message_visibility(
            QueueUrl=self._url, ReceiptHandle=receipt_handle, VisibilityTimeout=seconds
        )


def tick_body(tick: BucketTick) -> str:
    """A dispatch message's body: `{"minute": ISO, "bucket": k}` (and the tick span's
    `"trace"`, under the local tracer)."""
    body: dict[str, object] = {"minute": iso(tick.minute), "bucket": tick.bucket}
    if tick.trace is not None:
        body["trace"] = tick.trace
    return json.dumps(body)
