"""One stored record this version cannot decode (params nested past the JSON parser's depth,
written by an older version or by hand) never stops the others: lists and the tick skip it
and serve and fire the rest, the tick alerts once naming it, a read of it alone is a clear
error, and an operator deletes it with force. On the moto server's table: the in-memory
stores keep records decoded, so none is ever unreadable there."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from iotsched.adapters.dynamodb.audit import audit_item
from iotsched.adapters.dynamodb.codec import task_item
from iotsched.api.app import create_app
from iotsched.core.audit import Verb, new_audit
from iotsched.ports.store_errors import UnreadableRecordError
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.definitions.control import delete_task
from iotsched.services.scheduling.tick import dispatch_tick
from iotsched.services.wiring import Wiring
from tests.api.conftest import Client
from tests.support import T0, AwsResources, task, task_record

pytestmark = pytest.mark.moto


def _deep(levels: int) -> dict[str, Any]:
    nested: dict[str, Any] = {"x": 1}
    for _ in range(levels):
        nested = {"a": nested}
    return nested


def _write_unreadable(aws: AwsResources, services: Wiring) -> None:
    """A due task `deep` and its audit record, as an older version could have stored them."""
    definition = task("deep").model_dump(mode="json", exclude_none=True)
    raw = json.dumps({**definition, "params": _deep(250)})
    record = task_record(task("deep"), next_fire=T0)
    item = task_item(record, aws.settings.index_buckets)
    item["definition"] = {"S": raw}
    client = aws.clients().dynamodb()
    client.put_item(TableName=aws.table, Item=item)
    entry = new_audit(Verb.APPLY, "deep", tenant=None, actor="old-version", at=T0)
    audit = audit_item(entry, aws.settings.index_buckets)
    audit["record"] = {"S": json.dumps({**json.loads(audit["record"]["S"]), "diff": _deep(250)})}
    client.put_item(TableName=aws.table, Item=audit)


def test_one_unreadable_task_does_not_stop_listing_or_firing_the_others(
    aws_resources: AwsResources, moto_services: Wiring
) -> None:
    services = moto_services
    apply_tasks([task("good")], services.tasks, now=T0 - timedelta(hours=1), actor="ops")
    _write_unreadable(aws_resources, services)

    assert [t.task_id for t in services.tasks.list_tasks()] == ["good"]
    with pytest.raises(UnreadableRecordError, match="TASK#deep / DEF cannot be read"):
        services.tasks.get_task("deep")
    audit = services.tasks.list_audit(since=T0 - timedelta(days=1), until=T0 + timedelta(days=1))
    assert [r.subject for r in audit] == ["good"]

    services.clock.set(T0)
    report = dispatch_tick(T0, services)
    assert report.due_tasks == 1 and report.failed_tasks == []
    assert services.instances.list_instances(task_id="good")  # the other task fired
    alerts = [a for a in services.alert_log.recent() if a.task_id == "deep"]
    assert [a.type for a in alerts] == ["task_dispatch_failed"]
    assert alerts[0].reason is not None and "tasks delete deep --force" in alerts[0].reason
    dispatch_tick(T0 + timedelta(minutes=1), services)  # again a minute on: no second alert
    assert len([a for a in services.alert_log.recent() if a.task_id == "deep"]) == 1

    api = Client(create_app(lambda: services), services)
    listed = api.get("/tasks")
    assert listed.status == 200 and [t["id"] for t in listed.body] == ["good"]
    shown = api.get("/tasks/deep")
    assert shown.status == 500 and shown.body["error"] == "internal"
    assert "TASK#deep / DEF" in shown.body["message"] and "force" in shown.body["message"]

    with pytest.raises(UnreadableRecordError):
        delete_task("deep", services, actor="ops")  # refused without force: nothing written
    deleted = delete_task("deep", services, force=True, actor="ops")
    assert deleted.version == 0
    assert [t.task_id for t in services.tasks.list_tasks()] == ["good"]
    assert services.tasks.get_task("deep") is None
