"""The bare batch-API floor's requests per shard (`run_floor`), counted as the cost run counts
the design's: what `bench.cost` sets `request_ratio_to_floor` against."""

from __future__ import annotations

from typing import Any

import boto3

from bench.common import deploy, emulator, rounded
from bench.counting import RequestCounter, moto_item_sizes

#: The floor's requests per shard over the design's, counted alike (`run_floor`).
REQUEST_RATIO_TARGET = 0.6


def run_floor(*, instances: int, shards: int) -> dict[str, Any]:
    """The bare batch-API floor (`bench.bare_worker.handle`: a conditional put per message, one
    fenced completion transaction with the counter per batch, one delete batch) over the same
    `instances` x `shards` messages, sent and drained as `run_noop` does (SendMessageBatch of
    10; receive 10 until the queue is empty), its requests counted by the same hooks."""
    from bench.bare_worker import handle

    with emulator() as url:
        deployment = deploy(url)
        sqs = boto3.client("sqs", region_name="us-east-1", endpoint_url=url)
        ddb = boto3.client("dynamodb", region_name="us-east-1", endpoint_url=url)
        counter = RequestCounter(size_of=moto_item_sizes())
        for client in (sqs, ddb):
            counter.attach(client)
        queue = sqs.create_queue(QueueName="bench-floor")["QueueUrl"]
        for n in range(instances):
            instance = f"floor-{n}"
            counter.paused = True
            ddb.put_item(
                TableName=deployment.table,
                Item={
                    "pk": {"S": f"BARE#{instance}"},
                    "sk": {"S": "COUNTER"},
                    "remaining": {"N": str(shards)},
                },
            )
            counter.paused = False
            counter.phase = "dispatcher"
            for first in range(0, shards, 10):
                sqs.send_message_batch(
                    QueueUrl=queue,
                    Entries=[
                        {"Id": str(i), "MessageBody": f'{{"instance_id":"{instance}","shard":{i}}}'}
                        for i in range(first, min(first + 10, shards))
                    ],
                )
            while True:
                counter.phase = "esm"
                batch = sqs.receive_message(
                    QueueUrl=queue, MaxNumberOfMessages=10, WaitTimeSeconds=0
                ).get("Messages", [])
                if not batch:
                    break
                counter.phase = "worker"
                handle(batch, sqs=sqs, ddb=ddb, queue_url=queue, table=deployment.table, worker="f")
            counter.paused = True
            left = ddb.get_item(
                TableName=deployment.table,
                Key={"pk": {"S": f"BARE#{instance}"}, "sk": {"S": "COUNTER"}},
                ConsistentRead=True,
            )["Item"]["remaining"]["N"]
            if left != "0":
                raise RuntimeError(f"the floor left {left} of {instance}'s shards")
    executions = instances * shards
    requests = counter.requests("DynamoDB") + counter.requests("SQS")
    return {
        "shard_executions": executions,
        "requests_per_shard": rounded(requests / executions, 3),
        "calls_per_shard_by_phase": {
            phase: {
                f"{service}.{operation}": rounded(n / executions, 3)
                for (service, operation, p), n in sorted(counter.calls.items())
                if p == phase
            }
            for phase in ("dispatcher", "esm", "worker")
        },
    }
