"""A task too large for one DynamoDB item is bad input, refused before anything is written,
with the message `iotsched tasks apply` prints (the check is the use-case's, shared)."""

from __future__ import annotations

from typing import Any

import pytest

from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.definitions.task_checks import MAX_DEFINITION_BYTES
from iotsched.services.definitions.task_file import (
    TaskFileError,
    parse_task_file,
)
from iotsched.services.wiring import Wiring
from iotsched.tasklib import registry
from tests.api.conftest import DEVICE_SCAN, Client
from tests.support import T0

HUGE = {**DEVICE_SCAN, "params": {"blob": "x" * 420_000}}


def the_cli_message() -> str:
    with pytest.raises(TaskFileError) as refused:
        parse_task_file({"tasks": [HUGE]}, handlers=registry())
    (problem,) = refused.value.problems
    return problem


def test_the_message_names_the_field_and_the_limit() -> None:
    problem = the_cli_message()
    assert problem.startswith("task 'device-scan': params: too large to store: ")
    assert "exceeds" in problem and "DynamoDB's 400 KB item limit" in problem


@pytest.mark.parametrize("store", ["memory", pytest.param("moto", marks=pytest.mark.moto)])
def test_the_api_answers_400_with_the_cli_message_and_writes_nothing(
    store: str, request: pytest.FixtureRequest
) -> None:
    client: Client = request.getfixturevalue("api" if store == "memory" else "moto_api")
    field = "task 'device-scan': params"
    message = the_cli_message().removeprefix(f"{field}: ")
    for answer in (
        client.put("/tasks/device-scan", HUGE),
        client.post("/tasks", {"tasks": [{**DEVICE_SCAN, "id": "small"}, HUGE]}),
    ):
        assert answer.status == 400, answer.body
        assert answer.problems == [{"field": field, "message": message}]
    assert client.get("/tasks").body == []


@pytest.mark.moto
def test_the_largest_task_accepted_is_stored_by_dynamodb_and_one_byte_more_is_refused(
    moto_services: Wiring,
) -> None:
    def task_file(blob: str) -> dict[str, Any]:
        return {
            "tasks": [
                {
                    "id": "big",
                    "handler": "noop",
                    "trigger": {"rate": "1h"},
                    # not params: every shard message carries those, and SQS takes less
                    "description": blob,
                }
            ]
        }

    (empty,) = parse_task_file(task_file(""), handlers=registry())
    # the definition is stored as one JSON string: its UTF-8 bytes count, not its characters
    room = MAX_DEFINITION_BYTES - len("definition") - len(empty.model_dump_json().encode())
    largest = parse_task_file(task_file("é" * (room // 2) + "x" * (room % 2)), handlers=registry())
    with pytest.raises(TaskFileError) as refused:
        parse_task_file(task_file("é" * (room // 2) + "xx"), handlers=registry())
    assert refused.value.problems[0].startswith("task 'big': description: too large to store")
    assert apply_tasks(largest, moto_services.tasks, now=T0).created == ["big"]
    stored = moto_services.tasks.get_task("big")
    assert stored is not None and stored.definition == largest[0]
    # (Not an update: moto counts an overwritten attribute's old value as well as its new one,
    # so it refuses updates of definitions over about 200 KB that DynamoDB stores.)
