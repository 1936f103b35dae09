"""Task files (docs/task-files.md): validation names the task and the field; a bad file writes nothing."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import yaml

from iotsched.adapters.memory.tasks import MemoryTaskStore
from iotsched.core.task_definition import (
    BusinessDateRule,
    TaskDefinition,
)
from iotsched.core.task_policies import (
    BlockingPolicy,
    MisfirePolicy,
)
from iotsched.core.task_sharding import (
    GroupsSharding,
    IdRangeSharding,
    NoSharding,
    StaticSharding,
)
from iotsched.core.task_triggers import (
    AfterTrigger,
    CronTrigger,
    RateTrigger,
)
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.definitions.task_file import (
    TaskFileError,
    parse_task_file,
)
from tests.support import T0, task

EXAMPLE_HANDLERS = {
    "noop",
    "inspect_offline",
    "tenant_report",
    "tenant_report_merge",
    "billing_settlement",
}

# A task file with a trigger of each kind and most sharding strategies and policies.
EXAMPLE_TASK_FILE = """
tasks:
  - id: offline-inspection
    tenant: acme
    handler: inspect_offline
    trigger: {cron: "*/15 * * * *", timezone: Asia/Shanghai}
    sharding: {strategy: groups, source: device_directory}
    blocking: {policy: serial, max_queued: 1}
    misfire: {policy: fire_once, grace_s: 300}
    retry: {max_attempts: 3, backoff_s: 30}
    timeout_s: 300
    params: {heartbeat_timeout_s: 600}
  - id: device-scan
    handler: noop
    trigger: {rate: 1h}
    sharding: {strategy: id_range, shards: 8, key_space: device_id}
  - id: tenant-daily-report
    handler: tenant_report
    reduce: tenant_report_merge
    trigger: {cron: "5 0 * * *", timezone: Europe/Berlin}
    business_date: previous_day
    sharding: {strategy: static, shards: [{tenant: acme}, {tenant: globex}, {tenant: initech}]}
    misfire: {policy: catch_up, max_catch_up: 3}
  - id: billing-settlement
    handler: billing_settlement
    trigger: {after: [tenant-daily-report]}
"""


def good(task_id: str) -> dict[str, Any]:
    return {"id": task_id, "handler": "noop", "trigger": {"rate": "1h"}}


def bad_task(**fields: Any) -> dict[str, Any]:
    data: dict[str, Any] = {"id": "b", "handler": "noop", "trigger": {"cron": "0 * * * *"}}
    data.update(fields)
    return data


def problems_of(data: Any, handlers: set[str] | None = None) -> list[str]:
    with pytest.raises(TaskFileError) as caught:
        parse_task_file(data, handlers=handlers or {"noop"})
    assert str(caught.value) == "\n".join(caught.value.problems)
    return caught.value.problems


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        pytest.param(
            {"trigger": {"cron": "61 * * * *"}}, "task 'b': trigger.cron: ", id="invalid-cron"
        ),
        pytest.param(
            {"trigger": {"cron": "0 10 * * ? *"}}, "task 'b': trigger.cron: ", id="aws-6-field-cron"
        ),
        pytest.param(
            {"trigger": {"cron": "0 * * * *", "timezone": "Mars/Olympus_Mons"}},
            "task 'b': trigger.",
            id="unknown-timezone",
        ),
        pytest.param({"handler": "nope"}, "task 'b': handler: unknown handler", id="handler"),
        pytest.param(
            {"reduce": "nope"}, "task 'b': reduce: unknown handler", id="unknown-reduce-handler"
        ),
        pytest.param({"timeout_s": 0}, "task 'b': timeout_s: ", id="zero-timeout"),
        pytest.param({"timeout_s": -30}, "task 'b': timeout_s: ", id="negative-timeout"),
        pytest.param({"colour": "red"}, "task 'b': colour", id="unknown-field"),
        pytest.param(
            {"retry": {"max_attempts": 3, "colour": 1}}, "task 'b': retry.colour", id="nested-typo"
        ),
        pytest.param(
            {"trigger": {"cron": "0 * * * *", "rate": "1h"}},
            "task 'b': trigger: ",
            id="two-trigger-kinds",
        ),
        pytest.param({"trigger": {"rate": "5x"}}, "task 'b': trigger.rate: ", id="invalid-rate"),
        pytest.param(
            {"misfire": {"policy": "never"}}, "task 'b': misfire.policy: ", id="unknown-policy"
        ),
    ],
)
def test_a_problem_names_the_task_and_the_field(fields: dict[str, Any], expected: str) -> None:
    problems = problems_of({"tasks": [good("a"), bad_task(**fields), good("c")]})
    assert len(problems) == 1, problems
    assert problems[0].startswith(expected), problems


def test_unknown_timezone_problem_names_the_timezone_field() -> None:
    fields = {"trigger": {"cron": "0 * * * *", "timezone": "Mars/Olympus_Mons"}}
    (problem,) = problems_of({"tasks": [bad_task(**fields)]})
    location, _, message = problem.partition(": ")
    assert location == "task 'b'"
    assert message.split(": ")[0].endswith("timezone")
    assert "Mars/Olympus_Mons" in message


def test_every_problem_of_a_file_is_listed() -> None:
    problems = problems_of(
        {
            "tasks": [
                bad_task(id="x", timeout_s=0),
                bad_task(id="y", colour="red"),
                bad_task(id="z", handler="nope"),
            ]
        }
    )
    assert any(p.startswith("task 'x': timeout_s: ") for p in problems)
    assert any(p.startswith("task 'y': colour") for p in problems)
    # Handlers are checked once the file is well-formed: a handler problem alone is reported too.
    (handler_problem,) = problems_of({"tasks": [bad_task(id="z", handler="nope")]})
    assert handler_problem.startswith("task 'z': handler: unknown handler 'nope'")


def test_a_task_without_an_id_is_named_by_position() -> None:
    problems = problems_of({"tasks": [good("a"), {"handler": "noop", "trigger": {"rate": "1h"}}]})
    assert problems == ["task #2: id: Field required"]


@pytest.mark.parametrize("data", [None, [], {"task": []}, "tasks: []"])
def test_not_a_task_file(data: Any) -> None:
    assert problems_of(data) == ["(file): a task file is a mapping with a 'tasks' list"]


def test_duplicate_task_ids_are_refused() -> None:
    (problem,) = problems_of({"tasks": [good("a"), good("a")]})
    assert "'a'" in problem
    assert "twice" in problem


def test_one_bad_task_in_ten_writes_nothing() -> None:
    store = MemoryTaskStore()
    tasks = [good(f"t{i}") for i in range(10)]
    tasks[6] = bad_task(id="t6", timeout_s=0)

    def parse_then_apply() -> None:
        definitions = parse_task_file({"tasks": tasks}, handlers={"noop"})
        apply_tasks(definitions, store, now=T0)  # never reached

    with pytest.raises(TaskFileError) as caught:
        parse_then_apply()
    assert caught.value.problems == ["task 't6': timeout_s: Input should be greater than 0"]
    assert store.list_tasks() == []

    tasks[6] = good("t6")
    result = apply_tasks(parse_task_file({"tasks": tasks}, handlers={"noop"}), store, now=T0)
    assert sorted(result.created) == sorted(f"t{i}" for i in range(10))
    assert len(store.list_tasks()) == 10


def test_example_task_file_file_is_accepted() -> None:
    data = yaml.safe_load(EXAMPLE_TASK_FILE)
    tasks = {t.id: t for t in parse_task_file(data, handlers=EXAMPLE_HANDLERS)}
    assert list(tasks) == [
        "offline-inspection",
        "device-scan",
        "tenant-daily-report",
        "billing-settlement",
    ]

    inspection = tasks["offline-inspection"]
    assert inspection.tenant == "acme"
    assert inspection.trigger == CronTrigger(cron="*/15 * * * *", timezone="Asia/Shanghai")
    assert isinstance(inspection.sharding, GroupsSharding)
    assert inspection.sharding.source == "device_directory"
    assert inspection.blocking.policy is BlockingPolicy.SERIAL
    assert inspection.blocking.max_queued == 1
    assert inspection.misfire.policy is MisfirePolicy.FIRE_ONCE
    assert inspection.misfire.grace_s == 300
    assert (inspection.retry.max_attempts, inspection.retry.backoff_s) == (3, 30)
    assert inspection.timeout_s == 300
    assert inspection.params == {"heartbeat_timeout_s": 600}

    scan = tasks["device-scan"]
    assert isinstance(scan.trigger, RateTrigger)
    assert scan.trigger.period == timedelta(hours=1)
    assert isinstance(scan.sharding, IdRangeSharding)
    assert (scan.sharding.shards, scan.sharding.key_space) == (8, "device_id")

    report = tasks["tenant-daily-report"]
    assert report.reduce == "tenant_report_merge"
    assert report.business_date is BusinessDateRule.PREVIOUS_DAY
    assert report.timezone == "Europe/Berlin"
    assert isinstance(report.sharding, StaticSharding)
    assert report.sharding.shards == [
        {"tenant": "acme"},
        {"tenant": "globex"},
        {"tenant": "initech"},
    ]
    assert report.misfire.policy is MisfirePolicy.CATCH_UP
    assert report.misfire.max_catch_up == 3

    settlement = tasks["billing-settlement"]
    assert settlement.trigger == AfterTrigger(after=["tenant-daily-report"])
    assert isinstance(settlement.sharding, NoSharding)


def test_example_task_file_needs_its_handlers_registered() -> None:
    problems = problems_of(yaml.safe_load(EXAMPLE_TASK_FILE), handlers={"noop"})
    assert sorted(p.split(":")[0] + ":" + p.split(":")[1] for p in problems) == [
        "task 'billing-settlement': handler",
        "task 'offline-inspection': handler",
        "task 'tenant-daily-report': handler",
        "task 'tenant-daily-report': reduce",
    ]


def test_definitions_round_trip_through_json() -> None:
    for definition in parse_task_file(yaml.safe_load(EXAMPLE_TASK_FILE), handlers=EXAMPLE_HANDLERS):
        assert TaskDefinition.model_validate_json(definition.model_dump_json()) == definition


@pytest.mark.parametrize(
    ("sharding", "message"),
    [
        ({"strategy": "id_range", "shards": 5, "id_min": 10, "id_max": 10}, "greater than id_min"),
        ({"strategy": "id_range", "shards": 11, "id_min": 0, "id_max": 10}, "more shards"),
        ({"strategy": "static", "shards": []}, "at least 1"),
        ({"strategy": "hash"}, "strategy"),
    ],
)
def test_sharding_specs_are_checked(sharding: dict[str, Any], message: str) -> None:
    (problem,) = problems_of({"tasks": [bad_task(sharding=sharding)]})
    assert problem.startswith("task 'b': sharding")
    assert message in problem


# -- apply --------------------------------------------------------------------------------------


def test_apply_sets_the_first_fire_time_from_now() -> None:
    store = MemoryTaskStore()
    apply_tasks([task("a", trigger={"cron": "*/15 * * * *"})], store, now=T0 + timedelta(minutes=7))
    record = store.get_task("a")
    assert record is not None
    assert record.version == 1
    assert record.next_fire == T0 + timedelta(minutes=15)
    assert record.last_slot is None


def test_reapplying_an_unchanged_file_changes_nothing() -> None:
    store = MemoryTaskStore()
    definitions = [task("a"), task("b")]
    apply_tasks(definitions, store, now=T0)
    before = store.list_tasks()
    result = apply_tasks(definitions, store, now=T0 + timedelta(hours=5))
    assert result.unchanged == ["a", "b"]
    assert (result.created, result.updated) == ([], [])
    assert store.list_tasks() == before


def test_changing_params_keeps_the_clock_and_bumps_the_version() -> None:
    store = MemoryTaskStore()
    apply_tasks([task("a")], store, now=T0)
    store.advance_task(
        "a",
        expected_next_fire=T0 + timedelta(hours=1),
        next_fire=T0 + timedelta(hours=2),
        last_slot=T0 + timedelta(hours=1),
    )
    result = apply_tasks([task("a", params={"x": 1})], store, now=T0 + timedelta(minutes=90))
    record = store.get_task("a")
    assert result.updated == ["a"]
    assert record is not None
    assert record.version == 2
    assert record.definition.params == {"x": 1}
    assert record.next_fire == T0 + timedelta(hours=2)
    assert record.last_slot == T0 + timedelta(hours=1)


def test_changing_the_trigger_restarts_the_clock_after_the_last_claimed_slot() -> None:
    store = MemoryTaskStore()
    apply_tasks([task("a", trigger={"rate": "15m"})], store, now=T0)
    claimed = T0 + timedelta(hours=1)
    store.advance_task(
        "a",
        expected_next_fire=T0 + timedelta(minutes=15),
        next_fire=claimed + timedelta(minutes=15),
        last_slot=claimed,
    )
    # Applied "before" the last claimed slot (a skewed operator clock): never re-fire a slot.
    apply_tasks([task("a", trigger={"rate": "30m"})], store, now=T0)
    record = store.get_task("a")
    assert record is not None
    assert record.next_fire == claimed + timedelta(minutes=30)
    assert record.last_slot == claimed
