"""The `aws dynamodb query` lines of docs/operations.md ("Ops on the records"), run through boto3 against moto: docs cannot drift."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

import pytest

from iotsched import bootstrap
from iotsched.clock import ManualClock
from iotsched.core.buckets import DEFAULT_BUCKETS
from iotsched.core.shard_message import ShardMessage
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.execution.batch import run_shard
from iotsched.services.execution.outcomes import Delivery
from iotsched.services.scheduling.tick import dispatch_tick
from tests.support import T0, AwsResources, receive_all, received_shard_messages, task

pytestmark = pytest.mark.moto
GUIDE = Path(__file__).resolve().parents[2] / "docs" / "operations.md"
OPTIONS = {
    "--table-name": "TableName",
    "--index-name": "IndexName",
    "--key-condition-expression": "KeyConditionExpression",
    "--expression-attribute-values": "ExpressionAttributeValues",
}


#: `for k in $(seq 0 $((N - 1))); do <query>; done`: one query per bucket.
BUCKET_LOOP = re.compile(r"for k in \$\(seq 0 \$\(\(N - 1\)\)\); do (.*); done")


def guide_queries() -> list[tuple[str, list[dict[str, Any]]]]:
    """Each question's title and its queries (one per bucket for a loop over the buckets)."""
    block = re.search(r"<!-- ops-queries -->\s*```sh\n(.*?)```", GUIDE.read_text(), re.S)
    assert block, "docs/operations.md lost its ops-queries block"
    queries: list[tuple[str, list[dict[str, Any]]]] = []
    title, buckets = "", 0
    for line in block.group(1).splitlines():
        if line.startswith("#"):
            title = line.lstrip("# ")
            continue
        if line.startswith("N="):
            buckets = int(line.removeprefix("N="))
            continue
        loop = BUCKET_LOOP.fullmatch(line)
        if loop is None:
            queries.append((title, [_query(shlex.split(line))]))
            continue
        assert buckets > 0, "a loop over the buckets before N is set"
        words = shlex.split(loop.group(1))
        assert any("$k" in w for w in words), "a loop whose query names no bucket"
        queries.append(
            (title, [_query([w.replace("$k", str(k)) for w in words]) for k in range(buckets)])
        )
    return queries


def _query(words: list[str]) -> dict[str, Any]:
    assert words[:3] == ["aws", "dynamodb", "query"]
    kwargs: dict[str, Any] = {}
    rest = iter(words[3:])
    for word in rest:
        if word == "--no-scan-index-forward":
            kwargs["ScanIndexForward"] = False
            continue
        value = next(rest)
        key = OPTIONS[word]
        kwargs[key] = json.loads(value) if key == "ExpressionAttributeValues" else value
    return kwargs


def test_the_guide_queries_answer_the_ops_questions(aws_resources: AwsResources) -> None:
    # given a deployment whose table has the guide's name, with two instances of device-scan:
    # one succeeded (12:00), one failed (13:00), and one of another task still running
    settings = aws_resources.settings
    ddb = aws_resources.client("dynamodb")
    from tests.support import create_table

    create_table(ddb, "iotsched-Table")
    clock = ManualClock(T0)
    # the guide's deployment: its table name and the default bucket count
    deployment = replace(settings, table="iotsched-Table", index_buckets=DEFAULT_BUCKETS)
    services = bootstrap.build(
        deployment,
        clock=clock,
        clients=aws_resources.clients(),
    )
    apply_tasks(
        [
            task(
                "device-scan",
                trigger={"rate": "1h"},
                sharding={"strategy": "id_range", "shards": 3},
            ),
            task("other", trigger={"rate": "1h"}),
        ],
        services.tasks,
        now=T0 - timedelta(minutes=30),
    )
    dispatch_tick(T0, services)
    messages = received_shard_messages(
        receive_all(aws_resources.client("sqs"), aws_resources.shard_queue_url)
    )
    for message in messages:
        if message.task_id == "device-scan":
            run_shard(Delivery(message.model_dump_json(), "rh"), services, worker="w")
    current = cast("Any", services.tasks.get_task("device-scan"))
    services.tasks.put_tasks(
        [
            current.model_copy(
                update={
                    "version": current.version + 1,  # every write of a task is a new version
                    "definition": task(
                        "device-scan",
                        trigger={"rate": "1h"},
                        sharding={"strategy": "id_range", "shards": 3},
                        params={"fail": True},
                        retry={"max_attempts": 1},
                    ),
                }
            )
        ]
    )
    clock.set(T0 + timedelta(hours=1))
    dispatch_tick(T0 + timedelta(hours=1), services)
    later: list[ShardMessage] = received_shard_messages(
        receive_all(aws_resources.client("sqs"), aws_resources.shard_queue_url)
    )
    for message in later:
        if message.task_id == "device-scan":
            run_shard(Delivery(message.model_dump_json(), "rh"), services, worker="w")

    answers = {}
    for title, queries in guide_queries():
        items = [item for kwargs in queries for item in ddb.query(**kwargs)["Items"]]
        answers[title] = [(item["pk"]["S"], item["sk"]["S"]) for item in items]
    # the guide's bucket count is the deployment's default
    assert {len(q) for _, q in guide_queries()} == {1, deployment.index_buckets}

    assert [sk for _, sk in answers["instances of a task, newest first"]] == [
        "INST#2026-11-29T13:00Z",
        "INST#2026-11-29T12:00Z",
    ]
    running = answers["everything running now"]
    assert [pk for pk, _ in running] == ["TASK#other", "TASK#other"]
    assert answers["failures since a time"] == [("TASK#device-scan", "INST#2026-11-29T13:00Z")]
    assert answers["the shards of an instance"] == [
        ("INST#device-scan@2026-11-29T12:00Z", f"SHARD#{i:06d}") for i in range(3)
    ]
    assert answers["the counter of an instance (remaining shards, failed shards)"] == [
        ("INST#device-scan@2026-11-29T12:00Z", "COUNT")
    ]
    # both hourly instances work on the previous day (business_date previous_day)
    assert answers["the instances of a task for a business date (keys only), reruns included"] == [
        ("TASK#device-scan", "INST#2026-11-29T12:00Z"),
        ("TASK#device-scan", "INST#2026-11-29T13:00Z"),
    ]
    assert answers["alerts of a day, newest first in each bucket"] == [
        ("ALERT#device-scan@2026-11-29T13:00Z#failed", "ALERT")
    ]
