"""How a handler's shard bounds become a tenant and an id range."""

from __future__ import annotations

from datetime import date
from typing import Any

import pytest

from iotsched.adapters.memory.devices import MemoryDeviceDirectory
from iotsched.context import ShardContext
from iotsched.tasklib.common import (
    BoundsError,
    scope_of,
    tenant_of,
)
from iotsched.tasklib.resources import TaskResources
from tests.iot.support import AS_OF, GROUPS, TENANTS


def ctx(
    bounds: dict[str, Any], params: dict[str, Any] | None = None, tenant: str | None = None
) -> ShardContext:
    return ShardContext(
        instance_id="t@2026-11-28T12:00Z",
        task_id="t",
        tenant=tenant,
        shard=0,
        bounds=bounds,
        params=params or {},
        business_date=date(2026, 11, 28),
        data_interval_start=AS_OF,
        data_interval_end=AS_OF,
        attempt=1,
        deadline=AS_OF,
        worker="w",
        _heartbeat=lambda: AS_OF,
        _record_effect=lambda key, writes: True,
    )


RESOURCES = TaskResources(directory=MemoryDeviceDirectory(TENANTS, GROUPS))


def test_group_bounds_are_the_scope() -> None:
    scope = scope_of(ctx(GROUPS[1].bounds()), RESOURCES)
    assert (scope.tenant, scope.first_id, scope.end_id) == ("acme", "dev-000600", "dev-001000")
    assert scope.label == "dev-000600_dev-001000"


def test_a_tenant_bound_covers_the_tenants_groups() -> None:
    scope = scope_of(ctx({"tenant": "acme"}), RESOURCES)
    assert (scope.first_id, scope.end_id) == ("dev-000000", "dev-001000")
    assert scope_of(ctx({}, tenant="globex"), RESOURCES).first_id == "dev-001000"
    assert tenant_of(ctx({}, params={"tenant": "initech"})) == "initech"


def test_missing_tenant_or_range_is_a_clear_error() -> None:
    with pytest.raises(BoundsError, match="names no tenant"):
        tenant_of(ctx({"group": "north"}))
    with pytest.raises(BoundsError, match="lists no group of tenant 'nobody'"):
        scope_of(ctx({"tenant": "nobody"}), RESOURCES)
    with pytest.raises(ValueError, match="is not 'dev-' followed by digits"):
        scope_of(ctx({"tenant": "acme", "first_id": "x1", "end_id": "x9"}), RESOURCES)


def test_a_shard_of_a_tenants_task_acts_on_that_tenant_alone() -> None:
    # The task's tenant wins; bounds or params naming another (refused at apply and at run,
    # should a stored record still say so) fail the shard before it touches anything.
    assert tenant_of(ctx({"tenant": "acme"}, tenant="acme")) == "acme"
    assert scope_of(ctx({}, tenant="globex"), RESOURCES).tenant == "globex"
    with pytest.raises(BoundsError, match=r"names tenant 'globex'.*tenant 'acme'"):
        tenant_of(ctx({"tenant": "globex"}, tenant="acme"))
    with pytest.raises(BoundsError, match="names tenant 'globex'"):
        scope_of(ctx({}, params={"tenant": "globex"}, tenant="acme"), RESOURCES)
    # The operator's task (no tenant) covers the tenants its bounds name.
    assert tenant_of(ctx({"tenant": "globex"})) == "globex"
