"""A change of several writes is recorded `pending` before its first write and settled after:
`done` with its instances, `failed` with the error when it is refused after its record, and
left `pending` when it dies between the two; a change refused before anything is written
records nothing. The field-level difference of two definitions."""

from __future__ import annotations

from datetime import timedelta

import pytest

from iotsched import bootstrap
from iotsched.clock import ManualClock
from iotsched.core.audit import AuditRecord, AuditState, Verb, definition_diff
from iotsched.ports.store_errors import StoreContendedError
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.operations.actions import (
    InstanceConflictError,
    cancel_instance,
    rerun_instance,
)
from iotsched.services.operations.on_demand import (
    ManualRunError,
    run_now,
)
from iotsched.services.wiring import Wiring
from tests.support import T0, task


@pytest.fixture
def services() -> Wiring:
    built = bootstrap.build_memory(clock=ManualClock(T0))
    apply_tasks([task("t")], built.tasks, now=T0, actor="ops")
    return built


def runs(services: Wiring) -> list[tuple[Verb, AuditState]]:
    found = services.tasks.list_audit(since=T0, until=T0 + timedelta(days=1))
    # records of one instant list in no set order
    return sorted((r.verb, r.state) for r in found if r.verb is not Verb.APPLY)


def test_a_cancel_that_loses_its_race_is_recorded_failed(
    services: Wiring, monkeypatch: pytest.MonkeyPatch
) -> None:
    instance, _ = run_now("t", services, actor="ops")
    # the instance ends between the cancel's read and its write
    monkeypatch.setattr(services.instances, "end_instance", lambda *a, **k: False)
    with pytest.raises(InstanceConflictError):
        cancel_instance(instance.instance_id, services, actor="ops")
    assert runs(services) == [(Verb.CANCEL, AuditState.FAILED), (Verb.RUN, AuditState.DONE)]


def test_a_run_that_dies_midway_leaves_its_record_pending(
    services: Wiring, monkeypatch: pytest.MonkeyPatch
) -> None:
    def record_then_die(entry: object) -> None:
        if getattr(entry, "state", None) is not AuditState.PENDING:
            raise SystemExit("killed")
        original(entry)

    original = services.tasks.record_audit
    monkeypatch.setattr(services.tasks, "record_audit", record_then_die)
    with pytest.raises(SystemExit):
        run_now("t", services, actor="ops")
    monkeypatch.undo()
    (left,) = [
        r
        for r in services.tasks.list_audit(since=T0, until=T0 + timedelta(days=1))
        if r.verb is Verb.RUN
    ]
    assert left.state is AuditState.PENDING and left.instance_ids == ["t@2026-11-29T12:00Z"]
    # the instance it names did land: the record says what to look at
    assert services.instances.get_instance(left.instance_ids[0]) is not None


def test_a_change_refused_before_any_write_records_nothing(services: Wiring) -> None:
    with pytest.raises(ManualRunError):
        run_now("t", services, params={"x": "y" * 300_000}, actor="ops")
    assert runs(services) == []


def test_a_difference_names_each_changed_field_dotted() -> None:
    before = task("t", params={"mode": "fast", "n": 1})
    after = task("t", params={"mode": "slow", "n": 1}, description="d")
    assert definition_diff(before, after) == {
        "description": ["", "d"],
        "params.mode": ["fast", "slow"],
    }
    assert definition_diff(before, None)["id"] == ["t", None]


def test_a_committed_change_whose_settle_is_throttled_answers_its_result(
    services: Wiring, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The change landed; only its `done` could not be written. Answered as an error, a client
    # would retry a rerun that already runs: it is answered, and the record stays pending.
    first, _ = run_now("t", services, actor="ops")
    cancel_instance(first.instance_id, services, actor="ops")
    original = services.tasks.record_audit

    def throttled_settle(entry: AuditRecord) -> None:
        if entry.state is not AuditState.PENDING:
            raise StoreContendedError("audit: throttled past the retries")
        original(entry)

    monkeypatch.setattr(services.tasks, "record_audit", throttled_settle)
    rerun = rerun_instance(first.instance_id, services, actor="ops")
    assert rerun.instance_id == f"{first.instance_id}~run2"
    assert (Verb.RERUN, AuditState.PENDING) in runs(services)
    # A change refused after its record: its own error, not the settle's.
    monkeypatch.setattr(services.instances, "end_instance", lambda *a, **k: False)
    with pytest.raises(InstanceConflictError):
        cancel_instance(rerun.instance_id, services, actor="ops")
