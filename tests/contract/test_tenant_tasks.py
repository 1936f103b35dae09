"""A tenant's task count (`max_tasks`) and the quotas stored on its tasks, on every store: a new
task of the tenant is counted in its own write, refused with nothing written past the quota,
whatever the concurrency; a delete gives its place back; the quotas round-trip on the task."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from iotsched.core.instance_record import InstanceStatus
from iotsched.core.quotas import TenantQuotas
from iotsched.core.task_record import TaskRecord
from iotsched.ports.audit import (
    TaskConflictError,
    TaskQuotaError,
)
from tests.contract.conftest import Store
from tests.support import T0, instance, task, task_record

M = timedelta(minutes=1)

QUOTAS = TenantQuotas(max_tasks=3, max_concurrent_shards=2)


def record(
    task_id: str, *, tenant: str = "acme", quotas: TenantQuotas | None = QUOTAS
) -> TaskRecord:
    return task_record(task(task_id, tenant=tenant), next_fire=T0).model_copy(
        update={"quotas": quotas}
    )


def test_the_quotas_round_trip_on_the_task_and_are_stamped_apart(store: Store) -> None:
    store.put_tasks([record("a"), record("b", quotas=None)])
    a, b = store.get_task("a"), store.get_task("b")
    assert a is not None and a.quotas == QUOTAS
    assert b is not None and b.quotas is None
    assert store.set_task_quotas("b", TenantQuotas(max_concurrent_shards=5))
    b = store.get_task("b")
    assert b is not None and b.quotas == TenantQuotas(max_concurrent_shards=5)
    assert b.version == 1 and b.next_fire == T0  # its definition and clock untouched
    (due,) = [t for t in store.due_tasks(T0) if t.task_id == "b"]
    assert due.quotas == TenantQuotas(max_concurrent_shards=5)  # the tick reads it
    assert store.set_task_quotas("b", None)
    b = store.get_task("b")
    assert b is not None and b.quotas is None
    assert not store.set_task_quotas("gone", QUOTAS)


def test_new_tasks_are_counted_up_to_the_quota_and_no_further(store: Store) -> None:
    assert store.tenant_task_count("acme") is None
    assert store.seed_tenant_task_count("acme", 1)
    assert not store.seed_tenant_task_count("acme", 0)  # kept: it stays
    store.put_tasks([record("a"), record("b")], counted=["a", "b"])
    assert store.tenant_task_count("acme") == 3
    with pytest.raises(TaskQuotaError) as refused:
        store.put_tasks([record("c")], counted=["c"])
    assert refused.value.tenant == "acme" and refused.value.limit == 3
    assert "max_tasks" in str(refused.value) and "c" in str(refused.value)
    assert store.get_task("c") is None  # nothing of it written
    assert store.tenant_task_count("acme") == 3
    # A task written again (not counted) passes; another tenant has its own count.
    store.put_tasks([record("a").model_copy(update={"version": 2})])
    assert store.seed_tenant_task_count("globex", 0)
    store.put_tasks([record("g", tenant="globex")], counted=["g"])
    assert store.tenant_task_count("globex") == 1


def test_a_delete_gives_the_place_back(store: Store) -> None:
    assert store.seed_tenant_task_count("acme", 0)
    store.put_tasks([record(n) for n in "abc"], counted=list("abc"))
    with pytest.raises(TaskQuotaError):
        store.put_tasks([record("d")], counted=["d"])
    assert store.delete_task("b", counted="acme")
    assert store.tenant_task_count("acme") == 2
    assert not store.delete_task("b", counted="acme")  # gone: nothing given back twice
    assert store.tenant_task_count("acme") == 2
    store.put_tasks([record("d")], counted=["d"])
    assert store.get_task("d") is not None


def test_a_count_not_kept_refuses_a_counted_task(store: Store) -> None:
    # The count is kept from the quota's setting (seeded): a counted write without one is
    # refused rather than counted from nothing.
    with pytest.raises(TaskQuotaError):
        store.put_tasks([record("a")], counted=["a"])
    assert store.get_task("a") is None
    store.forget_tenant_task_count("acme")  # idempotent
    assert store.tenant_task_count("acme") is None


def test_concurrent_applies_never_pass_the_quota(store: Store) -> None:
    assert store.seed_tenant_task_count("acme", 0)
    outcomes: list[str] = []
    lock = threading.Lock()
    go = threading.Barrier(8)

    def apply(n: int) -> None:
        go.wait()
        try:
            store.put_tasks([record(f"t{n}")], counted=[f"t{n}"])
            result = "created"
        except TaskQuotaError:
            result = "refused"
        except TaskConflictError:  # pragma: no cover - distinct ids never conflict
            result = "conflict"
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=apply, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["created"] * 3 + ["refused"] * 5
    stored = [n for n in range(8) if store.get_task(f"t{n}") is not None]
    assert len(stored) == 3
    assert store.tenant_task_count("acme") == 3


def test_the_tenants_quotas_and_count_share_its_item_and_are_set_apart(store: Store) -> None:
    assert store.get_tenant_quotas("acme") is None
    store.put_tenant_quotas("acme", QUOTAS)
    assert store.get_tenant_quotas("acme") == QUOTAS
    assert store.tenant_task_count("acme") is None  # quotas alone keep no count
    assert store.seed_tenant_task_count("acme", 2)
    store.put_tenant_quotas("acme", TenantQuotas(max_tasks=5))
    assert store.get_tenant_quotas("acme") == TenantQuotas(max_tasks=5)
    assert store.tenant_task_count("acme") == 2  # the count stays
    store.forget_tenant_task_count("acme")
    assert store.tenant_task_count("acme") is None
    assert store.get_tenant_quotas("acme") == TenantQuotas(max_tasks=5)  # the quotas stay
    store.put_tenant_quotas("acme", None)
    store.put_tenant_quotas("acme", None)  # idempotent
    assert store.get_tenant_quotas("acme") is None
    assert store.get_tenant_quotas("globex") is None


def test_an_instance_keeps_its_tenants_quotas_and_its_wait_record(store: Store) -> None:
    claimed = instance("t", tenant="acme").model_copy(update={"tenant_cap": 4, "tenant_rate": 9})
    plain = instance("u", tenant="globex")
    assert store.claim_instance(claimed) is None and store.claim_instance(plain) is None
    got = store.get_instance(claimed.instance_id)
    assert got is not None and (got.tenant_cap, got.tenant_rate, got.waiting) == (4, 9, None)
    other = store.get_instance(plain.instance_id)
    assert other is not None and (other.tenant_cap, other.tenant_rate) == (None, None)
    held = claimed.dispatch_lease_until
    why = "max_instances_per_minute: tenant acme started its 9 instances of this minute"
    assert store.advance_dispatch(
        claimed.instance_id, sent=0, held=held, until=T0 + 2 * M, waiting=why
    )
    got = store.get_instance(claimed.instance_id)
    assert got is not None and got.waiting == why and got.sent == 0
    assert got.status is InstanceStatus.PLANNING
    # The write that renews the lease without a wait clears the record.
    assert store.advance_dispatch(claimed.instance_id, sent=0, held=T0 + 2 * M, until=T0 + 3 * M)
    got = store.get_instance(claimed.instance_id)
    assert got is not None and got.waiting is None and got.dispatch_lease_until == T0 + 3 * M
