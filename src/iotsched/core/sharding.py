"""Shard plans with stable bounds, computed once at claim time and stored with the instance.

A plan is compact: an `id_range` plan stores its space and count, not 10,000 bound objects, and
`bounds(i)` derives shard i's bounds deterministically. Adjacent id ranges neither overlap nor
leave gaps: boundary k is `id_min + (id_max - id_min) * k // shards`, which is monotone and hits
both ends exactly.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import islice
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from iotsched.core.plugins import Origin, PluginError, PluginRef, load, scan, single
from iotsched.core.task_sharding import (
    CustomSharding,
    GroupsSharding,
    IdRangeSharding,
    NoSharding,
    Sharding,
    ShardingStrategy,
    StaticSharding,
)
from iotsched.core.value_types import Frozen, params_problems


class PlanningError(ValueError):
    """The shards of an instance cannot be planned (e.g. no device directory for `groups`)."""


class PlanTooLargeError(PlanningError):
    """The plan would not fit in its instance's item (DynamoDB holds at most 400 KB an item)."""


class PlannerParamsError(PlanningError):
    """A custom planner's params do not fit its params model; `problems` name each field at
    fault (`params.buckets: Input should be less than or equal to 10000`)."""

    def __init__(self, planner: str, problems: list[str]) -> None:
        super().__init__(f"planner {planner!r}: " + "; ".join(problems))
        self.problems = problems


#: Bytes (as compact JSON) an instance's listed shard bounds may take: an instance item holds
#: at most 400 KB, and its other fields, index keys and JSON escaping need the rest.
MAX_PLAN_BYTES = 300_000


def check_plan_fits(plan: ShardPlan) -> None:
    """Raise PlanTooLargeError, naming the limit, if the plan's listed bounds are too large to be
    stored with the instance (an id-range plan stores its space, never its bounds)."""
    if plan.explicit is None:
        return
    size = len(json.dumps(plan.explicit, separators=(",", ":"), default=str))
    if size > MAX_PLAN_BYTES:
        raise PlanTooLargeError(
            f"{plan.count} shards whose bounds take {size:,} bytes; an instance stores at most "
            f"{MAX_PLAN_BYTES:,} bytes of bounds (DynamoDB items hold at most 400 KB): "
            "use fewer, larger shards (e.g. sharding id_range)"
        )


#: A custom planner: given its task's `sharding.params` (as its params model, if it declares
#: one), the bounds of each shard, in order. It runs when an instance is claimed, and at apply
#: to refuse a task it cannot plan; its answer is stored with the instance (reruns reuse it),
#: so it must be pure and quick: no I/O, no clock.
Planner = Callable[[Any], Sequence[Mapping[str, Any]]]

#: Shards a custom plan may have (as a static one).
MAX_CUSTOM_SHARDS = 10_000

#: The entry-point group packages list their planners under (`iotsched.handlers.PLANNERS_GROUP`).
PLANNERS_GROUP = "iotsched.planners"
#: The attributes `@planner` sets: the name it declares, and its params model (or None).
_DECLARED = "__iotsched_planner__"
_PARAMS_MODEL = "__iotsched_planner_params__"

#: Planners registered in-process (tests); they win over an entry point of the same name.
_PLANNERS: dict[str, Planner] = {}
_LOADED: dict[PluginRef, Planner] = {}


def register_planner(name: str) -> Callable[[Planner], Planner]:
    """Register a custom planner in this process only, under `name` (tests; a package lists
    its planners in the entry-point group `iotsched.planners`)."""

    def register(planner: Planner) -> Planner:
        _PLANNERS[name] = planner
        return planner

    return register


def planner_names() -> list[str]:
    """Every planner's name, sorted: the installed packages' and those registered in-process
    (task files naming another are refused)."""
    return sorted(set(_PLANNERS) | set(scan(PLANNERS_GROUP)))


def planner_origin(name: str) -> Origin | None:
    """The package of planner `name` (None: in-process, defined twice, or unknown)."""
    refs = () if name in _PLANNERS else scan(PLANNERS_GROUP).get(name, ())
    return refs[0].origin if len(refs) == 1 else None


def find_planner(name: str) -> Planner | None:
    """Planner `name`, its module imported on first use; None if no package offers it.

    Raises:
        PluginError: defined twice, its module missing or failing to import, not callable,
            or declared under another name; the message names its package and the cause.
    """
    if name in _PLANNERS:
        return _PLANNERS[name]
    refs = scan(PLANNERS_GROUP).get(name)
    if refs is None:
        return None
    ref = single("planner", refs)
    if ref in _LOADED:
        return _LOADED[ref]
    planner: Planner = load("planner", ref)
    declared = getattr(planner, _DECLARED, name)
    if declared != name:
        raise PluginError(
            "planner",
            name,
            (ref.origin,),
            f"{ref.value} is declared as @planner({declared!r}) but listed under the entry "
            f"point {name!r}: the two names must be the same",
        )
    _LOADED[ref] = planner
    return planner


def planner_params(name: str, planner: Planner, params: Mapping[str, Any]) -> Any:
    """What planner `name` is called with: `params` as its params model (`@planner(params=M)`),
    or as written if it declares none.

    Raises:
        PlannerParamsError: they do not fit the model (a bound passed, a field missing).
    """
    model = getattr(planner, _PARAMS_MODEL, None)
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        return dict(params)
    try:
        return model.model_validate(dict(params))
    except ValidationError as exc:
        raise PlannerParamsError(name, params_problems(exc)) from None


class ShardPlan(Frozen):
    """The shards of one instance. `explicit` holds listed bounds; id ranges are derived."""

    strategy: ShardingStrategy
    count: int = Field(ge=1)
    explicit: list[dict[str, Any]] | None = None
    id_range: IdRangeSharding | None = None

    def bounds(self, index: int) -> dict[str, Any]:
        """Bounds of shard `index` (0-based); raises IndexError outside the plan."""
        if not 0 <= index < self.count:
            raise IndexError(f"shard {index} outside a plan of {self.count}")
        if self.id_range is not None:
            return id_range_bounds(self.id_range, index)
        if self.explicit is not None:
            return dict(self.explicit[index])
        return {}

    def all_bounds(self) -> Iterator[dict[str, Any]]:
        """Bounds of every shard, in index order."""
        for index in range(self.count):
            yield self.bounds(index)


def id_range_bounds(spec: IdRangeSharding, index: int) -> dict[str, Any]:
    """Half-open `[start, end)` of shard `index`, as numbers and as rendered ids."""
    span = spec.id_max - spec.id_min
    start = spec.id_min + span * index // spec.shards
    end = spec.id_min + span * (index + 1) // spec.shards
    return {
        "key_space": spec.key_space,
        "start": start,
        "end": end,
        "first_id": f"{spec.prefix}{start:0{spec.width}d}",
        "end_id": f"{spec.prefix}{end:0{spec.width}d}",
    }


def plan_shards(sharding: Sharding, groups: Sequence[dict[str, Any]] | None = None) -> ShardPlan:
    """Plan the shards of one instance.

    Args:
        sharding: the task's sharding spec.
        groups: for `groups`, the groups read from the Device Management System at fire time.

    Raises:
        PlanningError: `groups` without a directory answer, or `custom` without a planner.
    """
    if isinstance(sharding, NoSharding):
        return ShardPlan(strategy=ShardingStrategy.NONE, count=1)
    if isinstance(sharding, StaticSharding):
        return ShardPlan(
            strategy=ShardingStrategy.STATIC,
            count=len(sharding.shards),
            explicit=[dict(b) for b in sharding.shards],
        )
    if isinstance(sharding, IdRangeSharding):
        return ShardPlan(
            strategy=ShardingStrategy.ID_RANGE, count=sharding.shards, id_range=sharding
        )
    if isinstance(sharding, GroupsSharding):
        if not groups:
            raise PlanningError("sharding 'groups' found no groups in the device directory")
        return ShardPlan(
            strategy=ShardingStrategy.GROUPS, count=len(groups), explicit=[dict(g) for g in groups]
        )
    if isinstance(sharding, CustomSharding):
        return _custom_plan(sharding)
    raise PlanningError(f"unknown sharding {sharding!r}")  # pragma: no cover


def _custom_plan(sharding: CustomSharding) -> ShardPlan:
    try:
        planner = find_planner(sharding.planner)
    except PluginError as exc:  # a deployment problem: the instance fails, naming the package
        raise PlanningError(str(exc)) from exc
    if planner is None:
        raise PlanningError(f"no custom planner named {sharding.planner!r} is installed")
    arguments = planner_params(sharding.planner, planner, sharding.params)
    try:
        # A bound past the limit is read no further: a planner yielding its bounds stops there.
        planned = list(islice(planner(arguments), MAX_CUSTOM_SHARDS + 1))
    except PlanningError:
        raise
    except Exception as exc:  # the planner's own bug or bad params: the instance fails, named
        raise PlanningError(f"planner {sharding.planner!r} failed: {exc}") from exc
    if not planned:
        raise PlanningError(f"planner {sharding.planner!r} planned no shard")
    if len(planned) > MAX_CUSTOM_SHARDS:
        raise PlanningError(
            f"planner {sharding.planner!r} planned more than {MAX_CUSTOM_SHARDS:,} shards, the "
            "most a plan may have"
        )
    if not all(isinstance(b, Mapping) for b in planned):
        raise PlanningError(f"planner {sharding.planner!r} must return a list of bounds objects")
    return ShardPlan(
        strategy=ShardingStrategy.CUSTOM, count=len(planned), explicit=[dict(b) for b in planned]
    )
