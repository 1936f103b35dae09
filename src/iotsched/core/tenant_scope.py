"""The tenant a task acts on: a task of a tenant acts on that tenant alone.

A task file (or a run's params) may name tenants in four places: the params' `tenant`, a
`static` shard's bounds' `tenant`, `sharding: groups`'s `tenant`, and a `custom` planner's
params' `tenant`. For a task of a tenant, each must be that tenant (or absent); a task without
one (the operator's) may name any, as the tenants it covers. Checked at apply and at each run
(`foreign_tenants`), and again by the handlers that act on a tenant (`tasklib.common.tenant_of`),
so neither a file nor a request can point one tenant's task at another's devices or reports.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from iotsched.core.task_definition import TaskDefinition
from iotsched.core.task_sharding import CustomSharding, GroupsSharding, StaticSharding


def _named(where: str, value: Any) -> list[tuple[str, Any]]:
    return [] if value is None else [(where, value)]


def named_tenants(definition: TaskDefinition) -> list[tuple[str, Any]]:
    """Where the definition names a tenant, and the name: (field path, value) pairs."""
    found = _named("params.tenant", definition.params.get("tenant"))
    sharding = definition.sharding
    if isinstance(sharding, StaticSharding):
        for n, bounds in enumerate(sharding.shards):
            found += _named(f"sharding.shards[{n}].tenant", bounds.get("tenant"))
    elif isinstance(sharding, GroupsSharding):
        found += _named("sharding.tenant", sharding.tenant)
    elif isinstance(sharding, CustomSharding):
        found += _named("sharding.params.tenant", sharding.params.get("tenant"))
    return found


def foreign_tenants(tenant: str | None, named: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """The names among `named` that are not `tenant` (none for a task without one)."""
    if tenant is None:
        return []
    return [(where, value) for where, value in named if value != tenant]


def tenant_problem(definition: TaskDefinition) -> str | None:
    """A task of a tenant that names another: the problem, naming where; else None."""
    foreign = foreign_tenants(definition.tenant, named_tenants(definition))
    if not foreign:
        return None
    where = ", ".join(f"{w} = {v!r}" for w, v in foreign)
    return (
        f"task {definition.id!r}: {where}: a task of tenant {definition.tenant!r} acts on "
        "that tenant only (name no other, or leave it out)"
    )


def run_params_problem(definition: TaskDefinition, params: Mapping[str, Any] | None) -> str | None:
    """A run's params naming another tenant than its task's: the problem; else None."""
    if not params:
        return None
    foreign = foreign_tenants(definition.tenant, _named("params.tenant", params.get("tenant")))
    if not foreign:
        return None
    return (
        f"params.tenant = {foreign[0][1]!r}: task {definition.id!r} is tenant "
        f"{definition.tenant!r}'s and acts on that tenant only"
    )
