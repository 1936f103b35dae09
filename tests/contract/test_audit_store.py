"""Task versions and audit records in the store, over every backend.

A version item is written with its task, in one transaction, or not at all; of two writes
from the same read of a task, one wins and the other is refused (TaskConflictError); a change
of the task store carries its audit record in the same write; a lost response is answered by
the transaction's request token, so nothing is written twice.
"""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from iotsched.adapters.dynamodb import DynamoDBStore
from iotsched.adapters.dynamodb import transact_outcomes as transact
from iotsched.core.audit import AuditState, Verb, new_audit
from iotsched.ports.audit import TaskConflictError
from iotsched.ports.store_errors import WriteRejectedError
from tests.contract.conftest import Store
from tests.faults import Faults
from tests.support import T0, TEST_INDEX_BUCKETS, AwsResources, task, task_record

S = timedelta(seconds=1)
DAY = timedelta(days=1)


def _write(store: Store, version: int, description: str, *, actor: str = "alice") -> None:
    record = task_record(task("t", description=description), next_fire=T0, version=version)
    record = record.model_copy(update={"updated_by": actor, "updated_at": T0 + version * S})
    entry = new_audit(
        Verb.APPLY, "t", tenant=None, actor=actor, at=T0 + version * S, version=version
    )
    store.put_tasks([record], audit=[entry])


def test_each_write_of_a_task_stores_its_version_and_its_record(store: Store) -> None:
    _write(store, 1, "first")
    _write(store, 2, "second", actor="bob")
    versions = store.task_versions("t")
    assert [(v.version, v.definition.description, v.actor) for v in versions] == [
        (1, "first", "alice"),
        (2, "second", "bob"),
    ]
    assert versions[1].at == T0 + 2 * S
    stored = store.get_task("t")
    assert stored is not None and stored.version == 2 and stored.updated_by == "bob"
    records = store.list_audit(since=T0, until=T0 + DAY, subject="t")
    assert [(r.actor, r.version) for r in records] == [("alice", 1), ("bob", 2)]


def test_a_write_from_a_stale_read_is_refused_and_writes_nothing(store: Store) -> None:
    _write(store, 1, "first")
    _write(store, 2, "mine")
    with pytest.raises(TaskConflictError):
        _write(store, 2, "theirs", actor="mallory")
    stored = store.get_task("t")
    assert stored is not None and stored.definition.description == "mine"
    assert [v.definition.description for v in store.task_versions("t")] == ["first", "mine"]
    actors = [r.actor for r in store.list_audit(since=T0, until=T0 + DAY, subject="t")]
    assert "mallory" not in actors


def test_of_concurrent_writes_of_one_version_exactly_one_lands(store: Store) -> None:
    _write(store, 1, "first")
    outcomes: list[str] = []
    barrier = threading.Barrier(6)

    def apply(n: int) -> None:
        barrier.wait()
        try:
            _write(store, 2, f"writer {n}", actor=f"writer-{n}")
            outcomes.append(f"writer {n}")
        except TaskConflictError:
            outcomes.append("refused")

    threads = [threading.Thread(target=apply, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    won = [o for o in outcomes if o != "refused"]
    assert len(won) == 1, outcomes
    stored = store.get_task("t")
    assert stored is not None and stored.definition.description == won[0]
    versions = store.task_versions("t")
    assert [v.definition.description for v in versions] == ["first", won[0]]
    records = store.list_audit(since=T0, until=T0 + DAY, subject="t")
    assert [r.actor for r in records] == ["alice", won[0].replace(" ", "-")]


def test_a_pause_and_a_delete_carry_their_record_and_a_refused_one_writes_none(
    store: Store,
) -> None:
    _write(store, 1, "first")
    pause = new_audit(Verb.PAUSE, "t", tenant=None, actor="ops", at=T0 + 10 * S, note="why")
    assert store.set_paused("t", paused=True, note="why", audit=pause)
    missing = new_audit(Verb.PAUSE, "nobody", tenant=None, actor="ops", at=T0 + 11 * S)
    assert not store.set_paused("nobody", paused=True, audit=missing)
    gone = new_audit(Verb.DELETE, "t", tenant=None, actor="ops", at=T0 + 12 * S)
    assert store.delete_task("t", audit=gone)
    again = new_audit(Verb.DELETE, "t", tenant=None, actor="ops", at=T0 + 13 * S)
    assert not store.delete_task("t", audit=again)
    records = store.list_audit(since=T0, until=T0 + DAY)
    assert [(r.verb, r.subject) for r in records] == [
        (Verb.APPLY, "t"),
        (Verb.PAUSE, "t"),
        (Verb.DELETE, "t"),
    ]
    assert records[1].note == "why"
    # versions outlive their task
    assert [v.version for v in store.task_versions("t")] == [1]


def test_records_are_listed_by_subject_and_by_time_across_days(store: Store) -> None:
    for n, (subject, at) in enumerate(
        [("a", T0), ("b", T0 + S), ("a", T0 + DAY), ("calendar:h", T0 + 2 * DAY)]
    ):
        store.record_audit(new_audit(Verb.RUN, subject, tenant=None, actor=f"u{n}", at=at))
    everyone = store.list_audit(since=T0 - DAY, until=T0 + 3 * DAY)
    assert [r.actor for r in everyone] == ["u0", "u1", "u2", "u3"]
    assert [r.actor for r in store.list_audit(since=T0, until=T0 + 3 * DAY, subject="a")] == [
        "u0",
        "u2",
    ]
    assert [r.actor for r in store.list_audit(since=T0 + S, until=T0 + DAY)] == ["u1"]
    assert len(store.list_audit(since=T0, until=T0 + 3 * DAY, limit=2)) == 2


def test_a_settled_record_replaces_its_pending_one(store: Store) -> None:
    pending = new_audit(Verb.RUN, "t", tenant=None, actor="ops", at=T0, state=AuditState.PENDING)
    store.record_audit(pending)
    store.record_audit(pending.model_copy(update={"state": AuditState.DONE, "instance_ids": ["x"]}))
    (only,) = store.list_audit(since=T0, until=T0 + S)
    assert only.state is AuditState.DONE and only.instance_ids == ["x"]


# -- DynamoDB only: the transaction's answers -------------------------------------------------


@pytest.fixture
def quick_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transact, "BACKOFF_BASE_S", 0.001)
    monkeypatch.setattr(transact, "BACKOFF_CAP_S", 0.002)


@pytest.mark.moto
@pytest.mark.usefixtures("quick_backoff")
def test_a_lost_response_writes_the_version_and_its_record_once(
    aws_resources: AwsResources,
) -> None:
    faults = Faults()
    store = faults.install(
        DynamoDBStore(
            aws_resources.clients().dynamodb(), aws_resources.table, buckets=TEST_INDEX_BUCKETS
        ),
        aws_resources,
    )
    _write(store, 1, "first")
    faults.lose_response()
    _write(store, 2, "second")
    assert faults.pending == 0
    assert [v.version for v in store.task_versions("t")] == [1, 2]
    assert len(store.list_audit(since=T0, until=T0 + DAY, subject="t")) == 2


@pytest.mark.moto
@pytest.mark.parametrize("at", [0, 1, 2])
def test_a_cancelled_write_leaves_neither_the_task_nor_its_version(
    aws_resources: AwsResources, at: int
) -> None:
    """Whichever action (the task, its version, its record) is refused, none lands."""
    faults = Faults()
    store = faults.install(
        DynamoDBStore(
            aws_resources.clients().dynamodb(), aws_resources.table, buckets=TEST_INDEX_BUCKETS
        ),
        aws_resources,
    )
    _write(store, 1, "first")
    faults.cancel("ValidationError", at=at)
    with pytest.raises(WriteRejectedError):
        _write(store, 2, "second")
    stored = store.get_task("t")
    assert stored is not None and stored.version == 1
    assert [v.version for v in store.task_versions("t")] == [1]
    assert len(store.list_audit(since=T0, until=T0 + DAY, subject="t")) == 1
