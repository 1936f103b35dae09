"""Handlers and planners from any installed package: the entry-point groups `iotsched.handlers`
and `iotsched.planners`, scanned without importing, each module imported on its first use;
iotsched's own built-ins found the same way; handlers given in-process beside them."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from iotsched import ShardContext, bootstrap, handler
from iotsched.clock import ManualClock
from iotsched.core.instance_record import InstanceStatus
from iotsched.core.plugins import Origin, scan
from iotsched.core.sharding import find_planner, planner_names, planner_origin
from iotsched.handlers import HANDLERS_GROUP, PLANNERS_GROUP
from iotsched.registry import HandlerRegistry, LoadedHandler
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.execution.batch import run_shard
from iotsched.services.execution.outcomes import Delivery
from iotsched.services.scheduling.send import shard_messages
from iotsched.services.scheduling.tick import dispatch_tick
from tests.distributions import Distributions, installed
from tests.support import T0, task

BUILTIN = {
    "noop",
    "chaos",
    "inspect_offline",
    "tenant_report",
    "tenant_report_merge",
    "archive_cold_data",
    "plan_expiry_reminders",
    "billing_settlement",
}

ACME = """
    from pydantic import BaseModel
    from iotsched import ShardContext, handler, planner

    class CloseParams(BaseModel):
        currency: str = "EUR"
        accounts: int

    @handler("billing_close", params=CloseParams)
    def billing_close(ctx: ShardContext, params: CloseParams) -> dict:
        return {"currency": params.currency, "accounts": params.accounts, "shard": ctx.shard}

    def plain(ctx):
        return {"params": dict(ctx.params)}

    @planner("by_region")
    def by_region(params):
        return [{"region": r} for r in params["regions"]]
"""


@pytest.fixture
def dists(tmp_path: Path) -> Iterator[Distributions]:
    with installed(tmp_path / "site") as made:
        yield made


@pytest.fixture
def acme(dists: Distributions) -> Distributions:
    dists.add(
        "acme-jobs",
        "1.4.2",
        handlers={
            "billing_close": "acme_jobs.billing:billing_close",
            "plain": "acme_jobs.billing:plain",
        },
        planners={"by_region": "acme_jobs.billing:by_region"},
        modules={"acme_jobs.billing": ACME},
    )
    return dists


def test_iotsched_registers_its_own_handlers_and_planner_through_the_groups() -> None:
    handlers = scan(HANDLERS_GROUP)
    assert set(handlers) >= BUILTIN
    for name in BUILTIN:
        (ref,) = handlers[name]
        assert ref.origin is not None and ref.origin.package == "iotsched"
        assert ref.value.startswith("iotsched.tasklib.")
    (planner_ref,) = scan(PLANNERS_GROUP)["hash_buckets"]
    assert planner_ref.value == "iotsched.tasklib.planners:hash_buckets"
    assert "hash_buckets" in planner_names()


def test_the_planners_group_is_the_public_one() -> None:
    from iotsched.core import sharding

    assert sharding.PLANNERS_GROUP == PLANNERS_GROUP == "iotsched.planners"
    assert HANDLERS_GROUP == "iotsched.handlers"


def test_a_package_s_handlers_are_named_without_importing_them(acme: Distributions) -> None:
    registry = HandlerRegistry()
    assert {"billing_close", "plain"} | BUILTIN <= set(registry)
    assert "billing_close" in registry
    assert registry.origin("billing_close") == Origin("acme-jobs", "1.4.2")
    assert "acme_jobs.billing" not in sys.modules  # named, not imported
    loaded = registry["billing_close"]
    assert "acme_jobs.billing" in sys.modules
    assert isinstance(loaded, LoadedHandler)
    assert loaded.origin == Origin("acme-jobs", "1.4.2")
    assert loaded.value == "acme_jobs.billing:billing_close"
    assert loaded.spec.params is not None and loaded.spec.params.__name__ == "CloseParams"


def test_a_plain_function_entry_point_is_a_handler_named_by_its_entry_point(
    acme: Distributions,
) -> None:
    loaded = HandlerRegistry()["plain"]
    assert loaded.spec.name == "plain" and loaded.spec.params is None


def test_a_package_s_planner_is_found_and_imported_on_first_use(acme: Distributions) -> None:
    assert "by_region" in planner_names()
    assert planner_origin("by_region") == Origin("acme-jobs", "1.4.2")
    assert "acme_jobs.billing" not in sys.modules
    planner = find_planner("by_region")
    assert planner is not None
    assert list(planner({"regions": ["eu", "us"]})) == [{"region": "eu"}, {"region": "us"}]
    assert find_planner("by_moon") is None


def _run(services: Any, definition: Any) -> list[Any]:
    apply_tasks([definition], services.tasks, now=T0 - timedelta(hours=1))
    report = dispatch_tick(T0, services)
    (iid,) = report.claimed
    instance = services.instances.get_instance(iid)
    for message in shard_messages(instance):
        run_shard(
            Delivery(body=message.model_dump_json(), receipt_handle="rh"), services, worker="w"
        )
    ended = services.instances.get_instance(iid)
    assert ended is not None and ended.status is InstanceStatus.SUCCEEDED, ended
    return list(services.instances.list_shards(iid))


def test_a_package_s_handler_and_planner_run_a_task_with_typed_params(
    acme: Distributions,
) -> None:
    services = bootstrap.build_memory(clock=ManualClock(T0 + timedelta(seconds=5)))
    definition = task(
        "close",
        handler="billing_close",
        params={"accounts": 3},
        sharding={
            "strategy": "custom",
            "planner": "by_region",
            "params": {"regions": ["eu", "us"]},
        },
    )
    shards = _run(services, definition)
    assert [s.result for s in shards] == [
        {"currency": "EUR", "accounts": 3, "shard": 0},
        {"currency": "EUR", "accounts": 3, "shard": 1},
    ]
    assert [s.bounds for s in shards] == [{"region": "eu"}, {"region": "us"}]


class Greeting(BaseModel):
    name: str


@handler("greet", params=Greeting)
def greet(ctx: ShardContext, params: Greeting) -> dict[str, str]:
    return {"hello": params.name}


def plain_count(ctx: ShardContext) -> dict[str, int]:
    return {"shard": ctx.shard}


def test_build_memory_takes_plain_and_decorated_functions_in_process() -> None:
    services = bootstrap.build_memory(
        clock=ManualClock(T0 + timedelta(seconds=5)),
        handlers={"greet": greet, "count": plain_count},
    )
    assert set(services.handlers) == {"greet", "count"}  # exactly those: nothing discovered
    (shard,) = _run(services, task("g", handler="greet", params={"name": "ada"}))
    assert shard.result == {"hello": "ada"}
    (shard,) = _run(services, task("c", handler="count"))
    assert shard.result == {"shard": 0}


def test_given_handlers_win_over_installed_ones_of_the_same_name() -> None:
    registry = HandlerRegistry({"noop": plain_count})
    assert registry["noop"].spec.fn is plain_count
    assert registry.origin("noop") is None  # in-process: no package
    assert "inspect_offline" in registry  # the others still discovered


def test_a_registry_spread_into_a_dict_keeps_each_handler_s_package() -> None:
    spread: dict[str, Callable[..., Any]] = {**HandlerRegistry(), "count": plain_count}
    kept = HandlerRegistry(spread, discover=False)
    assert kept["noop"].origin is not None and kept["noop"].origin.package == "iotsched"
    assert kept["count"].origin is None


def test_the_iot_handlers_take_their_resources_from_the_services() -> None:
    from iotsched.tasklib.resources import TaskResources, iot_resources

    seen: list[TaskResources] = []

    def peek(ctx: ShardContext) -> None:
        seen.append(ctx.resource(iot_resources))

    services = bootstrap.build_memory(
        clock=ManualClock(T0 + timedelta(seconds=5)), handlers={"peek": peek}
    )
    _run(services, task("p", handler="peek"))
    assert seen == [services.resources.get(iot_resources)]
    assert seen[0] is services.resources.get(iot_resources)  # one per container
