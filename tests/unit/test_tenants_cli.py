"""`iotsched tenants` and `max_tasks` at apply, on the in-memory services: a file whose tasks
would take a tenant past its `max_tasks` is refused with the quota named, a non-zero exit and
nothing written; the tenants' quotas reach every task of the tenant and show in `tenants`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from iotsched import bootstrap
from iotsched.cli.main import cli
from iotsched.clock import ManualClock
from iotsched.services.wiring import Wiring
from tests.support import T0

FILE = """\
tenants:
  - name: acme
    quotas: {{max_tasks: {max_tasks}, max_concurrent_shards: 4}}
tasks:
{tasks}
"""


def _tasks(*ids: str, tenant: str = "acme") -> str:
    return "\n".join(
        f"  - {{id: {i}, tenant: {tenant}, handler: noop, trigger: {{rate: 1h}}}}" for i in ids
    )


@pytest.fixture
def services() -> Wiring:
    return bootstrap.build_memory(clock=ManualClock(T0))


def invoke(services: Wiring, *args: str) -> Result:
    return CliRunner().invoke(
        cli, list(args), obj={"services": services, "actor": "local:t"}, env={"COLUMNS": "200"}
    )


def as_json(services: Wiring, *args: str) -> Any:
    result = invoke(services, *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_max_tasks_refuses_the_file_that_would_pass_it(services: Wiring, tmp_path: Path) -> None:
    path = tmp_path / "tasks.yaml"
    path.write_text(FILE.format(max_tasks=2, tasks=_tasks("a", "b", "c")))
    result = invoke(services, "tasks", "apply", str(path))
    assert result.exit_code == 1
    assert "tenant acme has reached its quota max_tasks (2)" in result.output
    assert "Traceback" not in result.output
    assert services.tasks.list_tasks() == []  # nothing of the file written
    path.write_text(FILE.format(max_tasks=2, tasks=_tasks("a", "b")))
    assert as_json(services, "tasks", "apply", str(path))["created"] == ["a", "b"]
    # Re-applying the same tasks counts nothing new; one more is refused, then a delete makes
    # room for it.
    assert as_json(services, "tasks", "apply", str(path))["unchanged"] == ["a", "b"]
    more = tmp_path / "more.yaml"
    more.write_text("tasks:\n" + _tasks("c"))
    refused = invoke(services, "tasks", "apply", str(more))
    assert refused.exit_code == 1 and "max_tasks (2)" in refused.output
    assert services.tasks.get_task("c") is None
    assert invoke(services, "tasks", "delete", "a").exit_code == 0
    assert as_json(services, "tasks", "apply", str(more))["created"] == ["c"]
    (acme,) = as_json(services, "tenants")
    assert acme == {
        "name": "acme",
        "tasks": ["b", "c"],
        "quotas": {"max_tasks": 2, "max_concurrent_shards": 4},
        "task_count": 2,
    }


def test_a_quota_set_later_counts_the_tasks_already_there(services: Wiring, tmp_path: Path) -> None:
    plain = tmp_path / "plain.yaml"
    plain.write_text("tasks:\n" + _tasks("a", "b", "c") + "\n" + _tasks("g", tenant="globex"))
    as_json(services, "tasks", "apply", str(plain))
    assert as_json(services, "tenants", "acme")[0]["quotas"] == {}
    # The quota comes with a file naming one of the tenant's tasks: the tenant's three tasks
    # are counted, every one of them stores the quotas, and a fourth is refused.
    path = tmp_path / "tasks.yaml"
    path.write_text(FILE.format(max_tasks=3, tasks=_tasks("a")))
    as_json(services, "tasks", "apply", str(path))
    for task_id in "abc":
        stored = services.tasks.get_task(task_id)
        assert stored is not None and stored.quotas is not None
        assert stored.quotas.max_tasks == 3
    globex = services.tasks.get_task("g")
    assert globex is not None and globex.quotas is None
    path.write_text(FILE.format(max_tasks=3, tasks=_tasks("a", "d")))
    refused = invoke(services, "tasks", "apply", str(path))
    assert refused.exit_code == 1 and "task d not created" in refused.output
    # `quotas: {}` removes them, and the count with them.
    path.write_text("tenants: [{name: acme, quotas: {}}]\ntasks:\n" + _tasks("a", "d"))
    assert as_json(services, "tasks", "apply", str(path))["created"] == ["d"]
    (acme,) = as_json(services, "tenants", "acme")
    assert acme["quotas"] == {} and acme["task_count"] is None
    assert len(acme["tasks"]) == 4


def test_tenants_names_an_unknown_tenant(services: Wiring) -> None:
    result = invoke(services, "tenants", "nobody")
    assert result.exit_code != 0 and "nobody" in result.output
    assert "Traceback" not in result.output
    table = invoke(services, "tenants")
    assert table.exit_code == 0 and "no tenants" in table.output
