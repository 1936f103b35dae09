"""Submitted instances and client request ids, on the fake and on DynamoDB."""

from __future__ import annotations

from datetime import timedelta

from iotsched.core.decisions import Firing
from iotsched.core.instance_record import (
    InstanceStatus,
    TriggerKind,
)
from iotsched.services.scheduling.build import build_instance
from tests.contract.conftest import Store
from tests.support import T0, task, task_record

H = timedelta(hours=1)


def test_a_submission_is_due_at_its_time_and_leaves_the_index_when_started(store: Store) -> None:
    record = task_record(task("t"), next_fire=None)
    store.put_tasks([record])
    submitted = build_instance(
        record,
        Firing(
            slot=T0 + H,
            kind=TriggerKind.MANUAL,
            status=InstanceStatus.SCHEDULED,
            suffix="submit-1",
            fire_at=T0 + H,
        ),
        claimed_at=T0,
        dispatch_lease_s=60,
    )
    assert submitted.deadline > T0 + H  # its timeout counts from when it is due
    assert store.claim_instance(submitted) is None
    assert store.due_submissions(T0) == []
    (due,) = store.due_submissions(T0 + H)
    assert due.instance_id == "t@2026-11-29T13:00Z~submit-1" and due.fire_at == T0 + H
    assert store.set_instance_status(
        due.instance_id, expected=InstanceStatus.SCHEDULED, status=InstanceStatus.PLANNING
    )
    assert store.due_submissions(T0 + 5 * H) == []
    assert store.due_tasks(T0 + 5 * H) == []  # submissions never look like due tasks


def test_a_request_id_binds_once(store: Store) -> None:
    assert store.record_request("t#r1", "t@A~manual-r1") == "t@A~manual-r1"
    assert store.record_request("t#r1", "t@B~manual-r1") == "t@A~manual-r1"
    assert store.record_request("t#r2", "t@B~manual-r2") == "t@B~manual-r2"


def test_a_manual_run_with_a_request_id_is_its_own_instance_beside_the_slot(store: Store) -> None:
    record = task_record(task("t"), next_fire=T0)
    store.put_tasks([record])
    scheduled = build_instance(
        record,
        Firing(slot=T0, kind=TriggerKind.SCHEDULED, status=InstanceStatus.PLANNING),
        claimed_at=T0,
        dispatch_lease_s=60,
    )
    manual = build_instance(
        record,
        Firing(slot=T0, kind=TriggerKind.MANUAL, status=InstanceStatus.PLANNING, suffix="manual-x"),
        claimed_at=T0,
        dispatch_lease_s=60,
    )
    assert store.claim_instance(scheduled) is None
    assert store.claim_instance(manual) is None
    assert store.get_instance(manual.instance_id) == manual
    assert store.get_instance(scheduled.instance_id) == scheduled
    assert {i.instance_id for i in store.list_instances(task_id="t")} == {
        scheduled.instance_id,
        manual.instance_id,
    }
