"""Shard plans with stable bounds (docs/guarantees.md, "Stable shard bounds"): no gap, no overlap, never a page or an offset."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iotsched.core.sharding import PlanningError, ShardPlan, id_range_bounds, plan_shards
from iotsched.core.task_sharding import (
    CustomSharding,
    GroupsSharding,
    IdRangeSharding,
    NoSharding,
    ShardingStrategy,
    StaticSharding,
)


@st.composite
def id_spaces(draw: st.DrawFn) -> IdRangeSharding:
    id_min = draw(st.integers(min_value=0, max_value=10**9))
    span = draw(st.integers(min_value=1, max_value=10**7))
    shards = draw(st.integers(min_value=1, max_value=min(span, 300)))
    return IdRangeSharding(
        strategy=ShardingStrategy.ID_RANGE,
        shards=shards,
        id_min=id_min,
        id_max=id_min + span,
        prefix=draw(st.sampled_from(["dev-", "", "meter/"])),
        width=draw(st.integers(min_value=1, max_value=12)),
    )


@settings(max_examples=200, deadline=None)
@given(spec=id_spaces())
def test_id_ranges_cover_the_space_without_gap_or_overlap(spec: IdRangeSharding) -> None:
    plan = plan_shards(spec)
    bounds = list(plan.all_bounds())
    assert plan.count == spec.shards == len(bounds)
    assert bounds[0]["start"] == spec.id_min
    assert bounds[-1]["end"] == spec.id_max
    for left, right in itertools.pairwise(bounds):
        assert left["end"] == right["start"]  # contiguous: no gap, no overlap
    for b in bounds:
        assert b["start"] < b["end"]  # never empty
        assert b["key_space"] == spec.key_space
        assert b["first_id"] == f"{spec.prefix}{b['start']:0{spec.width}d}"
        assert b["end_id"] == f"{spec.prefix}{b['end']:0{spec.width}d}"
    sizes = [b["end"] - b["start"] for b in bounds]
    assert max(sizes) - min(sizes) <= 1  # balanced


@settings(max_examples=200, deadline=None)
@given(spec=id_spaces(), data=st.data())
def test_bounds_of_a_shard_are_deterministic(spec: IdRangeSharding, data: st.DataObject) -> None:
    """Any node, any time, computes the same bounds for shard i: from the stored plan alone."""
    index = data.draw(st.integers(min_value=0, max_value=spec.shards - 1))
    plan = plan_shards(spec)
    stored = ShardPlan.model_validate_json(plan.model_dump_json())
    assert plan.bounds(index) == stored.bounds(index) == id_range_bounds(spec, index)
    assert plan_shards(spec.model_copy()).bounds(index) == plan.bounds(index)


def test_id_range_bounds_are_rendered_ids() -> None:
    spec = IdRangeSharding(strategy=ShardingStrategy.ID_RANGE, shards=4)
    assert [b["first_id"] for b in plan_shards(spec).all_bounds()] == [
        "dev-000000",
        "dev-250000",
        "dev-500000",
        "dev-750000",
    ]
    assert plan_shards(spec).bounds(3)["end_id"] == "dev-1000000"


def test_a_plan_stores_the_space_not_every_bound() -> None:
    spec = IdRangeSharding(strategy=ShardingStrategy.ID_RANGE, shards=10_000, id_max=10**9)
    plan = plan_shards(spec)
    assert plan.explicit is None
    assert len(plan.model_dump_json()) < 1000


@pytest.mark.parametrize("index", [-1, 3, 100])
def test_bounds_outside_the_plan_raise_index_error(index: int) -> None:
    plan = plan_shards(StaticSharding(strategy=ShardingStrategy.STATIC, shards=[{}, {}, {}]))
    with pytest.raises(IndexError):
        plan.bounds(index)


def test_static_plan_preserves_order_and_copies_bounds() -> None:
    listed: list[dict[str, Any]] = [{"tenant": "initech"}, {"tenant": "acme"}, {"tenant": "globex"}]
    plan = plan_shards(StaticSharding(strategy=ShardingStrategy.STATIC, shards=listed))
    assert plan.strategy is ShardingStrategy.STATIC
    assert plan.count == 3
    assert list(plan.all_bounds()) == listed
    plan.bounds(0)["tenant"] = "mutated"
    assert plan.bounds(0) == {"tenant": "initech"}


def test_no_sharding_is_one_shard_with_empty_bounds() -> None:
    plan = plan_shards(NoSharding())
    assert (plan.strategy, plan.count, list(plan.all_bounds())) == (
        ShardingStrategy.NONE,
        1,
        [{}],
    )


def test_groups_are_planned_from_the_directory_answer() -> None:
    groups = [{"group": "g-1"}, {"group": "g-2"}]
    plan = plan_shards(GroupsSharding(strategy=ShardingStrategy.GROUPS), groups)
    assert plan.count == 2
    assert list(plan.all_bounds()) == groups


@pytest.mark.parametrize("groups", [None, []])
def test_groups_without_groups_raise_planning_error(groups: list[dict[str, Any]] | None) -> None:
    with pytest.raises(PlanningError):
        plan_shards(GroupsSharding(strategy=ShardingStrategy.GROUPS), groups)


def test_custom_without_a_planner_raises_planning_error() -> None:
    with pytest.raises(PlanningError, match="by-region"):
        plan_shards(CustomSharding(strategy=ShardingStrategy.CUSTOM, planner="by-region"))


@pytest.mark.parametrize(
    "plan",
    [
        plan_shards(NoSharding()),
        plan_shards(
            StaticSharding(
                strategy=ShardingStrategy.STATIC, shards=[{"tenant": "acme", "n": 1}, {"r": [1, 2]}]
            )
        ),
        plan_shards(IdRangeSharding(strategy=ShardingStrategy.ID_RANGE, shards=7, id_min=3)),
        plan_shards(GroupsSharding(strategy=ShardingStrategy.GROUPS), [{"group": "g"}]),
    ],
    ids=["none", "static", "id_range", "groups"],
)
def test_plan_round_trips_through_json(plan: ShardPlan) -> None:
    again = ShardPlan.model_validate_json(plan.model_dump_json())
    assert again == plan
    assert list(again.all_bounds()) == list(plan.all_bounds())
