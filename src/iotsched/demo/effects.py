"""What the demo's effects left behind, read back for its summary: duplicates among them.

Each check reads the effect where it landed (the accounts' items, the bucket's object versions,
the reminder topic's local inbox, the devices' offline marks), so that a slot run twice would
show there, whatever the scheduler's own records say.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from iotsched.adapters.aws import AwsClients
from iotsched.demo.fleet import INITIAL_BALANCE
from iotsched.local.runtime import LocalRuntime
from iotsched.tasklib.resources import TaskResources


def effects_applied_twice(
    runtime: LocalRuntime, resources: TaskResources, marked_total: int
) -> tuple[int, dict[str, int]]:
    """Effects that landed more than once, counted from what they left behind:

    - deductions: per account, deductions beyond the business dates settled, and any balance
      that is not the initial one less one fee per settled date;
    - notices: messages the reminder topic delivered beyond one per notice id;
    - objects: report and archive keys with more than one version in the bucket;
    - offline marks: marks the inspections counted beyond the devices marked offline.
    """
    ddb, table = resources.need_table()
    deductions = 0
    for tenant in ("acme", "globex", "initech"):
        paginator = ddb.get_paginator("query")
        for page in paginator.paginate(
            TableName=table,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": f"ACCOUNT#{tenant}"}},
        ):
            for item in page.get("Items", []):
                settled = len(item.get("settled", {}).get("SS", []))
                count = int(item.get("deductions", {}).get("N", "0"))
                fee = int(item["devices"]["N"]) * int(item["daily_fee"]["N"])
                expected = INITIAL_BALANCE - fee * settled
                deductions += max(0, count - settled)
                if int(item["balance"]["N"]) != expected:
                    deductions += max(1, abs(int(item["balance"]["N"]) - expected) // max(fee, 1))
    notices = notice_duplicates(runtime)
    s3, bucket = resources.need_bucket()
    versions: Counter[str] = Counter()
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket):
        for version in page.get("Versions", []):
            versions[version["Key"]] += 1
    objects = sum(n - 1 for n in versions.values() if n > 1)
    offline = 0
    directory = resources.need_directory()
    for group in directory.groups():
        offline += sum(
            1
            for d in directory.devices(group.tenant, group.first_id, group.end_id)
            if d.offline_since is not None
        )
    marks = max(0, marked_total - offline)
    checks = {
        "deductions": deductions,
        "notices": notices["duplicates"],
        "notices_delivered": notices["delivered"],
        "objects_rewritten": objects,
        "offline_marks": marks,
        "devices_offline": offline,
    }
    twice = deductions + notices["duplicates"] + objects + marks
    return twice, checks


def notice_duplicates(runtime: LocalRuntime) -> dict[str, int]:
    """Notices the reminder topic delivered (its local inbox) and how many repeated an id."""
    url = runtime.deployment.topic_inboxes.get("ReminderTopic")
    if url is None:
        return {"delivered": 0, "duplicates": 0}
    sqs = AwsClients(region="us-east-1", endpoint_url=runtime.endpoint_url).sqs()
    ids: Counter[str] = Counter()
    while True:
        batch = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
        if not batch:
            break
        for message in batch:
            ids[json.loads(json.loads(message["Body"])["Message"])["notice_id"]] += 1
        sqs.delete_message_batch(
            QueueUrl=url,
            Entries=[
                {"Id": str(n), "ReceiptHandle": m["ReceiptHandle"]} for n, m in enumerate(batch)
            ],
        )
    return {"delivered": sum(ids.values()), "duplicates": sum(n - 1 for n in ids.values())}


def objects(resources: TaskResources, prefix: str) -> list[str]:
    """The bucket's keys under `prefix`."""
    s3, bucket = resources.need_bucket()
    keys: list[str] = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys.extend(o["Key"] for o in page.get("Contents", []))
    return keys


def drain_alerts(runtime: LocalRuntime) -> list[dict[str, Any]]:
    """Every alert the alert topic delivered to its local inbox (taken out of it)."""
    url = runtime.deployment.alert_inbox_url
    if url is None:
        return []
    sqs = AwsClients(region="us-east-1", endpoint_url=runtime.endpoint_url).sqs()
    alerts: list[dict[str, Any]] = []
    while True:
        batch = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
        if not batch:
            return alerts
        for message in batch:
            alerts.append(json.loads(json.loads(message["Body"])["Message"]))
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
