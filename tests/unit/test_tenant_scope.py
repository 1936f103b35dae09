"""A task of a tenant acts on that tenant alone: a task file naming another tenant in its
params, a static shard's bounds, `sharding: groups` or a custom planner's params is refused at
apply, and so is a run whose params name one; nothing is written. The operator's tasks (no
tenant) name the tenants they cover."""

from __future__ import annotations

from typing import Any

import pytest

from iotsched import bootstrap
from iotsched.clock import ManualClock
from iotsched.services.definitions.apply import apply_task_file
from iotsched.services.definitions.task_file import TaskFileError
from iotsched.services.operations.on_demand import ManualRunError, run_now
from iotsched.services.wiring import Wiring
from tests.support import T0

ACME = {"id": "r", "tenant": "acme", "handler": "noop", "trigger": {"rate": "1d"}}
FOREIGN = [
    ("params.tenant", {"params": {"tenant": "globex"}}),
    (
        "sharding.shards[1].tenant",
        {"sharding": {"strategy": "static", "shards": [{"tenant": "acme"}, {"tenant": "globex"}]}},
    ),
    ("sharding.tenant", {"sharding": {"strategy": "groups", "tenant": "globex"}}),
]


@pytest.fixture
def services() -> Wiring:
    return bootstrap.build_memory(clock=ManualClock(T0))


def apply(services: Wiring, *tasks: dict[str, Any]) -> None:
    apply_task_file(
        {"tasks": list(tasks)},
        handlers=services.handlers,
        store=lambda: services.tasks,
        now=services.clock.now,
    )


@pytest.mark.parametrize(("where", "fields"), FOREIGN, ids=[w for w, _ in FOREIGN])
def test_a_task_of_one_tenant_naming_another_is_refused_at_apply(
    services: Wiring, where: str, fields: dict[str, Any]
) -> None:
    with pytest.raises(TaskFileError) as refused:
        apply(services, {**ACME, **fields})
    assert refused.value.problems == [
        f"task 'r': {where} = 'globex': a task of tenant 'acme' acts on that tenant only "
        "(name no other, or leave it out)"
    ]
    assert services.tasks.get_task("r") is None
    # Its own tenant, or none named, is fine; the operator's task names whom it covers.
    apply(services, {**ACME, "params": {"tenant": "acme"}})
    operator = {k: v for k, v in {**ACME, **fields}.items() if k != "tenant"}
    apply(services, {**operator, "id": "ops"})


def test_a_run_whose_params_name_another_tenant_is_refused(services: Wiring) -> None:
    apply(services, ACME)
    with pytest.raises(ManualRunError, match=r"params\.tenant = 'globex'.*tenant 'acme'"):
        run_now("r", services, params={"tenant": "globex"}, actor="ops")
    assert services.instances.list_instances(task_id="r") == []
    later = T0.replace(year=T0.year + 1)
    verbs = [r.verb.value for r in services.tasks.list_audit(since=T0, until=later, subject="r")]
    assert verbs == ["apply"]  # the refused run wrote no record
    instance, _ = run_now("r", services, params={"tenant": "acme", "n": 1}, actor="ops")
    assert instance.tenant == "acme"
