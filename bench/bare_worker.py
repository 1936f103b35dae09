"""The throughput floor's worker process: receive 10, the minimum conditional writes, delete.

Per message one conditional lease write (PutItem if the shard is new); per batch one
TransactWriteItems that ends every leased shard, fenced on its attempt, and decrements the
instance's counter by the batch size; then one DeleteMessageBatch. No handler, no validation,
no logging: what any leased, fenced, counted design must at least do against DynamoDB and SQS.

    python -m bench.bare_worker ENDPOINT QUEUE_URL TABLE
Prints one JSON line when it stops (SIGTERM): how many messages it handled.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Any


def main(argv: list[str]) -> None:
    """Poll until SIGTERM."""
    import boto3
    from botocore.config import Config

    endpoint, queue_url, table = argv
    config = Config(retries={"mode": "standard", "total_max_attempts": 10})
    sqs = boto3.client("sqs", endpoint_url=endpoint, config=config)
    ddb = boto3.client("dynamodb", endpoint_url=endpoint, config=config)
    worker = f"bare-{os.getpid()}"
    stopping = False
    handled = 0

    def stop(signum: int, frame: Any) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    sys.stdout.write(json.dumps({"state": "ready"}) + "\n")
    sys.stdout.flush()
    while not stopping:
        messages = sqs.receive_message(
            QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=0
        ).get("Messages", [])
        if not messages:
            time.sleep(0.2)  # as the local runtime's poller
            continue
        handle(messages, sqs=sqs, ddb=ddb, queue_url=queue_url, table=table, worker=worker)
        handled += len(messages)
    sys.stdout.write(json.dumps({"state": "stopped", "handled": handled}) + "\n")
    sys.stdout.flush()


def handle(
    messages: list[Any], *, sqs: Any, ddb: Any, queue_url: str, table: str, worker: str
) -> None:
    """One received batch: a conditional lease put per message, one fenced completion
    transaction with the counter's decrement, one delete batch."""
    from botocore.exceptions import ClientError

    now = int(time.time() * 1000)
    leased: list[tuple[str, str]] = []
    instance = ""
    for message in messages:
        body = json.loads(message["Body"])
        instance = body["instance_id"]
        key = (f"BARE#{instance}", f"SHARD#{body['shard']:06d}")
        try:
            ddb.put_item(
                TableName=table,
                Item={
                    "pk": {"S": key[0]},
                    "sk": {"S": key[1]},
                    "status": {"S": "running"},
                    "attempt": {"N": "1"},
                    "owner": {"S": worker},
                    "lease_until_ms": {"N": str(now + 60_000)},
                },
                ConditionExpression="attribute_not_exists(pk)",
            )
            leased.append(key)
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
    if leased:
        items: list[Any] = [
            *(
                {
                    "Update": {
                        "TableName": table,
                        "Key": {"pk": {"S": pk}, "sk": {"S": sk}},
                        "UpdateExpression": "SET #st = :done REMOVE lease_until_ms",
                        "ConditionExpression": "attempt = :one AND #st = :running",
                        "ExpressionAttributeNames": {"#st": "status"},
                        "ExpressionAttributeValues": {
                            ":done": {"S": "succeeded"},
                            ":running": {"S": "running"},
                            ":one": {"N": "1"},
                        },
                    }
                }
                for pk, sk in leased
            ),
            {
                "Update": {
                    "TableName": table,
                    "Key": {"pk": {"S": f"BARE#{instance}"}, "sk": {"S": "COUNTER"}},
                    "UpdateExpression": "SET remaining = remaining - :n",
                    "ConditionExpression": "remaining >= :n",
                    "ExpressionAttributeValues": {":n": {"N": str(len(leased))}},
                }
            },
        ]
        ddb.transact_write_items(TransactItems=items)
    sqs.delete_message_batch(
        QueueUrl=queue_url,
        Entries=[
            {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)
        ],
    )


if __name__ == "__main__":
    main(sys.argv[1:])
