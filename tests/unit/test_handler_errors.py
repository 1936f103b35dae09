"""A handler reference that cannot be used: refused at apply (CLI exit 2, API 400, nothing
written, the handler, its package and version and the cause named), and, where a task names one
that broke after its apply, an attempt that fails for good, naming the same."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from iotsched import bootstrap
from iotsched.api.app import create_app
from iotsched.cli.main import cli
from iotsched.clock import ManualClock
from iotsched.core.instance_record import InstanceStatus
from iotsched.core.shard_record import ShardStatus
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.definitions.task_file import (
    TaskFileError,
    parse_task_file,
)
from iotsched.services.execution.batch import run_shard
from iotsched.services.execution.outcomes import (
    Delivery,
    RetryShardError,
    ShardOutcome,
)
from iotsched.services.scheduling.send import shard_messages
from iotsched.services.scheduling.tick import dispatch_tick
from iotsched.services.wiring import Wiring
from iotsched.tasklib import registry
from tests.api.conftest import Client
from tests.distributions import Distributions, installed
from tests.support import T0, task

GOOD = """
    from iotsched import handler

    @handler("close")
    def close(ctx):
        return {"closed": True}
"""

#: Each way a handler reference breaks: (case, how its distributions are made, the handler's
#: name, what the problem must say besides the name).
CASES: dict[str, tuple[str, list[str]]] = {
    "missing_module": ("gone", ["broken-jobs 2.0", "module 'broken_jobs.gone' is not installed"]),
    "import_raises": ("explodes", ["broken-jobs 2.0", "raised RuntimeError: no config"]),
    "missing_dependency": (
        "needs",
        ["broken-jobs 2.0", "ModuleNotFoundError", "no_such_dependency_xyz"],
    ),
    "not_callable": ("constant", ["broken-jobs 2.0", "is not callable"]),
    "no_attribute": ("absent", ["broken-jobs 2.0", "has no attribute 'nothing_here'"]),
    "renamed": ("listed", ["broken-jobs 2.0", "declared as @handler('close')", "'listed'"]),
    "twice": ("close", ["good-jobs 1.0", "other-jobs 3.1", "defined twice"]),
}


def make_broken(dists: Distributions) -> None:
    dists.add(
        "good-jobs",
        "1.0",
        handlers={"close": "good_jobs.close:close"},
        modules={"good_jobs.close": GOOD},
    )
    dists.add(
        "broken-jobs",
        "2.0",
        handlers={
            "gone": "broken_jobs.gone:run",
            "explodes": "broken_jobs.explodes:run",
            "needs": "broken_jobs.needs:run",
            "constant": "broken_jobs.values:LIMIT",
            "absent": "broken_jobs.values:nothing_here",
            "listed": "broken_jobs.renamed:close",
        },
        modules={
            "broken_jobs.explodes": "raise RuntimeError('no config')\n",
            "broken_jobs.needs": "import no_such_dependency_xyz\n",
            "broken_jobs.values": "LIMIT = 3\n",
            "broken_jobs.renamed": GOOD,
        },
    )
    dists.add(
        "other-jobs",
        "3.1",
        handlers={"close": "other_jobs.close:close"},
        modules={"other_jobs.close": GOOD},
    )


@pytest.fixture
def broken(tmp_path: Path) -> Iterator[Distributions]:
    with installed(tmp_path / "site") as dists:
        make_broken(dists)
        yield dists


def one_task(handler: str, **fields: Any) -> dict[str, Any]:
    return {"tasks": [{"id": "job", "handler": handler, "trigger": {"rate": "1h"}, **fields}]}


@pytest.mark.parametrize("case", sorted(CASES))
def test_apply_refuses_a_handler_that_cannot_be_loaded_naming_package_and_cause(
    broken: Distributions, case: str
) -> None:
    name, expected = CASES[case]
    with pytest.raises(TaskFileError) as caught:
        parse_task_file(one_task(name), handlers=registry())
    (problem,) = caught.value.problems
    assert problem.startswith(f"task 'job': handler: handler {name!r} from ")
    for text in expected:
        assert text in problem, problem


def test_a_reduce_handler_is_checked_as_the_handler_is(broken: Distributions) -> None:
    with pytest.raises(TaskFileError) as caught:
        parse_task_file(one_task("noop", reduce="explodes"), handlers=registry())
    (problem,) = caught.value.problems
    assert problem.startswith("task 'job': reduce: handler 'explodes' from broken-jobs 2.0")


def test_a_good_handler_beside_broken_ones_is_accepted(broken: Distributions) -> None:
    dists = broken
    dists.add("fine-jobs", "0.1", handlers={"fine": "good_jobs.close:close"})
    with pytest.raises(TaskFileError):  # declared as 'close', listed as 'fine'
        parse_task_file(one_task("fine"), handlers=registry())
    (definition,) = parse_task_file(one_task("noop"), handlers=registry())
    assert definition.handler == "noop"


@pytest.mark.parametrize("case", sorted(CASES))
def test_tasks_apply_exits_2_writing_nothing_and_printing_no_trace(
    broken: Distributions, tmp_path: Path, case: str
) -> None:
    name, expected = CASES[case]
    path = tmp_path / "tasks.yaml"
    path.write_text(yaml.safe_dump(one_task(name)))
    services = bootstrap.build_memory(clock=ManualClock(T0))
    for verb in (["tasks", "apply"], ["tasks", "apply", "--dry-run"]):
        done = CliRunner().invoke(
            cli, [*verb, str(path)], obj={"services": services, "actor": "local:test"}
        )
        assert done.exit_code == 2, (verb, done.output)
        assert "Traceback" not in done.output
        assert f"handler {name!r} from" in done.output
        for text in expected:
            assert text in done.output.replace("\n", " ") or text in done.output, done.output
    assert list(services.tasks.list_tasks()) == []


def test_the_api_answers_400_naming_the_package(broken: Distributions) -> None:
    services = bootstrap.build_memory(clock=ManualClock(T0))
    api = Client(create_app(lambda: services), services)
    for answer in (
        api.put("/tasks/job", one_task("explodes")["tasks"][0]),
        api.post("/tasks", one_task("explodes")),
    ):
        assert answer.status == 400, answer.body
        (problem,) = answer.problems
        assert problem["field"] == "task 'job': handler"
        assert problem["message"].startswith("handler 'explodes' from broken-jobs 2.0")
        assert "raised RuntimeError: no config" in problem["message"]
    assert api.get("/tasks").body == []


def test_a_broken_planner_is_refused_at_apply_naming_its_package(tmp_path: Path) -> None:
    with installed(tmp_path / "site") as dists:
        dists.add(
            "plan-jobs",
            "0.3",
            planners={"regions": "plan_jobs.regions:regions"},
            modules={"plan_jobs.regions": "raise ImportError('cannot load the region table')\n"},
        )
        sharding = {"strategy": "custom", "planner": "regions", "params": {}}
        with pytest.raises(TaskFileError) as caught:
            parse_task_file(one_task("noop", sharding=sharding), handlers=registry())
    (problem,) = caught.value.problems
    assert problem.startswith("task 'job': sharding.planner: planner 'regions' from plan-jobs 0.3")
    assert "ImportError: cannot load the region table" in problem


# At run time: a task applied before its handler's package broke (or was removed).


def fire(services: Wiring, handler: str, **fields: Any) -> Any:
    apply_tasks(
        [task("job", handler=handler, **fields)], services.tasks, now=T0 - timedelta(hours=1)
    )
    report = dispatch_tick(T0, services)
    (iid,) = report.claimed
    instance = services.instances.get_instance(iid)
    assert instance is not None
    return iid, shard_messages(instance)


def deliver(services: Wiring, message: Any, receipt: str = "rh") -> ShardOutcome:
    return run_shard(
        Delivery(body=message.model_dump_json(), receipt_handle=receipt), services, worker="w"
    )


def test_a_handler_broken_after_apply_fails_its_attempt_for_good(broken: Distributions) -> None:
    services = bootstrap.build_memory(clock=ManualClock(T0 + timedelta(seconds=5)))
    iid, (message,) = fire(services, "explodes", retry={"max_attempts": 5, "backoff_s": 0})
    assert deliver(services, message) is ShardOutcome.FAILED  # no RetryShardError: no retry
    (shard,) = services.instances.list_shards(iid)
    assert shard.status is ShardStatus.FAILED and len(shard.attempts) == 1
    assert shard.error is not None
    assert "handler 'explodes' from broken-jobs 2.0" in shard.error
    assert "raised RuntimeError: no config" in shard.error
    assert (shard.attempts[0].package, shard.attempts[0].version) == ("broken-jobs", "2.0")
    ended = services.instances.get_instance(iid)
    assert ended is not None and ended.status is InstanceStatus.FAILED


def test_a_handler_whose_package_was_removed_fails_for_good() -> None:
    services = bootstrap.build_memory(clock=ManualClock(T0 + timedelta(seconds=5)))
    iid, (message,) = fire(services, "uninstalled", retry={"max_attempts": 5, "backoff_s": 0})
    assert deliver(services, message) is ShardOutcome.FAILED
    (shard,) = services.instances.list_shards(iid)
    assert len(shard.attempts) == 1
    assert "no handler named 'uninstalled' is installed" in (shard.error or "")


def test_the_failure_is_not_retried_by_a_second_delivery(broken: Distributions) -> None:
    services = bootstrap.build_memory(clock=ManualClock(T0 + timedelta(seconds=5)))
    iid, (message,) = fire(services, "gone", retry={"max_attempts": 3, "backoff_s": 0})
    assert deliver(services, message) is ShardOutcome.FAILED
    with contextlib.suppress(RetryShardError):
        assert deliver(services, message, receipt="rh2") is not ShardOutcome.SUCCEEDED
    (shard,) = services.instances.list_shards(iid)
    assert len(shard.attempts) == 1 and shard.status is ShardStatus.FAILED
