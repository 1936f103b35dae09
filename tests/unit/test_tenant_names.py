"""Issue item "tenant names are not validated": one pattern for tenant names, wherever a name
enters (a task's `tenant`, a file's `tenants:`, `groups` sharding's `tenant`, the CLI's
`--tenant`, the tenants header and IAM tag), and `-` meaning "no tenant" to every filter."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from iotsched import bootstrap
from iotsched.api.identity import local_identity, tenants_from_tags
from iotsched.cli.main import cli
from iotsched.clock import ManualClock
from iotsched.services.definitions.task_file import TaskFileError, parse_task_file
from iotsched.services.wiring import Wiring
from iotsched.tasklib import registry
from tests.support import T0

#: Names the issue found accepted, and a few of their kind.
BAD_NAMES = [
    pytest.param("acme#x", id="hash"),
    pytest.param("acme/../globex", id="path"),
    pytest.param("..", id="dots"),
    pytest.param("acme corp", id="space"),
    pytest.param("acme\x00", id="nul"),
    pytest.param("acme\n", id="newline"),
    pytest.param("*", id="star"),
    pytest.param("-", id="dash"),
    pytest.param("Acme", id="upper-case"),
    pytest.param("a" * 1000, id="1000-chars"),
    pytest.param("", id="empty"),
]
GOOD_NAMES = ["acme", "globex-eu", "t1.prod_x", "a" * 64]


def _task(**fields: Any) -> dict[str, Any]:
    return {"id": "t", "handler": "noop", "trigger": {"rate": "1h"}, **fields}


def _problems(data: dict[str, Any]) -> list[str]:
    with pytest.raises(TaskFileError) as refused:
        parse_task_file(data, handlers=registry())
    return refused.value.problems


@pytest.mark.parametrize("name", BAD_NAMES)
def test_a_bad_tenant_name_is_refused_wherever_a_file_gives_one(name: str) -> None:
    where = {
        "task 't': tenant": {"tasks": [_task(tenant=name)]},
        "tenants.0.name": {"tasks": [], "tenants": [{"name": name}]},
        "task 't': sharding.tenant": {
            "tasks": [_task(sharding={"strategy": "groups", "tenant": name})]
        },
    }
    for field, data in where.items():
        (problem,) = _problems(data)
        assert problem.startswith(f"{field}: "), problem
        assert "^[a-z0-9][a-z0-9._-]{0,63}$" in problem, problem


@pytest.mark.parametrize("name", GOOD_NAMES)
def test_a_good_tenant_name_is_accepted(name: str) -> None:
    data = {"tasks": [_task(tenant=name)], "tenants": [{"name": name}]}
    (task,) = parse_task_file(data, handlers=registry())
    assert task.tenant == name


def test_the_tenants_header_and_tag_hold_names_only() -> None:
    # A list of names separated by blanks; what is not a tenant name grants nothing.
    text = " acme  globex\tBad#Name ../x "
    assert tenants_from_tags({"iotsched:tenants": text}) == {"acme", "globex"}
    header = local_identity({"headers": {"X-Iotsched-Local-Tenants": text}})
    assert header.tenants == {"acme", "globex"}


@pytest.fixture
def services() -> Wiring:
    return bootstrap.build_memory(clock=ManualClock(T0))


def invoke(services: Wiring, *args: str) -> Result:
    return CliRunner().invoke(
        cli, list(args), obj={"services": services, "actor": "local:t"}, env={"COLUMNS": "200"}
    )


@pytest.mark.parametrize(
    "verb",
    [["tasks", "list"], ["instances"], ["alerts"], ["overview"]],
    ids=lambda v: " ".join(v),
)
def test_the_cli_refuses_a_tenant_filter_that_names_no_tenant(
    services: Wiring, verb: list[str]
) -> None:
    result = invoke(services, *verb, "--tenant", "acme corp")
    assert result.exit_code == 2, result.output
    assert "--tenant" in result.output and "^[a-z0-9][a-z0-9._-]{0,63}$" in result.output
    assert "Traceback" not in result.output


def test_the_cli_tenant_filter_dash_is_no_tenant(services: Wiring, tmp_path: Path) -> None:
    path = tmp_path / "tasks.yaml"
    path.write_text(
        "tasks:\n"
        "  - {id: mine, tenant: acme, handler: noop, trigger: {rate: 1h}}\n"
        "  - {id: ops, handler: noop, trigger: {rate: 1h}}\n"
    )
    assert invoke(services, "tasks", "apply", str(path)).exit_code == 0
    listed = invoke(services, "tasks", "list", "--tenant", "-", "--json")
    assert listed.exit_code == 0, listed.output
    assert [t["id"] for t in json.loads(listed.output)] == ["ops"]
