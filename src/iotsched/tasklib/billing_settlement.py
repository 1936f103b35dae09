"""`billing_settlement`: one deduction per account and business date.

Params:
    tenant: the tenant, when neither the bounds nor the task name one.

Bounds: `{tenant}` (e.g. sharding `static` over tenants) or any bounds naming a tenant.

Accounts are in the devices table (`ACCOUNT#<tenant>` / `<account>`): `balance` (cents),
`devices`, `daily_fee` (cents per device per day), `settled` (the business dates deducted).

Effects, per account: `ctx.once("bill#<tenant>#<account>#<business date>")` commits, in the
same transaction as the ledger entry, the deduction `devices * daily_fee` from the balance,
conditioned on the business date not being in the account's `settled` set (which it joins).

Why it is safe twice: the ledger entry and the deduction commit together or not at all, so a
rerun, a failover or a catch-up finds the key claimed and deducts nothing; the condition on the
balance item guards the account even against another task settling the same date. A catch-up of
an older date settles that date once, whatever the order. Returns `{accounts, deducted,
already, amount}`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from iotsched.context import ShardContext
from iotsched.handlers import handler
from iotsched.ports.effects import EffectConditionError
from iotsched.tasklib.common import tenant_of
from iotsched.tasklib.resources import iot_resources


def bill_key(tenant: str, account: str, business_date: str) -> str:
    """The effect key of one deduction."""
    return f"bill#{tenant}#{account}#{business_date}"


@handler
def billing_settlement(ctx: ShardContext) -> Mapping[str, Any]:
    """Deduct each account's daily fee once for the business date."""
    resources = ctx.resource(iot_resources)
    ddb, table = resources.need_table()
    tenant = tenant_of(ctx)
    day = ctx.business_date.isoformat()
    accounts = deducted = already = amount = 0
    paginator = ddb.get_paginator("query")
    for page in paginator.paginate(
        TableName=table,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": f"ACCOUNT#{tenant}"}},
        ConsistentRead=True,
    ):
        for item in page.get("Items", []):
            accounts += 1
            account = item["sk"]["S"]
            fee = int(item.get("devices", {}).get("N", "0")) * int(
                item.get("daily_fee", {}).get("N", "0")
            )
            deduction = {
                "Update": {
                    "TableName": table,
                    "Key": {"pk": item["pk"], "sk": item["sk"]},
                    "UpdateExpression": "SET balance = balance - :fee ADD settled :day, deductions :one",
                    "ConditionExpression": "attribute_exists(balance) AND NOT contains(settled, :d)",
                    "ExpressionAttributeValues": {
                        ":fee": {"N": str(fee)},
                        ":day": {"SS": [day]},
                        ":d": {"S": day},
                        ":one": {"N": "1"},
                    },
                }
            }
            try:
                claimed = ctx.once(bill_key(tenant, account, day), writes=[deduction])
            except EffectConditionError:  # the account holds the date settled (another key)
                claimed = False
            if claimed:
                deducted += 1
                amount += fee
            else:
                already += 1
    return {"accounts": accounts, "deducted": deducted, "already": already, "amount": amount}
