"""Typed params checked at apply: a handler (or reduce handler) with a params model has the
task's `params` validated against it, each problem naming its field path, through the CLI
(exit 2, nothing written) and the API (400, the same lines)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from pydantic import BaseModel, Field

from iotsched import ShardContext, bootstrap, handler
from iotsched.api.app import create_app
from iotsched.cli.main import cli
from iotsched.clock import ManualClock
from iotsched.services.definitions.task_file import (
    TaskFileError,
    parse_task_file,
)
from iotsched.services.wiring import Wiring
from tests.api.conftest import Client
from tests.distributions import installed
from tests.support import T0


class Window(BaseModel):
    days: int = Field(ge=1, le=31)


class CloseParams(BaseModel):
    currency: str = "EUR"
    accounts: int
    window: Window = Window(days=1)


@handler("billing_close", params=CloseParams)
def billing_close(ctx: ShardContext, params: CloseParams) -> dict[str, Any]:
    return {"currency": params.currency}


class MergeParams(BaseModel):
    prefix: str


@handler("merge", params=MergeParams)
def merge(ctx: ShardContext, params: MergeParams) -> None:
    return None


def untyped(ctx: ShardContext) -> None:
    return None


def services() -> Wiring:
    return bootstrap.build_memory(
        clock=ManualClock(T0),
        handlers={"billing_close": billing_close, "merge": merge, "untyped": untyped},
    )


def one_task(params: Any, handler: str = "billing_close", **fields: Any) -> dict[str, Any]:
    return {
        "tasks": [
            {"id": "close", "handler": handler, "trigger": {"rate": "1h"}, "params": params}
            | fields
        ]
    }


def problems(data: Any) -> list[str]:
    with pytest.raises(TaskFileError) as caught:
        parse_task_file(data, handlers=services().handlers)
    return caught.value.problems


def test_params_that_fit_the_model_are_accepted() -> None:
    (definition,) = parse_task_file(
        one_task({"accounts": 3, "window": {"days": 7}}), handlers=services().handlers
    )
    assert definition.params == {"accounts": 3, "window": {"days": 7}}  # stored as written


def test_each_problem_names_its_field_path() -> None:
    assert problems(one_task({"currency": 5, "window": {"days": 40}})) == [
        "task 'close': params.currency: Input should be a valid string",
        "task 'close': params.accounts: Field required",
        "task 'close': params.window.days: Input should be less than or equal to 31",
    ]


def test_the_reduce_handler_s_model_is_checked_too() -> None:
    assert problems(one_task({"accounts": 1}, reduce="merge")) == [
        "task 'close': params.prefix: Field required"
    ]


def test_a_handler_without_a_model_takes_any_params() -> None:
    (definition,) = parse_task_file(
        one_task({"anything": [1, 2]}, handler="untyped"), handlers=services().handlers
    )
    assert definition.params == {"anything": [1, 2]}


ACME = """
    from pydantic import BaseModel
    from iotsched import handler

    class CloseParams(BaseModel):
        currency: str = "EUR"
        accounts: int

    @handler("billing_close", params=CloseParams)
    def billing_close(ctx, params):
        return None
"""


def test_tasks_apply_exits_2_on_bad_params_writing_nothing(tmp_path: Path) -> None:
    path = tmp_path / "tasks.yaml"
    path.write_text(yaml.safe_dump(one_task({"currency": 5})))
    wired = bootstrap.build_memory(clock=ManualClock(T0))
    with installed(tmp_path / "site") as dists:  # the CLI checks the installed handlers
        dists.add(
            "acme-jobs",
            "1.0",
            handlers={"billing_close": "acme_jobs.close:billing_close"},
            modules={"acme_jobs.close": ACME},
        )
        done = CliRunner().invoke(
            cli, ["tasks", "apply", str(path)], obj={"services": wired, "actor": "local:test"}
        )
    assert done.exit_code == 2, done.output
    assert "task 'close': params.currency: Input should be a valid string" in done.output
    assert "task 'close': params.accounts: Field required" in done.output
    assert "nothing was written" in done.output and "Traceback" not in done.output
    assert list(wired.tasks.list_tasks()) == []


def test_the_api_answers_400_with_the_field_path() -> None:
    wired = services()
    api = Client(create_app(lambda: wired), wired)
    answer = api.put("/tasks/close", one_task({"accounts": "many"})["tasks"][0])
    assert answer.status == 400, answer.body
    assert answer.problems == [
        {
            "field": "task 'close': params.accounts",
            "message": "Input should be a valid integer, unable to parse string as an integer",
        }
    ]
    answer = api.post("/tasks", one_task({"accounts": 2, "window": {"days": 0}}))
    assert answer.status == 400
    assert [p["field"] for p in answer.problems] == ["task 'close': params.window.days"]
    assert api.get("/tasks").body == []
    assert api.put("/tasks/close", one_task({"accounts": 2})["tasks"][0]).status == 200
