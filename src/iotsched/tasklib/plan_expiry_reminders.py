"""`plan_expiry_reminders`: one notice per device and plan period, published to an SNS topic.

Params:
    days_ahead: remind devices whose plan expires between the business date and this many
        days after it (default 7).
    tenant: the tenant, when neither the bounds nor the task name one.

Bounds: `{tenant, group, first_id, end_id}` (sharding `groups`), an id range, or `{tenant}`.

Effects, per device whose plan expires in the window (the plan period is named by its expiry
date): `ctx.once("remind#<tenant>#<device>#<expiry>")` claims the notice and, in the same
transaction, records it in the devices table (`NOTICE#<tenant>` / `<device>#<expiry>`, status
`pending`); then the notice is published (message attribute `notice_id`) and its record set to
`sent`.

Why it is safe twice: the claim is made once across every attempt and rerun, so a second run
finds each notice claimed and publishes none of them again. The one window left is a worker
dying after the claim and before the record says `sent`: the next run finds the notice still
`pending` and publishes it then (never lost; at worst sent twice if the death fell between the
publish and the status write, which subscribers absorb by `notice_id`).
Returns `{candidates, notices, resent, already}`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from iotsched.context import ShardContext
from iotsched.handlers import handler
from iotsched.ports.effects import EffectConditionError
from iotsched.tasklib.common import scope_of
from iotsched.tasklib.resources import iot_resources


def notice_key(tenant: str, device_id: str, expiry: str) -> str:
    """The effect key of one notice."""
    return f"remind#{tenant}#{device_id}#{expiry}"


@handler
def plan_expiry_reminders(ctx: ShardContext) -> Mapping[str, Any]:
    """Claim, record and publish one notice per device and plan period."""
    resources = ctx.resource(iot_resources)
    directory = resources.need_directory()
    ddb, table = resources.need_table()
    sns, topic = resources.need_topic()
    scope = scope_of(ctx, resources)
    first = ctx.business_date
    last = first + timedelta(days=int(ctx.params.get("days_ahead", 7)))
    candidates = notices = resent = already = 0
    for device in directory.devices(scope.tenant, scope.first_id, scope.end_id):
        expiry = device.plan_expires
        if expiry is None or not first <= expiry <= last:
            continue
        candidates += 1
        key = notice_key(scope.tenant, device.device_id, expiry.isoformat())
        record = {
            "pk": {"S": f"NOTICE#{scope.tenant}"},
            "sk": {"S": f"{device.device_id}#{expiry}"},
        }
        if _claim(
            ctx,
            key,
            writes=[
                {
                    "Put": {
                        "TableName": table,
                        "Item": {
                            **record,
                            "notice_id": {"S": key},
                            "status": {"S": "pending"},
                            "instance_id": {"S": ctx.instance_id},
                        },
                        "ConditionExpression": "attribute_not_exists(pk)",
                    }
                }
            ],
        ):
            notices += 1
        else:
            stored = ddb.get_item(TableName=table, Key=record, ConsistentRead=True).get("Item")
            if stored is None or stored.get("status", {}).get("S") != "pending":
                already += 1
                continue
            resent += 1  # an earlier run died between its claim and its publish
        _publish(sns, topic, key, scope.tenant, device.device_id, expiry.isoformat(), ctx)
        ddb.update_item(
            TableName=table,
            Key=record,
            UpdateExpression="SET #s = :sent",
            ExpressionAttributeNames={"#s": "status"},
            ExpressionAttributeValues={":sent": {"S": "sent"}},
        )
    return {"candidates": candidates, "notices": notices, "resent": resent, "already": already}


def _claim(ctx: ShardContext, key: str, writes: list[Mapping[str, Any]]) -> bool:
    """`ctx.once`, where a notice record already there (written without this key's claim)
    reads as an earlier notice: the record's status decides whether it is sent again."""
    try:
        return ctx.once(key, writes=writes)
    except EffectConditionError:
        return False


def _publish(
    sns: Any, topic: str, key: str, tenant: str, device_id: str, expiry: str, ctx: ShardContext
) -> None:
    sns.publish(
        TopicArn=topic,
        Subject="Data plan expiry",
        Message=json.dumps(
            {
                "notice_id": key,
                "tenant": tenant,
                "device_id": device_id,
                "plan_expires": expiry,
                "business_date": ctx.business_date.isoformat(),
            },
            sort_keys=True,
        ),
        MessageAttributes={
            "notice_id": {"DataType": "String", "StringValue": key},
            "tenant": {"DataType": "String", "StringValue": tenant},
        },
    )
